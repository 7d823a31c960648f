"""Fault injection for tests: runs launched small, and the faults put under them.

The one place that builds small configs of the CartPole flagfiles, launches the command-line
entries as a user would, filters their stderr to the run's own lines, stops a launched process
that hangs, and makes a disk fill. Tests of what goes wrong under a run import from here.
"""

import contextlib
import errno
import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Callable

from agents.apex.config import ApexConfig
from agents.impala.config import ImpalaConfig
from agents.run.flags import config_from_flagfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
APEX_CFG = os.path.join(ROOT, "experiments", "configs", "apex_cartpole.cfg")
IMPALA_CFG = os.path.join(ROOT, "experiments", "configs", "impala_cartpole.cfg")


def apex_config(run_dir, **overrides):
    """A small Ape-X CartPole config (3K env steps, no evaluation) writing to `run_dir`."""
    small = dict(total_env_steps=3_000, min_replay_size=500, log_period_s=0.3,
                 eval_period=10**9, run_dir=str(run_dir))
    return config_from_flagfile(ApexConfig, APEX_CFG, **{**small, **overrides})


def impala_config(run_dir, **overrides):
    """A small IMPALA CartPole config (4K env steps, no evaluation) writing to `run_dir`."""
    small = dict(total_env_steps=4_000, log_period_s=0.3, eval_period=10**9,
                 run_dir=str(run_dir))
    return config_from_flagfile(ImpalaConfig, IMPALA_CFG, **{**small, **overrides})


def launch(agent, *flags, timeout=90):
    """Runs `experiments/run_<agent>.py` with the CartPole flagfile and `flags`; returns the
    completed process (stdout and stderr as text)."""
    cfg = APEX_CFG if agent == "apex" else IMPALA_CFG
    return subprocess.run([sys.executable, f"experiments/run_{agent}.py", f"--flagfile={cfg}",
                           *flags], capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def own_lines(stderr: str) -> list[str]:
    """stderr without absl's and XLA's log lines and library warnings."""
    return [line for line in stderr.splitlines() if line.strip()
            and not re.match(r"^[IWEF]\d{4} ", line) and "Warning" not in line
            and not line.startswith(" ")]


@contextlib.contextmanager
def watched(proc: subprocess.Popen, seconds: float = 120):
    """Kills `proc` after `seconds` (a stop that hangs fails the test instead of hanging it) and
    on the way out."""
    watchdog = threading.Timer(seconds, proc.kill)
    watchdog.start()
    try:
        yield proc
    finally:
        watchdog.cancel()
        proc.kill()


def fill_disk(monkeypatch, owner, attribute: str, failures=None) -> list:
    """Makes `owner.attribute` (a writer such as `PrioritizedReplay.save`) raise ENOSPC, as a
    full disk does: on the calls numbered in `failures` (1-based; None: every call). Returns the
    list of the calls' positional arguments, growing as they come."""
    calls = []
    original = getattr(owner, attribute)

    def full(*args, **kwargs):
        calls.append(args)
        if failures is None or len(calls) in failures:
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, attribute, full)
    return calls


# --- hangs and interrupts ---

def free_port() -> int:
    """A loopback port where nothing listens (bound and released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def silent_port():
    """Yields a loopback port that accepts connections and never answers: a hung peer."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)  # the kernel completes the handshakes; nothing ever reads or writes
        yield s.getsockname()[1]


PATCHED = """
import runpy, sys
{patch}
runpy.run_path(sys.argv.pop(1), run_name="__main__")
"""


def start_patched(agent: str, patch: str, *flags, env: dict | None = None) -> subprocess.Popen:
    """Starts `experiments/run_<agent>.py` with the CartPole flagfile and `flags` after running
    the Python code `patch` in its process (a fault put under the launcher); stdout and stderr
    together, as text, one line at a time."""
    cfg = APEX_CFG if agent == "apex" else IMPALA_CFG
    return subprocess.Popen(
        [sys.executable, "-u", "-c", PATCHED.format(patch=patch),
         f"experiments/run_{agent}.py", f"--flagfile={cfg}", *flags],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT, **(env or {})), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def processes_mentioning(text: str) -> list[int]:
    """The ids of live processes whose command line holds `text` (e.g. a Ray temp folder)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass  # ended meanwhile
    return found


# --- divergence and damaged records ---

def poison_checkpoint(path: str, value: float = float("nan")) -> None:
    """Writes `value` into the first float parameter of checkpoint `path` and a manifest that
    matches, as a run that diverged before a save would have left it: complete, but not finite."""
    import flax.serialization
    import numpy as np

    from agents.run import checkpoint

    learner = os.path.join(path, "learner.msgpack")
    with open(learner, "rb") as f:
        state = flax.serialization.msgpack_restore(f.read())
    _poison_first(state["params"], value)
    with open(learner, "wb") as f:
        f.write(flax.serialization.msgpack_serialize(state))
    os.remove(os.path.join(path, checkpoint.MANIFEST))
    checkpoint._write_manifest(path)


def _poison_first(tree: dict, value: float) -> bool:
    """Sets the first element of the first float array in `tree` (nested dicts) to `value`."""
    import numpy as np

    for key, leaf in tree.items():
        if isinstance(leaf, dict):
            if _poison_first(leaf, value):
                return True
        elif isinstance(leaf, np.ndarray) and leaf.dtype.kind == "f":
            tree[key] = leaf.copy()  # msgpack's arrays are read-only
            tree[key].reshape(-1)[0] = value
            return True
    return False


# --- planted links ---

def outside_file(folder, text: str = "not the run's\n") -> str:
    """A file outside any run folder (in `folder`) holding `text`: what a planted link targets."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "outside.txt")
    with open(path, "w") as f:
        f.write(text)
    return path


def plant_link(run_dir, name: str, target: str, hard: bool = False) -> str:
    """Plants a link at `run_dir/name` (its folders made as needed) to `target`, as someone
    sharing the folder could: symbolic, or `hard`. Returns the link's path."""
    path = os.path.join(run_dir, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    (os.link if hard else os.symlink)(target, path)
    return path


# --- env steps across processes ---

def finish_all(procs: list[subprocess.Popen], timeout: float = 180) -> list[str]:
    """Each process's output once all have exited; fails on a non-zero exit, and kills any
    left running on the way out."""
    outs = []
    try:
        for proc in procs:
            outs.append(proc.communicate(timeout=timeout)[0])
    finally:
        for proc in procs:
            proc.kill()
    for proc, out in zip(procs, outs):
        assert proc.returncode == 0, out[-3000:]
    return outs


def interrupt_when(proc: subprocess.Popen, seen_line: Callable[[str], bool], delay: float,
                   wait_s: float = 60) -> tuple[str, float]:
    """Sends SIGINT to `proc` `delay` seconds after it prints a line for which `seen_line` is
    true, then waits for it to exit (killing it after 120 s); returns its whole output and
    the time the signal was sent (time.monotonic)."""
    seen, sent = [], float("nan")
    with watched(proc, 120):
        for line in proc.stdout:
            seen.append(line)
            if seen_line(line):
                time.sleep(delay)
                sent = time.monotonic()
                proc.send_signal(signal.SIGINT)
                break
        seen += proc.stdout.readlines()
        proc.wait(wait_s)
    return "".join(seen), sent


def launch_processes(count: int, *flags, timeout: float = 120) -> list[str]:
    """Runs IMPALA on CartPole as `count` jax.distributed processes on loopback (one CPU device
    each) with `flags`; returns each one's output after all exit, and fails on a non-zero exit."""
    address = f"127.0.0.1:{free_port()}"
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1")
    procs = [subprocess.Popen(
        [sys.executable, "experiments/run_impala.py", f"--flagfile={IMPALA_CFG}", *flags,
         f"--num_processes={count}", f"--process_id={i}", f"--coordinator_address={address}"],
        cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for i in range(count)]
    return finish_all(procs, timeout)
