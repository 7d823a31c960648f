"""agents.run.host_memory on made-up /proc and /sys files: the least of the host's available
memory and every cgroup's limit less its usage."""

import os

from agents.run import host_memory


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def fake_host(tmp_path, available_kb, cgroup_lines):
    write(tmp_path / "meminfo", f"MemTotal: 99999999 kB\nMemAvailable: {available_kb} kB\n")
    write(tmp_path / "cgroup", "\n".join(cgroup_lines) + "\n")
    return dict(meminfo=str(tmp_path / "meminfo"), proc_cgroup=str(tmp_path / "cgroup"),
                cgroup_root=str(tmp_path / "sys"))


def test_without_limits_it_is_the_hosts_available_memory(tmp_path):
    paths = fake_host(tmp_path, 1000, ["0::/job"])
    write(tmp_path / "sys" / "job" / "memory.max", "max\n")
    write(tmp_path / "sys" / "job" / "memory.current", "5000\n")
    assert host_memory.available_bytes(**paths) == 1000 * 1024


def test_a_cgroup_v2_limit_on_an_ancestor_counts_less_its_usage(tmp_path):
    paths = fake_host(tmp_path, 10**9, ["0::/job/step"])
    write(tmp_path / "sys" / "job" / "step" / "memory.max", "max\n")
    write(tmp_path / "sys" / "job" / "step" / "memory.current", "100\n")
    write(tmp_path / "sys" / "job" / "memory.max", "5000\n")
    write(tmp_path / "sys" / "job" / "memory.current", "1200\n")
    assert host_memory.available_bytes(**paths) == 3800


def test_a_cgroup_v1_memory_limit_counts_and_other_controllers_do_not(tmp_path):
    paths = fake_host(tmp_path, 10**9, ["4:memory:/docker/abc", "3:cpu:/docker/abc"])
    folder = tmp_path / "sys" / "memory" / "docker" / "abc"
    write(folder / "memory.limit_in_bytes", "8000\n")
    write(folder / "memory.usage_in_bytes", "3000\n")
    write(tmp_path / "sys" / "cpu" / "docker" / "abc" / "memory.limit_in_bytes", "1\n")
    assert host_memory.available_bytes(**paths) == 5000


def test_unknown_without_proc(tmp_path):
    assert host_memory.available_bytes(meminfo=str(tmp_path / "none"),
                                       proc_cgroup=str(tmp_path / "none"),
                                       cgroup_root=str(tmp_path)) is None

