"""What the Ray tests share: a test-local cluster's settings and a check for leftover processes."""


import psutil

# Two CPUs as on this machine; a small object store; the session folder under the test's folder.
LOCAL_CLUSTER = dict(num_cpus=2, object_store_mb=256)


def child_processes() -> set[psutil.Process]:
    """This process's descendants (a local Ray cluster's GCS, raylet and workers among them)."""
    return set(psutil.Process().children(recursive=True))


def assert_all_exited(processes: set[psutil.Process], timeout: float = 20.0) -> None:
    """Waits up to `timeout` s for `processes` to exit; fails naming any still alive."""
    _, alive = psutil.wait_procs(list(processes), timeout=timeout)
    assert not alive, f"processes left behind: {[(p.pid, p.name()) for p in alive]}"
