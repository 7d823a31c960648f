"""Ape-X's Ray pieces on a local cluster: shards sample as one buffer, priorities, save and load,
failures of shards and actor workers."""

import concurrent.futures
import contextlib
import dataclasses
import os
import sys
import threading

import numpy as np
import psutil
import pytest
import ray
from ray_helpers import LOCAL_CLUSTER, assert_all_exited, child_processes
from scipy import stats

from agents.apex.config import ApexConfig
from agents.apex.ray_backend import RayBackend
from agents.apex.replay import ReplayShard, make_replay
from agents.apex.sharded_replay import ReplayShardLost, ShardedReplay
from agents.parallel import ray_cluster
from agents.run import host_memory
from agents.run.envs import actor_env_settings, env_info
from agents.run.param_server import ParamServer
from agents.run.stats import RunStats

# Under pytest-xdist the Ray tests share one worker, so two local clusters never run at once.
pytestmark = pytest.mark.xdist_group("ray")

NUM = 40  # transitions, tagged 0..NUM-1 in obs[:, 0]
CONFIG = ApexConfig(env="CartPole-v1", num_actors=2, envs_per_actor=2, actor_batch_size=1,
                    backend="ray", replay_capacity=64, min_replay_size=0, batch_size=32,
                    local_buffer_size=8, torso="mlp", head_hidden_sizes=())
INFO = env_info(actor_env_settings(CONFIG, 0))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    assert ray_cluster.connect("local", temp_dir=str(tmp_path_factory.mktemp("ray")),
                               **LOCAL_CLUSTER)
    assert os.environ["RAY_AUTH_MODE"] == "token" and os.environ["RAY_AUTH_TOKEN"]
    assert ray.util.get_node_ip_address() == "127.0.0.1"
    processes = child_processes()
    assert processes  # the GCS and the raylet at least
    yield
    ray_cluster.disconnect()
    assert_all_exited(processes)


def transitions(tags):
    tags = np.asarray(tags)
    obs = np.zeros((len(tags), 4), np.float32)
    obs[:, 0] = tags
    return dict(obs=obs, action=np.zeros(len(tags), np.int32),
                reward=np.ones(len(tags), np.float32),
                discount=np.full(len(tags), 0.99, np.float32), next_obs=obs + 1)


def filled(priorities, num_shards, seed=0):
    """(sharded replay, shard handles, single buffer) holding the same tagged transitions;
    shard k holds every num_shards-th tag, as actors feeding different shards would."""
    config = dataclasses.replace(CONFIG, num_actors=max(2, num_shards), replay_shards=num_shards,
                                 seed=seed)
    shard_cls = ray.remote(ReplayShard).options(num_cpus=0, max_concurrency=4)
    shards = [shard_cls.remote(config, INFO, k) for k in range(num_shards)]
    tags = np.arange(NUM)
    ray.get([shard.add.remote(transitions(tags[k::num_shards]), priorities[k::num_shards],
                              tags[k::num_shards]) for k, shard in enumerate(shards)])
    single = make_replay(CONFIG, INFO)
    single.add(transitions(tags), priorities, tags)
    return ShardedReplay(shards, CONFIG.importance_exponent, seed), shards, single


def scaled(priorities):
    return (priorities + 1e-6) ** CONFIG.priority_exponent


@pytest.mark.usefixtures("cluster")
@pytest.mark.parametrize("samplers", [1, 4])
def test_two_shards_sample_the_single_buffer_distribution_with_its_weights(samplers):
    # Unequal shards: shard 1 (odd tags) holds 3x the mass and shard 0 alone holds zeros, so a
    # wrong split or a shard's own minimum in the weights would show. With several samplers at
    # once (the learner's threads on Ray) every batch must still be whole and rightly weighted.
    priorities = np.random.default_rng(0).exponential(size=NUM) + 0.1
    priorities[1::2] *= 3.0
    priorities[0:NUM:10] = 0.0
    sharded, _, single = filled(priorities, num_shards=2)
    expected = scaled(priorities) / scaled(priorities).sum()
    counts = np.zeros(NUM)
    with concurrent.futures.ThreadPoolExecutor(samplers) as pool:
        samples = list(pool.map(lambda _: sharded.sample(64), range(150)))
    for sample in samples:
        tags = sample.transitions["obs"][:, 0].astype(int)
        np.add.at(counts, tags, 1)
        np.testing.assert_array_equal(sample.transitions["next_obs"][:, 0], tags + 1)
        np.testing.assert_allclose(sample.probabilities, expected[tags], rtol=1e-9)
        one = single.sample(64)  # the one buffer's weights for the same transitions
        weight_of = dict(zip(one.transitions["obs"][:, 0].astype(int), one.weights))
        for tag, weight in zip(tags, sample.weights):
            if tag in weight_of:
                assert weight == pytest.approx(weight_of[tag], rel=1e-6)
    live = priorities > 0
    assert counts[~live].sum() < 0.01 * counts.sum()  # only the 1e-6 epsilon left
    assert stats.chisquare(counts[live], counts[live].sum() * expected[live]
                           / expected[live].sum()).pvalue > 1e-3


@pytest.mark.usefixtures("cluster")
@pytest.mark.parametrize("rounds", [1, 20])
def test_new_priorities_reach_their_shard_in_order_and_a_dead_shard_is_reported(rounds):
    # The learner does not wait for its rounds; those made while one is in flight are merged.
    # Every round gives the same ids new values, so any round applied out of order would show.
    priorities = np.ones(NUM)
    sharded, shards, _ = filled(priorities, num_shards=2)
    sample = sharded.sample(32)
    tags = sample.transitions["obs"][:, 0].astype(int)
    new = priorities.copy()
    for round_ in range(rounds):
        new[tags] = 5.0 + round_ + tags
        sharded.update_priorities(sample.ids, new[tags])
    sharded.flush()
    for k, shard in enumerate(shards):
        total, minimum = ray.get(shard.priority_mass.remote())
        assert total == pytest.approx(scaled(new[k::2]).sum(), rel=1e-12)
        assert minimum == pytest.approx(scaled(new[k::2]).min(), rel=1e-12)
    assert sharded.stats()["updates_applied"] == 32 * rounds
    ray.kill(shards[0])
    with pytest.raises(ReplayShardLost, match="during update_priorities"):
        for _ in range(50):  # until the kill has landed
            sharded.update_priorities(sample.ids, new[tags])
            sharded.flush()


@pytest.mark.usefixtures("cluster")
def test_save_and_load_restore_every_shard(tmp_path):
    priorities = np.arange(1.0, NUM + 1)
    sharded, shards, _ = filled(priorities, num_shards=2)
    path = str(tmp_path / "replay.npz")
    sharded.save(path)
    restored, restored_shards, _ = filled(np.ones(NUM), num_shards=2, seed=1)
    restored.load(path)
    for before, after in zip(shards, restored_shards):
        original, loaded = ray.get([before.state_dict.remote(), after.state_dict.remote()])
        assert original.keys() == loaded.keys()
        for name in original:
            np.testing.assert_array_equal(original[name], loaded[name], err_msg=name)
    one, _, _ = filled(np.ones(NUM), num_shards=1)  # one shard process: each costs seconds
    with pytest.raises(ValueError, match="holds 2 replay shards; this run has replay_shards=1"):
        one.load(path)


@pytest.mark.usefixtures("cluster")
def test_a_shard_process_loads_neither_jax_nor_envpool():
    # A shard holds numpy arrays only; JAX would cost each shard process seconds to start.
    _, shards, _ = filled(np.ones(NUM), num_shards=1)
    loaded = ray.get(shards[0].__ray_call__.remote(
        lambda shard: sorted({"jax", "flax", "envpool"} & set(sys.modules))))
    assert loaded == []


@pytest.mark.usefixtures("cluster")
def test_a_dead_shard_stops_sampling_with_a_clear_error():
    sharded, shards, _ = filled(np.ones(NUM), num_shards=2)
    ray.kill(shards[1])
    with pytest.raises(ReplayShardLost, match="(?s)a replay shard died.*--resume"):
        for _ in range(50):  # until the kill has landed
            sharded.sample(8)


@pytest.mark.usefixtures("cluster")
@pytest.mark.parametrize("env,match", [
    # Parameters the workers' policy cannot apply: their run() raises.
    ("CartPole-v1", "(?s)actor worker [01] failed:.*agents/run/actor_loop.py.*in run.*agents/apex/actor.py.*in act"),
    # An env id envpool does not know: their constructor raises.
    ("NoSuchEnv-v0", "(?s)actor worker [01] failed to start:.*is not an envpool env"),
])
def test_an_exception_in_an_actor_worker_fails_the_run_with_its_traceback(env, match):
    backend = RayBackend(dataclasses.replace(CONFIG, env=env), INFO, print)
    params = ParamServer()
    params.publish({"params": {}})
    stats, stop = RunStats(), threading.Event()
    watchdog = threading.Timer(60.0, stop.set)  # a run that kept going fails, not hangs
    watchdog.start()
    try:
        with pytest.raises(RuntimeError, match=match):
            backend.run_actors(params, stats, stop)
    finally:
        watchdog.cancel()
        backend.close()
    assert stats.get("actor_restarts") == 0  # a bug is not retried
    assert ray.is_initialized()  # the cluster was not this backend's to stop


def shard_processes() -> set[psutil.Process]:
    """The local cluster's processes that hold a `ReplayShard` (Ray titles them after it)."""
    found = set()
    for process in child_processes():
        with contextlib.suppress(psutil.Error):
            if process.cmdline()[:1] and process.cmdline()[0].startswith("ray::ReplayShard"):
                found.add(process)
    return found


@pytest.mark.usefixtures("cluster")
def test_shards_too_large_together_for_their_host_are_refused_at_the_start():
    """Two Pong shards, each 0.6 of this host's available memory once full: each alone could
    start (their arrays are mapped lazily), and the run would be OOM-killed hours in."""
    config = ApexConfig(env="Pong-v5", num_actors=2, envs_per_actor=2, actor_batch_size=1,
                        backend="ray", replay_shards=2, replay_capacity=200_000)
    info = env_info(actor_env_settings(config, 0))
    per_transition = make_replay(config, info, 0).nbytes / 100_000
    capacity = 2 * int(0.6 * host_memory.available_bytes() / per_transition)
    before = shard_processes()
    with pytest.raises(ValueError, match=r"replay_capacity=\d+ does not fit in memory: 2 "
                                         r"replay shards on one host take"):
        RayBackend(dataclasses.replace(config, replay_capacity=capacity), info, print)
    assert ray.is_initialized()  # the cluster was not this backend's to stop
    assert_all_exited(shard_processes() - before)  # its shards were


@pytest.mark.usefixtures("cluster")
def test_a_shard_that_cannot_start_fails_the_run_with_its_error():
    with pytest.raises(RuntimeError, match=r"(?s)a replay shard failed to start:.*ValueError: "
                                           r"replay_capacity=10000000000 does not fit"):
        RayBackend(dataclasses.replace(CONFIG, replay_capacity=10**10), INFO, print)
    assert ray.is_initialized()


@pytest.mark.usefixtures("cluster")
def test_more_actor_cpus_than_the_cluster_has_is_a_clear_error():
    config = dataclasses.replace(CONFIG, num_actors=3)
    with pytest.raises(ValueError, match=r"num_actors \* ray_cpus_per_actor = 3 CPUs, but the "
                                         r"Ray cluster has 2"):
        RayBackend(config, INFO, print)
    assert ray.is_initialized()
