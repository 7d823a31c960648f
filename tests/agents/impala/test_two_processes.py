"""IMPALA's learner across two processes on this machine (jax.distributed over loopback)."""

import os
import subprocess
import sys

import jax
import numpy as np
import two_process_worker as worker

from tests.agents.fault_injection import finish_all, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
CARTPOLE_CFG = os.path.join(ROOT, "experiments", "configs", "impala_cartpole.cfg")


def launch(args: list[str], devices: int = 2) -> subprocess.Popen:
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_two_processes_match_one_process_on_the_concatenated_batch(tmp_path):
    address = f"127.0.0.1:{free_port()}"
    outs = [str(tmp_path / f"params_{i}.npy") for i in (0, 1)]
    finish_all([launch([worker.__file__, str(i), address, outs[i]]) for i in (0, 1)])
    first, second = np.load(outs[0]), np.load(outs[1])
    np.testing.assert_array_equal(first, second)  # one learner: identical in both processes
    reference = worker.train(jax.devices()[:1])  # one process, the whole batch, one device
    np.testing.assert_allclose(first, reference, rtol=1e-4, atol=1e-5)


def test_two_process_impala_run_trains_and_stops_together(tmp_path):
    address = f"127.0.0.1:{free_port()}"
    procs = [launch([os.path.join(ROOT, "experiments", "run_impala.py"),
                     f"--flagfile={CARTPOLE_CFG}", f"--run_dir={tmp_path}",
                     "--num_processes=2", f"--process_id={i}", f"--coordinator_address={address}",
                     "--total_env_steps=12000", "--log_period_s=1", "--solved_return=inf"],
                    devices=1)
             for i in (0, 1)]
    outs = finish_all(procs)
    for out in outs:
        assert "done:" in out, out[-2000:]
    assert os.listdir(tmp_path / "checkpoints")  # written by process 0 only
    assert (tmp_path / "train.csv").exists()
