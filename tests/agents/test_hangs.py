"""Nothing waits without end: a peer or service that never answers ends the start with one line
naming --connect_timeout_s, Ctrl-C ends such a wait, and a metrics file that cannot be written
stops the run with its final checkpoint instead of blocking its main thread."""

import time

import pytest

from agents.apex.agent import ApexAgent
from agents.run import checkpoint, logger, run_folder
from agents.run.logger import MetricsError, MetricsLogger
from agents.run.waits import ConnectTimeout, connect_within
from tests.agents.fault_injection import (
    interrupt_when,
    apex_config,
    fill_disk,
    free_port,
    own_lines,
    silent_port,
    start_patched,
    watched,
)


def finish(proc, seconds=120) -> str:
    with watched(proc, seconds):
        out = proc.communicate()[0]
    return out


def error_lines(out: str) -> list[str]:
    return [line for line in own_lines(out) if line.startswith("error:")]


def test_a_wait_ends_at_its_timeout_and_a_call_that_returns_gives_its_result():
    start = time.monotonic()
    with pytest.raises(ConnectTimeout, match=r"the peer did not answer within 0\.3 s "
                                             r"\(--connect_timeout_s\); start it"):
        connect_within(lambda: time.sleep(30), 0.3, "the peer", "start it")
    assert time.monotonic() - start < 2
    assert connect_within(lambda: 7, 5, "the peer") == 7
    with pytest.raises(ZeroDivisionError):
        connect_within(lambda: 1 / 0, 5, "the peer")


def test_a_ray_address_where_nothing_listens_is_one_line_within_the_timeout(tmp_path):
    """Ray retried such an address without end (and names it by the host's interface
    address, not the 127.0.0.1 given)."""
    port = free_port()
    proc = start_patched("apex", "", f"--run_dir={tmp_path}", "--backend=ray",
                         f"--ray_address=127.0.0.1:{port}", "--connect_timeout_s=3")
    out = finish(proc)
    assert proc.returncode == 1, out
    assert error_lines(out) == [
        f"error: the Ray cluster at ray_address=127.0.0.1:{port} did not answer within 3 s "
        "(--connect_timeout_s); is a cluster running there (`ray start --head`) and "
        "reachable?"], out
    assert "Traceback" not in out


@pytest.mark.parametrize("peer", ["nothing listens", "accepts and never answers"])
def test_a_missing_jax_distributed_peer_is_one_line_within_the_timeout(peer, tmp_path):
    """jax.distributed waited 5 minutes, then aborted with a C++ stack."""
    with silent_port() as silent:
        port = free_port() if peer == "nothing listens" else silent
        proc = start_patched("impala", "", f"--run_dir={tmp_path}", "--num_processes=2",
                             "--process_id=1", f"--coordinator_address=127.0.0.1:{port}",
                             "--connect_timeout_s=3")
        start = time.monotonic()
        out = finish(proc)
    assert proc.returncode == 1, out
    assert error_lines(out) == [
        f"error: the other 1 jax.distributed process(es) at coordinator_address=127.0.0.1:"
        f"{port} did not answer within 3 s (--connect_timeout_s); start all num_processes=2 "
        "processes (process_id 0 .. 1) with the same coordinator_address"], out
    assert "Check failure" not in out and "Traceback" not in out
    assert time.monotonic() - start < 60


def test_ctrl_c_ends_a_wait_for_a_peer(tmp_path):
    proc = start_patched("impala", "", f"--run_dir={tmp_path}", "--num_processes=2",
                         "--process_id=1", f"--coordinator_address=127.0.0.1:{free_port()}",
                         "--connect_timeout_s=300")
    out, sent = interrupt_when(proc, lambda line: "Connecting to JAX distributed service" in line,
                               0.5, wait_s=30)
    assert proc.returncode == 130, out
    assert time.monotonic() - sent < 10, out
    assert "interrupted (SIGINT) before the run started; nothing to save" in out, out
    assert "Traceback" not in out and "Check failure" not in out


def test_a_full_disk_at_resume_is_one_line(tmp_path):
    patch = ("import errno\nfrom agents.run import run_folder\n"
             "def full(*args):\n    raise OSError(errno.ENOSPC, 'No space left on device')\n"
             "run_folder._append_history = full")
    proc = start_patched("apex", patch, f"--run_dir={tmp_path}", "--resume")
    out = finish(proc)
    assert proc.returncode == 1, out
    assert len(error_lines(out)) == 1 and "No space left on device" in error_lines(out)[0], out
    assert "Traceback" not in out


TB_FULL = """
import errno
from agents.run import logger
original = logger.TensorBoardFile.add_scalars
def full(self, prefix, step, values):
    if values.get("updates", 0) >= 1:  # the learner is compiled: it stops at once
        raise OSError(errno.ENOSPC, "No space left on device")
    return original(self, prefix, step, values)
logger.TensorBoardFile.add_scalars = full
"""


def test_a_tensorboard_write_that_fails_stops_the_run_with_its_final_checkpoint(tmp_path):
    """tensorboardX's writer thread died silently on a full disk; the run then hung in its next
    write, deaf to SIGINT, and SIGTERM only printed 'already stopping'."""
    proc = start_patched("apex", TB_FULL, f"--run_dir={tmp_path}",
                         "--total_env_steps=100000000", "--log_period_s=0.3",
                         "--solved_return=inf")
    out = finish(proc, 150)
    assert proc.returncode == 1, out
    assert len(error_lines(out)) == 1, out
    (line,) = error_lines(out)
    assert "writing the run's metrics to" in line and "No space left on device" in line, out
    assert "the run stopped (final checkpoint " in line and "then --resume" in line, out
    newest = checkpoint.find_resumable(str(tmp_path / "checkpoints"), print)
    assert newest is not None and checkpoint.is_complete(newest, checksums=True)


def test_a_csv_write_that_fails_stops_the_run_with_its_final_checkpoint(tmp_path,
                                                                        monkeypatch):
    calls = fill_disk(monkeypatch, logger.csv.DictWriter, "writerow", failures={3})
    agent = ApexAgent(apex_config(tmp_path, total_env_steps=10**9))
    with pytest.raises(MetricsError, match=r"No space left on device; the run stopped \(final "
                                           r"checkpoint .*step_"):
        agent.run()
    assert len(calls) == 3  # nothing written after the failure
    newest = checkpoint.find_resumable(str(tmp_path / "checkpoints"), print)
    assert newest is not None and checkpoint.is_complete(newest, checksums=True)
    run_folder.RunFolderLock(str(tmp_path)).release()  # the folder was let go


def test_tensorboard_events_are_written_in_the_callers_thread(tmp_path):
    metrics = MetricsLogger(str(tmp_path))
    metrics.write("train", 3, {"loss": 0.5, "nan": float("nan")})
    metrics.close()
    (events,) = (tmp_path / "tb").iterdir()
    data = events.read_bytes()
    assert b"train/loss" in data and b"train/nan" not in data
