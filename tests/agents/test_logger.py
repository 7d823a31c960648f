"""Metric CSVs keep every column, also those that first appear after the first row."""

import csv

from agents.run.logger import MetricsLogger, read_metrics


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_columns_that_appear_later_are_kept_and_a_resumed_file_is_extended(tmp_path):
    logger = MetricsLogger(str(tmp_path), tensorboard=False)
    logger.write("train", 0, dict(env_steps=10))
    logger.write("train", 1, dict(env_steps=20, loss=0.5))
    logger.close()
    resumed = MetricsLogger(str(tmp_path), tensorboard=False)
    resumed.write("train", 2, dict(env_steps=30, loss=0.25, grad_norm=3.0))
    resumed.close()
    rows = read(tmp_path / "train.csv")
    assert [r["step"] for r in rows] == ["0", "1", "2"]
    assert [r["loss"] for r in rows] == ["", "0.5", "0.25"]
    assert rows[2]["grad_norm"] == "3.0" and rows[0]["env_steps"] == "10.0"


def test_read_metrics_gives_floats_without_the_columns_a_row_left_empty(tmp_path):
    logger = MetricsLogger(str(tmp_path), tensorboard=False)
    logger.write("eval", 0, dict(env_steps=10))
    logger.write("eval", 1, dict(env_steps=20, mean_return=-20.5))
    logger.close()
    assert read_metrics(str(tmp_path), "eval") == [
        dict(step=0.0, env_steps=10.0), dict(step=1.0, env_steps=20.0, mean_return=-20.5)]
    assert read_metrics(str(tmp_path), "train") == []  # never written
