"""Links planted in a run folder: every file and folder the run writes refuses them.

Someone sharing the folder plants a link under a name the run writes, pointing at a file or
folder elsewhere. At the start the run stops with one message naming the link, before it writes
anything; a link planted while it runs is refused by the writer itself. Either way the target is
untouched and nothing is written outside run_dir.
"""

import os
import re

import numpy as np
import pytest

from agents.run import checkpoint, files, logger, run_folder
from agents.run.files import UnsafePath
from tests.agents.fault_injection import (impala_config, launch, outside_file, own_lines,
                                          plant_link)

TEXT = "not the run's\n"


def outside_folder(tmp_path) -> str:
    """A folder elsewhere holding one file, for links planted in place of the run's folders."""
    folder = tmp_path / "elsewhere"
    outside_file(folder, TEXT)
    return str(folder)


def untouched(target: str) -> bool:
    if os.path.isdir(target):
        return os.listdir(target) == ["outside.txt"] and untouched(f"{target}/outside.txt")
    with open(target) as f:
        return f.read() == TEXT


# ------------------------------------------------------------------- at the start of a run

# (name planted in run_dir, target: a file or a folder elsewhere)
AT_START = [(".lock", "file"), ("config.json", "file"), ("config_history.jsonl", "file"),
            ("train.csv", "file"), ("train.csv.tmp", "file"), ("eval.csv", "file"),
            ("learning_curve.png", "file"), ("tb/events.out.tfevents.1796403053.vm", "file"),
            ("checkpoints/step_000000000100.tmp", "folder"), ("checkpoints", "folder"),
            ("tb", "folder"), ("previous", "folder")]


@pytest.mark.parametrize("name,kind", AT_START, ids=[name for name, _ in AT_START])
def test_a_link_planted_before_the_start_stops_the_run_before_it_writes(name, kind, tmp_path):
    run_dir = tmp_path / "run"
    target = outside_folder(tmp_path) if kind == "folder" else outside_file(tmp_path, TEXT)
    link = plant_link(run_dir, name, target)
    before = sorted(os.listdir(run_dir))
    with pytest.raises(UnsafePath, match=rf"^refusing to write {re.escape(link)}: it is a "
                                         rf"symbolic link \(to {re.escape(target)}\)"):
        run_folder.RunFolderLock(str(run_dir))  # the first thing every agent does
    assert untouched(target)
    assert sorted(os.listdir(run_dir)) == before  # no lock, no config: nothing written


def test_a_hard_link_is_refused_too(tmp_path):
    """O_NOFOLLOW does not see a hard link: the run checks that its files have one name."""
    target = outside_file(tmp_path, TEXT)
    link = plant_link(tmp_path / "run", "config_history.jsonl", target, hard=True)
    with pytest.raises(UnsafePath, match=rf"{re.escape(link)}: it is a file with 2 names"):
        run_folder.RunFolderLock(str(tmp_path / "run"))
    assert untouched(target)


def test_a_checkpoints_path_that_is_a_file_is_refused_at_the_start(tmp_path):
    """Found only by the final save before; now before the run starts."""
    (tmp_path / "checkpoints").write_text("a file")
    with pytest.raises(UnsafePath, match=r"checkpoints: it is a file, not a folder"):
        run_folder.RunFolderLock(str(tmp_path))
    assert not (tmp_path / ".lock").exists()


def test_a_launched_run_stops_with_one_line_and_exit_1(tmp_path):
    run_dir, target = tmp_path / "run", outside_file(tmp_path, TEXT)
    link = plant_link(run_dir, "train.csv.tmp", target)
    result = launch("impala", f"--run_dir={run_dir}")
    lines = own_lines(result.stderr)
    assert result.returncode == 1, result.stderr
    assert lines == [f"error: refusing to write {link}: it is a symbolic link (to {target}). "
                     "A run writes only files and folders it made itself there, never through "
                     "a link: remove it or choose another --run_dir"], result.stderr
    assert untouched(target) and sorted(os.listdir(run_dir)) == ["train.csv.tmp"]


# ------------------------------------------------------------- planted while the run writes

def write_metrics(run_dir):
    logger.MetricsLogger(str(run_dir), tensorboard=False).write("train", 1, {"loss": 1.0})


def plot_curve(run_dir):
    logger.MetricsLogger(str(run_dir), tensorboard=False).write(
        "eval", 1, {"env_steps": 1.0, "mean_return": 1.0})
    logger.plot_learning_curve(str(run_dir))


def open_tensorboard(run_dir):
    logger.MetricsLogger(str(run_dir)).close()


def save_checkpoint(run_dir):
    checkpoint.save_checkpoint(str(run_dir / "checkpoints"), 7, {"w": np.zeros(3)}, {})


def write_config(run_dir):
    run_folder._append_history(str(run_dir), impala_config(run_dir), None, {})


def move_previous_run(run_dir):
    (run_dir / "config.json").write_text("{}")
    (run_dir / run_folder.HISTORY).write_text("")
    run_folder._move_previous_run(str(run_dir), str(run_dir / "checkpoints"), print)


def take_lock(run_dir):
    run_folder.RunFolderLock(str(run_dir))


# (name planted, target kind, the writer that meets it)
WHILE_RUNNING = [("train.csv", "file", write_metrics), ("train.csv.tmp", "file", write_metrics),
                 ("learning_curve.png", "file", plot_curve), ("tb", "folder", open_tensorboard),
                 ("checkpoints", "folder", save_checkpoint),
                 ("checkpoints/step_000000000007.tmp", "folder", save_checkpoint),
                 ("config.json", "file", write_config),
                 ("config_history.jsonl", "file", write_config),
                 ("previous", "folder", move_previous_run), (".lock", "file", take_lock)]


@pytest.mark.parametrize("name,kind,writer", WHILE_RUNNING,
                         ids=[f"{w.__name__}:{n}" for n, _, w in WHILE_RUNNING])
def test_each_writer_refuses_a_link_planted_under_its_name(name, kind, writer, tmp_path,
                                                            monkeypatch):
    """With the start's check skipped, as for a link planted after it."""
    monkeypatch.setattr(files, "check_run_dir", lambda run_dir: None)
    run_dir = tmp_path / "run"
    target = outside_folder(tmp_path) if kind == "folder" else outside_file(tmp_path, TEXT)
    link = plant_link(run_dir, name, target)
    with pytest.raises(UnsafePath, match=rf"^refusing to write {re.escape(link)}: "):
        writer(run_dir)
    assert untouched(target)


def test_a_replay_temporary_is_not_followed(tmp_path):
    from replay.prioritized import PrioritizedReplay
    target = outside_file(tmp_path, TEXT)
    plant_link(tmp_path, "replay.npz.tmp", target)
    replay = PrioritizedReplay(8, {"x": ((3,), np.float32)})
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        replay.save(str(tmp_path / "replay.npz"))
    assert untouched(target)


def test_the_run_still_writes_its_own_files_again(tmp_path):
    """What the checks allow: a second start and a second save over the run's own files."""
    for _ in range(2):
        lock = run_folder.RunFolderLock(str(tmp_path))
        write_config(tmp_path)
        write_metrics(tmp_path)
        plot_curve(tmp_path)
        save_checkpoint(tmp_path)
        lock.release()
    assert len(logger.read_metrics(str(tmp_path), "train")) == 2
    assert checkpoint.find_resumable(str(tmp_path / "checkpoints"), print).endswith(
        "step_000000000007")
