"""Human-normalized scores, aggregates and the papers' reference file, on hand-computed
examples; the ablation's summary on fabricated runs."""

import math
import subprocess
import sys

import numpy as np
import pytest

import aggregates
import references
from conftest import REPRODUCE


def test_human_normalized_score():
    assert aggregates.human_normalized(14.6, -20.7, 14.6) == 1.0
    assert aggregates.human_normalized(-20.7, -20.7, 14.6) == 0.0
    np.testing.assert_allclose(aggregates.human_normalized(20.9, -20.7, 14.6), 41.6 / 35.3)
    assert math.isnan(aggregates.human_normalized(5.0, math.nan, 10.0))
    with pytest.raises(ValueError, match="must differ"):
        aggregates.human_normalized(1.0, 2.0, 2.0)


def test_point_aggregates_by_hand():
    # One run of four tasks: median and mean 1.5; the IQM drops the lowest and highest
    # quarter (0 and 3) and averages 1 and 2; the gap below 1 is (1 - 0) / 4.
    out = aggregates.point_aggregates(np.array([[0.0, 1.0, 2.0, 3.0]]))
    assert out == dict(median=1.5, mean=1.5, iqm=1.5, optimality_gap=0.25)
    # Two runs: median and mean over tasks of per-task means (1, 1.5, 5, 0.25); the IQM over
    # all eight scores, sorted 0, 0.5, 1, 1, 1, 2, 4, 6, keeps 1, 1, 1, 2.
    scores = np.array([[1.0, 1.0, 4.0, 0.0], [1.0, 2.0, 6.0, 0.5]])
    out = aggregates.point_aggregates(scores)
    assert out["median"] == 1.25 and out["mean"] == 7.75 / 4 and out["iqm"] == 5.0 / 4
    np.testing.assert_allclose(out["optimality_gap"], (1.0 + 0.5) / 8)


def test_intervals_contain_the_point_and_shrink_with_more_runs():
    rng = np.random.default_rng(0)
    few, many = rng.normal(1.0, 0.5, (3, 5)), rng.normal(1.0, 0.5, (30, 5))
    est = aggregates.interval_estimates({"few": few, "many": many}, reps=500)
    for name in ("few", "many"):
        for key in aggregates.AGGREGATES:
            point, low, high = est[name][key]
            assert low <= point <= high
    width = {n: est[n]["iqm"][2] - est[n]["iqm"][1] for n in est}
    assert width["many"] < width["few"]


def test_one_seed_has_no_interval_and_the_summaries_say_so():
    est = aggregates.interval_estimates({"one": np.array([[0.5, 1.5]]),
                                         "two": np.array([[0.5, 1.5], [1.0, 2.0]])}, reps=100)
    point, low, high = est["one"]["mean"]
    assert point == 1.0 and math.isnan(low) and math.isnan(high)
    assert aggregates.format_estimate(est["one"]["mean"]) == "1 (1 seed)"
    assert not math.isnan(est["two"]["mean"][1])  # two seeds: an interval
    # atari.py's summary of one seed: no interval, no spread (its flags live in its own process)
    code = ("import atari, references; print(atari.summary_markdown("
            "{'Pong-v5': [{'final_returns': [10.0, 12.0]}]}, references.load_references(), "
            "'apex_noop', reps=100))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPRODUCE, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "1 seed (no intervals)" in done.stdout and "| Pong | 1 | 11 | 11 |" in done.stdout
    assert "(1 seed)" in done.stdout and "[" not in done.stdout, done.stdout


def test_the_summary_lists_each_seeds_score_and_intervals_over_seeds():
    code = ("import atari, references; print(atari.summary_markdown("
            "{'Pong-v5': [{'final_returns': [10.0, 12.0]}, {'final_returns': [20.0]}], "
            "'Breakout-v5': [{'final_returns': [1.7]}, {'final_returns': [30.5]}]}, "
            "references.load_references(), 'impala_shallow', reps=100))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPRODUCE, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "| Pong | 2 | 15.5 | 11, 20 |" in done.stdout, done.stdout
    assert "| Breakout | 2 | 16.1 | 1.7, 30.5 |" in done.stdout, done.stdout
    assert "2 seeds (95% stratified bootstrap intervals; from so few runs" in done.stdout
    assert "(1 seed)" not in done.stdout, done.stdout


def test_bad_scores_raise():
    with pytest.raises(ValueError, match=r"\[runs, tasks\]"):
        aggregates.point_aggregates(np.zeros(3))
    with pytest.raises(ValueError, match="NaN"):
        aggregates.point_aggregates(np.array([[1.0, math.nan]]))


def test_reference_file_holds_the_57_games_with_their_sources():
    refs = references.load_references()
    assert len(refs) == 57
    assert refs["Pong"] == dict(random=-20.7, human=14.6, apex_noop=20.9, impala_deep=20.98,
                                impala_shallow=20.40)
    text = open(references.SCORES_FILE).read()
    for source in ("Horgan et al. 2018", "Espeholt et al. 2018", "Wang et al. 2016",
                   "Mnih et al. 2015"):
        assert source in text
    assert references.paper_column("impala", "impala_shallow") == "impala_shallow"
    assert references.paper_column("apex") == "apex_noop"
    assert references.paper_column("apex", "impala_shallow") == "apex_noop"
    with pytest.raises(ValueError, match="agent must be one of"):
        references.paper_column("r2d2")


def test_every_papers_column_says_how_many_frames_its_scores_took():
    columns = set(references.PAPER_COLUMNS.values())
    assert set(references.PAPER_FRAMES) == columns
    assert references.frames_label("apex_noop") == "22.8B frames"
    assert references.frames_label("impala_shallow") == "200M frames"


@pytest.mark.parametrize("column,median,mean", [
    ("apex_noop", 434.1, 1695.6),  # Horgan et al. 2018, Table 1 (no-op starts)
    ("impala_deep", 191.8, 957.6),  # Espeholt et al. 2018, Table 4
    ("impala_shallow", 93.2, 466.4),
])
def test_the_papers_reported_aggregates_come_back_from_the_file(column, median, mean):
    refs = references.load_references()
    hns = np.array([[aggregates.human_normalized(r[column], r["random"], r["human"])
                     for r in refs.values()]]) * 100  # [1, 57] percent
    out = aggregates.point_aggregates(hns)
    assert abs(out["median"] - median) < 0.05
    assert abs(out["mean"] - mean) < 1.0  # the per-game scores are rounded in the tables
