"""Freed host memory kept for reuse: glibc's malloc told not to hand large blocks back.

An XLA CPU executable allocates its temporaries as one block a call. glibc serves a block above
its mmap threshold (which it raises to at most 32 MB) with fresh pages from `mmap` and unmaps
them when the block is freed, so every call of a large executable faults its temporaries in
and has the kernel zero them again: the IMPALA Atari update (T = 20, B = 8, shallow torso)
took 15.6K page faults and 28 ms of kernel time per update on top of about 80 ms of
computation (`benchmarks/bench_learner_cpu.py --variants default,keep_freed_memory`;
BUILD_NOTES). With malloc's `mmap` off, the heap never trimmed and one arena for all threads,
freed blocks stay in the process and the next call reuses their pages: about 200 faults
and 3 ms of kernel time an update on idle cores.

glibc reads these settings (`GLIBC_TUNABLES`) once, when a process starts; made later with
`mallopt`, they left hundreds to thousands of faults an update in the measurement. So the
launchers restart themselves with them before anything else loads (`os.execve`: the same
process id, arguments and environment plus the tunables). `KEEP_FREED_MEMORY=0` in the
environment keeps glibc's defaults, and a `GLIBC_TUNABLES` that already sets any of malloc's
tunables is left as the user set it. Linux with glibc only.

The price: memory the process frees stays with it for later allocations instead of going back
to the system, so its resident size stays at its peak; and the threads share one arena's lock
(XLA allocates a few blocks a call; Python's small objects do not go through malloc).
"""

import os
import platform
import sys

# No mmap for malloc, no trimming, and one arena: a thread's own arena keeps a large block in a
# heap of its own, which glibc unmaps whole once free whatever the trim threshold says.
TUNABLES = ("glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=2147483647:"
            "glibc.malloc.arena_max=1")
_ENV = "GLIBC_TUNABLES"
OPT_OUT = "KEEP_FREED_MEMORY"  # "0": glibc's defaults


def tunables_env(environ: dict) -> dict | None:
    """`environ` with the tunables added to `GLIBC_TUNABLES`, or None where there is nothing
    to do: not Linux with glibc, `KEEP_FREED_MEMORY=0`, or malloc's tunables already set (by
    the user, or by an earlier restart)."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    current = environ.get(_ENV, "")
    if environ.get(OPT_OUT) == "0" or "glibc.malloc." in current:
        return None
    return dict(environ, **{_ENV: f"{current}:{TUNABLES}" if current else TUNABLES})


def restart_keeping_freed_memory() -> None:
    """Restarts this Python process with the tunables (`os.execve` of the same interpreter and
    arguments); returns at once where `tunables_env` has nothing to do. Call it first in a
    script's `__main__`, before anything allocates much or starts a thread."""
    env = tunables_env(dict(os.environ))
    if env is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable] + sys.orig_argv[1:], env)
