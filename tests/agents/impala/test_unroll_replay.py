"""IMPALA with experience replay: batches of fresh and uniformly replayed unrolls (Espeholt et
al. 2018, Sec. 5.2.2), the reuse it reports, its settings and a whole run that uses it."""

import csv
import os
import threading

import numpy as np
import pytest
from test_unroll_queue import unrolls

from agents.impala import builder
from agents.impala.agent import ImpalaAgent
from agents.impala.config import ImpalaConfig
from agents.impala.unroll_queue import UnrollQueue
from agents.impala.unroll_replay import UnrollReplay, replayed_per_batch
from agents.run.envs import actor_env_settings, env_info
from agents.run.flags import config_from_flagfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
STOP = threading.Event()


def fed(capacity=3, proportion=0.5, seed=0) -> UnrollReplay:
    """A replay over a queue holding unrolls of envs 0..99 in order."""
    q = UnrollQueue(100)
    q.put(unrolls(100), STOP)
    return UnrollReplay(q, capacity, proportion, seed)


def test_batches_are_fresh_until_the_memory_holds_enough_then_mix_in_older_unrolls():
    replay = fed(capacity=3, proportion=0.5)
    first = replay.get_batch(4, STOP)  # memory empty: all fresh
    assert first.env_ids.tolist() == [0, 1, 2, 3] and len(replay) == 3
    second = replay.get_batch(4, STOP)  # 2 fresh, then 2 of the memory {1, 2, 3}
    assert second.env_ids[:2].tolist() == [4, 5]
    replayed = second.env_ids[2:].tolist()
    assert len(set(replayed)) == 2 and set(replayed) <= {1, 2, 3}
    assert sorted(second.obs[2:, 0, 0].tolist()) == sorted(replayed)  # whole unrolls, aligned
    # The memory is a FIFO of the newest fresh unrolls: now {3, 4, 5}.
    third = replay.get_batch(4, STOP)
    assert set(third.env_ids[2:].tolist()) <= {3, 4, 5}
    assert replay.status() == dict(queue=100 - 8, replay_size=3, replay_reuse=4 / 8)


def test_replayed_unrolls_are_drawn_uniformly_over_the_memory():
    replay = UnrollReplay(UnrollQueue(10), 10, 0.5, seed=1)
    replay.put(unrolls(10), STOP)
    replay.get_batch(10, STOP)  # all fresh: the memory holds unrolls 0..9
    slots = np.zeros(10, int)
    for i in range(2000):
        replay.unrolls.put(unrolls(1, first_env=1000 + i), STOP)  # ids stay distinct
        held = replay._memory.env_ids.copy()  # the memory the draw is made from
        batch = replay.get_batch(2, STOP)  # 1 fresh, 1 replayed
        assert batch.env_ids[0] == 1000 + i
        slots[np.flatnonzero(held == batch.env_ids[1])] += 1
    assert slots.sum() == 2000
    # Uniform over 10 slots: 200 each; a chi-square with 9 degrees of freedom stays below 27.9
    # with probability 0.999.
    assert ((slots - 200) ** 2 / 200).sum() < 27.9


@pytest.mark.parametrize("size,proportion,replayed", [(32, 0.5, 16), (8, 0.0, 0), (2, 0.9, 1),
                                                      (10, 0.25, 2)])
def test_replayed_per_batch_keeps_at_least_one_fresh_unroll(size, proportion, replayed):
    assert replayed_per_batch(size, proportion) == replayed


@pytest.mark.parametrize("value", [1.0, -0.1, float("nan"), float("inf")])
def test_replay_proportion_outside_0_1_is_refused_by_name(value):
    with pytest.raises(ValueError, match="replay_proportion"):
        ImpalaConfig(env="CartPole-v1", torso="mlp", replay_proportion=value)


def test_replay_unrolls_must_be_positive_and_fit_in_memory(monkeypatch):
    with pytest.raises(ValueError, match="replay_unrolls must be >= 1"):
        ImpalaConfig(env="CartPole-v1", torso="mlp", replay_unrolls=0)
    config = ImpalaConfig(env="Pong-v5", torso="impala_shallow", replay_proportion=0.5,
                          replay_unrolls=100_000)
    info = env_info(actor_env_settings(config, 0))
    monkeypatch.setattr(builder.host_memory, "available_bytes", lambda: 2**30)
    with pytest.raises(ValueError, match="replay_unrolls=100000 needs 55.3 GiB"):
        builder.make_channel(config, info)
    assert isinstance(builder.make_channel(ImpalaConfig(env="Pong-v5"), info), UnrollQueue)


def test_a_run_with_replay_trains_on_older_data_and_reports_its_reuse(tmp_path):
    config = config_from_flagfile(
        ImpalaConfig, os.path.join(ROOT, "experiments", "configs", "impala_cartpole.cfg"),
        run_dir=str(tmp_path), total_env_steps=6_000, eval_period=10**9, log_period_s=0.5,
        replay_proportion=0.5, replay_unrolls=64)
    summary = ImpalaAgent(config, print_fn=lambda *a, **k: None).run()
    assert summary["env_steps"] >= 6_000
    with open(os.path.join(tmp_path, "train.csv")) as f:
        rows = list(csv.DictReader(f))
    last = rows[-1]
    # Half of each batch replayed once the memory holds it: about one replay per fresh unroll.
    assert 0.8 < float(last["replay_reuse"]) <= 1.0 and float(last["replay_size"]) == 64
    # Replayed unrolls are older than fresh ones: the run-mean lag is well above the actors'.
    assert float(last["policy_lag_run_mean"]) > 3
