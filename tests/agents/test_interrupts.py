"""Ctrl-C at the edges of a run: while JAX loads, while the run is built, during Ray's start,
and after the final checkpoint. A signal either stops the run (exit 130) or, after the final
save, changes nothing; it is never swallowed and never reported as something it was not."""

import shutil
import signal
import tempfile
import time

import pytest

from agents.run.interrupts import DONE, InterruptGuard
from tests.agents.fault_injection import (
    interrupt_when,
    own_lines,
    processes_mentioning,
    start_patched,
    watched,
)


def test_a_signal_a_library_swallowed_while_starting_stops_the_run_when_it_starts():
    guard, stopped = InterruptGuard(), []
    guard.starting()
    with pytest.raises(KeyboardInterrupt):
        guard._handle(signal.SIGINT, None)  # raised into an import that swallows it
    guard.running(stopped.append)
    assert stopped == ["SIGINT"] and guard.pending is None


def test_a_signal_after_the_final_save_is_kept_quietly_and_raised_before_the_next_run(capsys):
    guard = InterruptGuard()
    guard.running(lambda name: None)
    guard.stopping()
    guard.idle()
    assert guard.state == DONE
    guard._handle(signal.SIGINT, None)  # neither raises nor prints
    assert capsys.readouterr().err == "" and guard.pending == "SIGINT"
    with pytest.raises(KeyboardInterrupt):
        guard.starting()  # a script running several runs stops before the next one


ANNOUNCE_GUARD = """
from agents.run import interrupts
original = interrupts.InterruptGuard.install
def announced(self):
    original(self)
    print("guard installed", flush=True)
interrupts.InterruptGuard.install = announced
"""


@pytest.mark.parametrize("delay", [0.0, 0.5, 1.5, 3.0, 6.0])
def test_ctrl_c_in_the_first_seconds_stops_the_launcher(delay, tmp_path):
    """Half of these were swallowed while JAX was imported (or became an ImportError), and the
    run trained to its end. Python's own handler is in place until the launcher's first line,
    so the delays count from there."""
    proc = start_patched("impala", ANNOUNCE_GUARD, f"--run_dir={tmp_path}",
                         "--total_env_steps=100000000", "--log_period_s=0.3",
                         "--solved_return=inf")
    out, _ = interrupt_when(proc, lambda line: line.startswith("guard installed"), delay)
    assert proc.returncode == 130, out
    assert "Traceback" not in out and "Error" not in "".join(own_lines(out)), out
    before = any(m in out for m in ("while starting; nothing to save",
                                    "before the run started; nothing to save"))
    under_way = "interrupted (SIGINT): stopping threads and writing a checkpoint" in out
    assert before != under_way, out  # exactly one of them, and the true one
    assert under_way or not (tmp_path / "checkpoints").exists(), out


AFTER_FINAL_SAVE = """
import os, signal, time
from agents.run import driver
def plot_then_signal(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGINT)  # a quick extra Ctrl-C after the final save
    time.sleep(0.3)
driver.plot_learning_curve = plot_then_signal
"""


def test_ctrl_c_after_the_final_save_is_ignored_quietly(tmp_path):
    proc = start_patched("apex", AFTER_FINAL_SAVE, f"--run_dir={tmp_path}",
                         "--total_env_steps=600", "--min_replay_size=100")
    with watched(proc, 120):
        out = proc.communicate()[0]
    assert proc.returncode == 0, out
    assert "done:" in out and "interrupt" not in out.lower() and "stopping" not in out, out


RAY_START = """
from agents.parallel import ray_cluster
original = ray_cluster.ray.init
def announced(*args, **kwargs):
    print("ray starting", flush=True)
    return original(*args, **kwargs)
ray_cluster.ray.init = announced
"""


@pytest.mark.xdist_group("ray")
def test_ctrl_c_during_rays_start_stops_ray_and_leaves_no_process(tmp_path):
    """Ctrl-C there could end the launcher with a segfault (139) or leave Ray's processes."""
    temp = tempfile.mkdtemp(prefix="ray_", dir="/tmp")  # Ray's socket paths must stay short
    proc = start_patched("apex", RAY_START, f"--run_dir={tmp_path / 'run'}", "--backend=ray",
                         f"--ray_temp_dir={temp}", "--ray_object_store_mb=100")
    out, _ = interrupt_when(proc, lambda line: line.startswith("ray starting"), 1.0)
    assert proc.returncode == 130, out
    assert [line for line in own_lines(out) if "interrupt" in line] == [
        "interrupted (SIGINT) before the run started; nothing to save"], out
    deadline = time.monotonic() + 20
    while processes_mentioning(str(temp)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not processes_mentioning(str(temp)), out
    shutil.rmtree(temp, ignore_errors=True)


def test_a_signal_lost_in_a_callback_that_cannot_raise_prints_no_trace():
    """Raised into a garbage-collection callback, the handler's KeyboardInterrupt is lost there
    (Python prints "Exception ignored ... Traceback"); the signal is kept in `pending` and acted
    on, so the guard's unraisable hook keeps that trace out of the run's output."""
    import types

    guard, passed_on = InterruptGuard(), []
    guard._next_unraisablehook = passed_on.append
    lost = types.SimpleNamespace(exc_value=KeyboardInterrupt("SIGINT"))
    other = types.SimpleNamespace(exc_value=ValueError("a real problem"))
    guard._unraisable(lost)
    assert passed_on == [lost]  # no signal kept: nothing explains it, so it is shown
    guard.pending = "SIGINT"
    guard._unraisable(lost)
    guard._unraisable(other)
    assert passed_on == [lost, other]
