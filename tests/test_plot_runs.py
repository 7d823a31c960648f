"""Tests for experiments/plot_runs.py on run folders written by the run's own logger."""

import importlib.util
import os

import pytest

from agents.run.logger import MetricsLogger

SCRIPT = os.path.join(os.path.dirname(__file__), os.pardir, "experiments", "plot_runs.py")


@pytest.fixture(scope="module")
def plot_runs():
    spec = importlib.util.spec_from_file_location("plot_runs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.plot_runs


def write_run(run_dir, with_entropy):
    logger = MetricsLogger(str(run_dir), tensorboard=False)
    for step in range(3):
        train = {"env_steps": 100.0 * step, "episode_return": -21.0 + step}
        if with_entropy:
            train["entropy"] = 1.79 - 0.1 * step
        logger.write("train", step, train)
        logger.write("eval", step, {"env_steps": 100.0 * step, "mean_return": -20.0 + step})
    logger.close()
    return str(run_dir)


def test_panels_follow_the_data_the_runs_hold(plot_runs, tmp_path):
    apex = write_run(tmp_path / "apex", with_entropy=False)
    impala = write_run(tmp_path / "impala", with_entropy=True)
    out = str(tmp_path / "curves.png")
    assert plot_runs([apex], ["apex"], 4, out) == [
        "training return (last 100 episodes)", "evaluation mean return"]
    assert os.path.getsize(out) > 0
    assert plot_runs([apex, impala], ["apex", "impala"], 4, out)[-1] == "policy entropy"


def test_bad_arguments_are_named(plot_runs, tmp_path):
    run = write_run(tmp_path / "run", with_entropy=False)
    out = str(tmp_path / "curves.png")
    with pytest.raises(ValueError, match="labels must name each of the 1 runs, got 2"):
        plot_runs([run], ["a", "b"], 4, out)
    with pytest.raises(ValueError, match="frame_skip must be >= 1, got 0"):
        plot_runs([run], ["a"], 0, out)
    with pytest.raises(ValueError, match="no train.csv or eval.csv rows"):
        plot_runs([str(tmp_path / "empty")], ["a"], 4, out)
