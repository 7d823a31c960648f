"""Freed host memory kept for reuse (`agents.run.allocator`): the tunables a launcher restarts
with, that the restart keeps the process and its arguments, and that a large block freed and
allocated again no longer faults its pages in anew."""

import os
import subprocess
import sys

import pytest

from agents.run import allocator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GLIBC = allocator.tunables_env({}) is not None
needs_glibc = pytest.mark.skipif(not GLIBC, reason="Linux with glibc only")


@needs_glibc
def test_the_tunables_are_added_once_and_a_users_own_are_kept():
    assert allocator.tunables_env({})["GLIBC_TUNABLES"] == allocator.TUNABLES
    env = allocator.tunables_env({"GLIBC_TUNABLES": "glibc.rtld.nns=4", "X": "1"})
    assert env == {"GLIBC_TUNABLES": f"glibc.rtld.nns=4:{allocator.TUNABLES}", "X": "1"}
    assert allocator.tunables_env(env) is None  # restarted once already
    assert allocator.tunables_env({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}) is None
    assert allocator.tunables_env({"KEEP_FREED_MEMORY": "0"}) is None
    assert allocator.tunables_env({"KEEP_FREED_MEMORY": "1"}) is not None


def run_python(code, *args, env=None):
    env = dict(os.environ if env is None else env, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


RESTART = """
import os, sys
print("start", os.getpid(), os.environ.get("GLIBC_TUNABLES"), sys.argv[1:], flush=True)
from agents.run.allocator import restart_keeping_freed_memory
restart_keeping_freed_memory()
print("after", os.getpid(), os.environ.get("GLIBC_TUNABLES"), sys.argv[1:], flush=True)
"""


@needs_glibc
def test_the_restart_keeps_the_process_its_arguments_and_runs_once():
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    done = run_python(RESTART, "--flag=1", "x y", env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    pid = lines[0].split()[1]
    assert lines == [f"start {pid} None ['--flag=1', 'x y']",
                     f"start {pid} {allocator.TUNABLES} ['--flag=1', 'x y']",
                     f"after {pid} {allocator.TUNABLES} ['--flag=1', 'x y']"]


FAULTS = """
import ctypes, resource
{restart}
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def faults_of_blocks(count, size=48 * 2**20):  # above glibc's largest mmap threshold, 32 MB
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(count):  # as XLA's temporaries: malloc, write every page, free
        block = libc.malloc(size)
        ctypes.memset(block, 1, size)
        libc.free(block)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
faults_of_blocks(1)
print(faults_of_blocks(10))
"""


@needs_glibc
def test_a_large_block_freed_and_allocated_again_reuses_its_pages():
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    restart = ("from agents.run.allocator import restart_keeping_freed_memory\n"
               "restart_keeping_freed_memory()")
    pages = 48 * 2**20 // os.sysconf("SC_PAGE_SIZE")
    plain = run_python(FAULTS.format(restart=""), env=env)
    kept = run_python(FAULTS.format(restart=restart), env=env)
    assert plain.returncode == 0 and kept.returncode == 0, plain.stderr + kept.stderr
    assert int(plain.stdout) > 5 * pages  # glibc's default: each block mapped anew
    assert int(kept.stdout) < pages // 10  # kept: the first block's pages serve the rest


@needs_glibc
@pytest.mark.parametrize("script", ["experiments/run_apex.py", "experiments/run_impala.py",
                                    "experiments/reproduce/atari.py",
                                    "experiments/reproduce/vtrace_ablation.py"])
def test_each_launcher_restarts_with_the_tunables(script):
    code = ("import atexit, os, runpy, sys\n"
            "atexit.register(lambda: print('tunables', os.environ.get('GLIBC_TUNABLES')))\n"
            f"sys.path.insert(0, os.path.dirname({script!r}))\n"
            f"runpy.run_path({script!r}, run_name='__main__')")
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    done = run_python(code, "--helpshort", env=env)  # absl prints the flags and exits 1
    assert done.stdout.splitlines()[-1] == f"tunables {allocator.TUNABLES}", done.stdout[-2000:]
