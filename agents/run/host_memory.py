"""How much more memory this process can take: the host's, or its cgroup's where that is less.

A job under a memory limit (a container, a Slurm allocation) is killed at the limit, however
much the host has free, so every cgroup from the process's own up to the root counts, each as
its limit less its usage. Linux only; elsewhere the answer is unknown (None).
"""

import os

_CGROUP_ROOT = "/sys/fs/cgroup"


def _read_int(path: str) -> int | None:
    """The integer in `path`; None if the file is missing or holds no number ("max")."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _meminfo_available(meminfo: str) -> int | None:
    """MemAvailable of `/proc/meminfo` in bytes: free memory plus what the kernel can reclaim."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _cgroup_dirs(proc_cgroup: str, root: str) -> list[str]:
    """The folders of this process's cgroup and of each ancestor up to `root`, for cgroup v2
    (`memory.max`) and v1 (the memory controller's `memory.limit_in_bytes`)."""
    try:
        with open(proc_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    dirs = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: one unified hierarchy
            base = root
        elif "memory" in controllers.split(","):  # v1: the memory controller's hierarchy
            base = os.path.join(root, "memory")
        else:
            continue
        parts = [p for p in path.split("/") if p]
        dirs += [os.path.join(base, *parts[:k]) for k in range(len(parts), -1, -1)]
    return dirs


def available_bytes(meminfo: str = "/proc/meminfo", proc_cgroup: str = "/proc/self/cgroup",
                    cgroup_root: str = _CGROUP_ROOT) -> int | None:
    """Bytes this process can still allocate before the kernel or its cgroup kills it; None if
    unknown. The arguments are for tests."""
    candidates = [_meminfo_available(meminfo)]
    for folder in _cgroup_dirs(proc_cgroup, cgroup_root):
        for limit_file, usage_file in (("memory.max", "memory.current"),
                                       ("memory.limit_in_bytes", "memory.usage_in_bytes")):
            limit = _read_int(os.path.join(folder, limit_file))
            usage = _read_int(os.path.join(folder, usage_file))
            if limit is not None and usage is not None:
                candidates.append(max(limit - usage, 0))
    known = [c for c in candidates if c is not None]
    return min(known) if known else None
