"""A run whose loss or parameters go non-finite stops with one message and keeps its checkpoint.

A learning rate that diverges would otherwise train on with `loss nan`, save all-NaN parameters
over the last good checkpoint and exit 0. Here: the jitted updates report whether the loss and
the parameters are finite, the learner stops the run at the first update that is not, no
checkpoint is written from a non-finite state, and one that holds one is refused on load.
"""

import dataclasses
import math
import os
import re
import shutil

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import trained
from agents.apex.agent import ApexAgent
from agents.impala.agent import ImpalaAgent
from agents.run import checkpoint
from agents.run.divergence import Diverged, DivergenceWatch, nonfinite_leaves
from tests.agents.fault_injection import (apex_config, impala_config, launch, own_lines,
                                          poison_checkpoint)


def finite_checkpoints(run_dir):
    """The run's checkpoints, each checked complete and free of NaN and inf."""
    paths = checkpoint.list_checkpoints(os.path.join(run_dir, "checkpoints"))
    for path in paths:
        assert checkpoint.is_complete(path, checksums=True), path
        with open(os.path.join(path, "learner.msgpack"), "rb") as f:
            state = flax.serialization.msgpack_restore(f.read())
        assert not nonfinite_leaves(state), path
    return paths


# -------------------------------------------------------------------------------- settings

NON_FINITE = [
    (impala_config, "learning_rate", math.inf), (apex_config, "learning_rate", math.inf),
    (impala_config, "learning_rate", math.nan), (impala_config, "optimizer_epsilon", math.inf),
    (impala_config, "rms_initial_scale", math.inf), (impala_config, "entropy_cost", math.inf),
    (impala_config, "baseline_cost", math.inf), (apex_config, "epsilon_alpha", math.inf),
    (apex_config, "samples_per_insert", math.inf), (impala_config, "log_period_s", math.inf),
]


@pytest.mark.parametrize("make_config,name,value", NON_FINITE,
                         ids=[f"{m.__name__}:{n}={v}" for m, n, v in NON_FINITE])
def test_a_non_finite_setting_is_a_value_error_naming_it(make_config, name, value, tmp_path):
    with pytest.raises(ValueError, match=rf"^{name} must be a finite number"):
        make_config(tmp_path, **{name: value})


@pytest.mark.parametrize("value", [0.0, -1.0])
def test_a_log_period_that_would_busy_loop_is_a_value_error(value, tmp_path):
    with pytest.raises(ValueError, match=r"^log_period_s must be > 0"):
        impala_config(tmp_path, log_period_s=value)


def test_an_infinite_learning_rate_flag_is_one_line_and_exit_1(tmp_path):
    result = launch("impala", f"--run_dir={tmp_path}", "--learning_rate=inf")
    assert result.returncode == 1, result.stderr
    assert own_lines(result.stderr) == [
        "error: invalid flag value: learning_rate must be a finite number >= 0, got inf"]


# ------------------------------------------------------------------------- the host check

def test_nonfinite_leaves_names_each_float_leaf_that_holds_nan_or_inf():
    state = {"params": {"a": np.ones(3), "b": np.array([1.0, np.nan])},
             "opt": (np.array([np.inf]), np.arange(3)), "steps": np.int32(4)}
    assert nonfinite_leaves(state) == ["opt/0", "params/b"]
    assert nonfinite_leaves({"w": jnp.ones(2), "n": 3}) == []


def test_the_watch_reads_each_update_once_ready_and_names_the_first_non_finite():
    watch, found = DivergenceWatch(max_pending=2), None
    for update, health in [(1, [0.5, 3.0]), (2, [np.nan, 3.0]), (3, [np.inf, np.inf])]:
        found = found or watch.add(update, jnp.array(health))
    assert (found or watch.drain()) == "the loss is nan at update 2"
    watch = DivergenceWatch()
    watch.add(7, jnp.array([1.0, np.inf]))
    assert watch.drain() == "the parameters' norm is inf at update 7"
    assert DivergenceWatch().drain() is None


def test_a_non_finite_state_is_never_saved_and_prunes_nothing(tmp_path):
    good = {"w": np.arange(4, dtype=np.float32), "steps": np.int32(1)}
    first = checkpoint.save_checkpoint(str(tmp_path), 1, good, dict(updates=1), keep=1)
    bad = dict(good, w=np.array([1, np.nan, 2, 3], np.float32))
    with pytest.raises(Diverged, match=r"^the learner state holds non-finite values \(w\) at update 2$"):
        checkpoint.save_checkpoint(str(tmp_path), 2, bad, dict(updates=2), keep=1)
    assert checkpoint.list_checkpoints(str(tmp_path)) == [first]
    assert os.listdir(tmp_path) == [os.path.basename(first)]


# -------------------------------------------------------------------------------- end to end

@pytest.fixture(scope="module")
def good_impala_run(tmp_path_factory):
    """An IMPALA run with one finite checkpoint."""
    run_dir = tmp_path_factory.mktemp("impala")
    ImpalaAgent(impala_config(run_dir, total_env_steps=1_000), print_fn=lambda *a: None).run()
    (path,) = finite_checkpoints(run_dir)
    return run_dir, path


def test_a_diverging_resume_stops_with_one_line_and_keeps_the_finite_checkpoint(
        good_impala_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(good_impala_run[0], run_dir)
    result = launch("impala", f"--run_dir={run_dir}", "--resume", "--learning_rate=1e9",
                    "--total_env_steps=10000000", "--checkpoint_period_s=0",
                    "--log_period_s=0.2")
    lines = own_lines(result.stderr)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and len(lines) == 1, result.stderr
    assert lines[0].startswith("error: training diverged: the "), lines
    # Checkpoints are saved at every look (checkpoint_period_s=0): the updates before the
    # divergence may have added finite ones, never a non-finite one.
    newest = finite_checkpoints(run_dir)[-1]
    diverged_at = int(re.search(r"at update ([\d,]+)", lines[0])[1].replace(",", ""))
    assert checkpoint.read_meta(newest)["updates"] < diverged_at
    assert f"the newest finite checkpoint, {newest}, is kept: lower --learning_rate (now " \
        f"1e+09) and --resume from it" in lines[0], lines


def test_a_diverging_apex_run_stops_with_the_message_not_the_replays_traceback(tmp_path):
    printed = []
    agent = ApexAgent(apex_config(tmp_path, learning_rate=1e30, total_env_steps=10**6,
                                  checkpoint_period_s=0, log_period_s=0.2),
                      print_fn=printed.append)
    with pytest.raises(Diverged, match=r"^training diverged: the (loss|parameters|learner state).* at update "
                                       r"\d+") as raised:
        agent.run()
    kept = finite_checkpoints(tmp_path)
    newest = kept[-1] if kept else None
    assert (f"the newest finite checkpoint, {newest}, is kept" if newest else
            "no finite checkpoint was written") in str(raised.value)
    assert not any("priorities must be finite" in p for p in printed)


def test_load_and_resume_refuse_a_checkpoint_with_non_finite_parameters(good_impala_run,
                                                                       tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(good_impala_run[0], run_dir)
    path = str(run_dir / "checkpoints" / os.path.basename(good_impala_run[1]))
    poison_checkpoint(path)
    with pytest.raises(checkpoint.NonFiniteCheckpoint,
                       match=r"learner.msgpack holds non-finite values \(params/.*\): the run "
                             r"had diverged"):
        trained.load("impala", path)
    with pytest.raises(checkpoint.NonFiniteCheckpoint, match="holds non-finite values"):
        ImpalaAgent(dataclasses.replace(impala_config(run_dir), resume=True))
    result = launch("impala", f"--run_dir={run_dir}", "--resume")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    (line,) = own_lines(result.stderr)
    assert line.startswith(f"error: {path}: learner.msgpack holds non-finite values"), line
