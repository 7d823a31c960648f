"""Ape-X with the Ray backend on a local cluster the run starts and stops itself."""

import os
import signal
import threading

import pytest
import ray
from ray_helpers import LOCAL_CLUSTER, assert_all_exited, child_processes

from agents.apex.agent import ApexAgent
from agents.apex.config import ApexConfig
from agents.run.flags import config_from_flagfile

# Under pytest-xdist the Ray tests share one worker, so two local clusters never run at once.
pytestmark = pytest.mark.xdist_group("ray")

FLAGFILE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "experiments", "configs",
                        "apex_cartpole.cfg")


def kill_actor_worker(agent: ApexAgent, after_env_steps: int, done: threading.Event,
                      killed_at: list) -> None:
    """SIGKILLs actor worker 0's process once the run has taken `after_env_steps` steps."""
    while agent.stats.get("env_steps") < after_env_steps:
        if done.wait(0.2):
            return
    pid = ray.get(agent.runtime.workers[0].pid.remote())
    killed_at.append(agent.stats.get("env_steps"))
    os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_apex_on_ray_solves_cartpole_though_an_actor_worker_is_killed(tmp_path,
                                                                       tmp_path_factory):
    config = config_from_flagfile(
        ApexConfig, FLAGFILE, run_dir=str(tmp_path / "run"), backend="ray", replay_shards=2,
        ray_temp_dir=str(tmp_path_factory.mktemp("ray")),
        ray_object_store_mb=LOCAL_CLUSTER["object_store_mb"])
    before = child_processes()
    lines: list[str] = []
    agent = ApexAgent(config, print_fn=lines.append)
    assert ray.util.get_node_ip_address() == "127.0.0.1"
    cluster = child_processes() - before
    done, killed_at = threading.Event(), []
    # Killed once learning has begun but before the first evaluation could end the run: that
    # comes eval_period updates in, at batch_size / samples_per_insert env steps an update.
    first_eval = (config.min_replay_size
                  + config.eval_period * config.batch_size / config.samples_per_insert)
    kill_at = (config.min_replay_size + first_eval) // 2
    killer = threading.Thread(target=kill_actor_worker, args=(agent, kill_at, done, killed_at))
    killer.start()
    try:
        summary = agent.run()
    finally:
        done.set()
        killer.join()
    print("\n".join(lines))
    assert killed_at, "the run ended before the worker could be killed"
    assert summary["solved"], f"not solved in {summary['env_steps']:,} env steps"
    assert summary["actor_restarts"] == 1
    assert any("actor worker 0 died" in line for line in lines)
    assert summary["env_steps"] > killed_at[0]
    assert not ray.is_initialized()
    assert_all_exited(cluster | (child_processes() - before))
