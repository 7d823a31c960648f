"""Configs compared over seeds (`compare.py`, its statistics in `aggregates`): Welch's interval
against scipy's and by hand, the probability of improvement by hand, and the script on
fabricated `atari.py` folders (in its own process: its flags would clash with the other
scripts' in this one)."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

import aggregates
from conftest import REPRODUCE

PROTOCOL = dict(episodes=3, action_rule="sample", epsilon=0.0, noop_max=30,
                max_episode_frames=108000, fire_reset=False)


def test_welch_interval_matches_scipy_and_a_hand_computed_case():
    rng = np.random.default_rng(0)
    a, b = rng.normal(10, 3, 3), rng.normal(14, 1, 4)
    diff, low, high = aggregates.welch_interval(a, b)
    want = stats.ttest_ind(b, a, equal_var=False).confidence_interval(0.95)
    np.testing.assert_allclose([diff, low, high], [b.mean() - a.mean(), want.low, want.high])
    # By hand: a = (0, 2), b = (4, 6): variances of the means 1 and 1, dof
    # (1 + 1)^2 / (1 + 1) = 2, half width t(0.975, 2) * sqrt(2) = 4.303 * 1.414 = 6.085.
    diff, low, high = aggregates.welch_interval([0.0, 2.0], [4.0, 6.0])
    assert diff == 4.0
    np.testing.assert_allclose([low, high], [4 - 6.0851, 4 + 6.0851], atol=1e-3)


def test_one_seed_or_no_spread_has_no_interval():
    for a, b in (([1.0], [2.0, 3.0]), ([1.0, 1.0], [2.0, 2.0])):
        diff, low, high = aggregates.welch_interval(a, b)
        assert diff == np.mean(b) - np.mean(a) and math.isnan(low) and math.isnan(high)


def test_probability_of_improvement_by_hand():
    # b = (2, 5) against a = (1, 2, 3): 2 beats 1, ties 2 (half), loses to 3; 5 beats all.
    assert aggregates.probability_of_improvement([1.0, 2.0, 3.0], [2.0, 5.0]) == 4.5 / 6
    assert aggregates.probability_of_improvement([1.0], [0.0]) == 0.0


def fabricate(out_dir, game, seed, returns, norm="group", protocol=PROTOCOL, frames=1000):
    folder = out_dir / game / f"seed_{seed}"
    folder.mkdir(parents=True)
    curve = [dict(env_steps=100 * i, mean_return=float(i + seed)) for i in range(3)]
    result = dict(agent="impala", env=f"{game}-v5", seed=seed, final_returns=returns,
                  curve=curve, protocol=protocol, frames=frames,
                  config=dict(env=f"{game}-v5", norm=norm, seed=seed, learning_rate=0.001,
                              run_dir=str(folder)))
    (folder / "result.json").write_text(json.dumps(result))


def run_compare(*args):
    return subprocess.run([sys.executable, os.path.join(REPRODUCE, "compare.py"), *args],
                          capture_output=True, text=True, timeout=120)


def test_the_script_compares_seeds_and_names_what_differs(tmp_path):
    group, plain, out = tmp_path / "group", tmp_path / "plain", tmp_path / "out"
    for seed, returns in enumerate(([10.0, 12.0], [20.0, 20.0], [14.0, 16.0])):
        fabricate(group, "Breakout", seed, returns)
    for seed, returns in enumerate(([1.0, 3.0], [4.0, 4.0])):
        fabricate(plain, "Breakout", seed, returns, norm="none")
    fabricate(plain, "Qbert", 0, [100.0], norm="none")  # a game only one folder has
    done = run_compare(f"--runs={group},{plain}", "--labels=GroupNorm,no norm",
                       f"--out_dir={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    text = (out / "compare.md").read_text()
    assert text in done.stdout
    assert "- norm: group (GroupNorm), none (no norm)" in text
    assert "learning_rate" not in text and "run_dir" not in text and "Qbert" not in text
    assert "| GroupNorm | 3 | 11, 20, 15 | 15.33 | (baseline) | - |" in text, text
    diff, low, high = aggregates.welch_interval([11.0, 20.0, 15.0], [2.0, 4.0])
    assert f"| no norm | 2 | 2, 4 | 3 | {diff:+.4g} [{low:.4g}, {high:.4g}] | 0.00 |" in text
    assert (out / "curves.png").stat().st_size > 0


@pytest.mark.parametrize("change,message", [
    (dict(protocol=dict(PROTOCOL, epsilon=0.001)), "Breakout results differ in their protocol"),
    (dict(frames=2000), "Breakout results differ in their frames"),
])
def test_results_of_another_protocol_or_budget_are_refused(tmp_path, change, message):
    fabricate(tmp_path / "a", "Breakout", 0, [1.0])
    fabricate(tmp_path / "b", "Breakout", 0, [2.0], **change)
    done = run_compare(f"--runs={tmp_path / 'a'},{tmp_path / 'b'}",
                       f"--out_dir={tmp_path / 'out'}")
    assert done.returncode == 1 and done.stderr.startswith("error: ") and message in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args,message", [
    (["--runs={a}"], "--runs must name at least two"),
    (["--runs={a},{missing}"], "is not a folder"),
    (["--runs={a},{b}", "--labels=x"], "--labels must give each"),
    (["--runs={a},{b}", "--labels=x,x"], "--labels must give each"),
    (["--runs={a},{b}", "--games=Pong"], "--runs: a has no result of Pong"),
])
def test_bad_flags_are_one_error_line(tmp_path, args, message):
    fabricate(tmp_path / "a", "Breakout", 0, [1.0])
    fabricate(tmp_path / "b", "Breakout", 0, [2.0])
    names = dict(a=tmp_path / "a", b=tmp_path / "b", missing=tmp_path / "missing")
    done = run_compare(*[a.format(**names) for a in args], f"--out_dir={tmp_path / 'out'}")
    assert done.returncode == 1 and message in done.stderr, done.stderr[-2000:]
    assert len([line for line in done.stderr.splitlines() if line.strip()]) == 1
