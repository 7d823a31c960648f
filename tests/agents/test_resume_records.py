"""--resume continues one record: the run resumed, or a clear stop, never a silent restart.

A resume whose every checkpoint is damaged stops (nothing started, config.json untouched)
instead of training from step 0 in the folder; the fallback message names the checkpoint it
falls back to; and the metrics are cut back to the checkpoint resumed from, so rows of a
discarded stretch never interleave with the new ones.
"""

import os
import shutil

import numpy as np
import pytest

from agents.impala.agent import ImpalaAgent
from agents.run import checkpoint, run_folder
from agents.run.logger import read_metrics, truncate_metrics
from agents.run.run_folder import UsageError
from tests.agents.fault_injection import impala_config, launch, own_lines


@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory):
    """An IMPALA run with two checkpoints (a first run and one resume) and its metrics."""
    run_dir = tmp_path_factory.mktemp("impala")
    quiet = lambda *a: None  # noqa: E731
    ImpalaAgent(impala_config(run_dir, total_env_steps=1_500), print_fn=quiet).run()
    ImpalaAgent(impala_config(run_dir, resume=True, total_env_steps=3_000),
                print_fn=quiet).run()
    older, newer = (checkpoint.read_meta(p)["updates"]
                    for p in checkpoint.list_checkpoints(str(run_dir / "checkpoints")))
    # Evaluation rows of both stretches (an evaluation's timing is the evaluator thread's).
    (run_dir / "eval.csv").write_text(f"step,env_steps,mean_return\n{older},1000,9.0\n"
                                      f"{newer},2000,11.0\n")
    return run_dir


def damage(path):
    with open(os.path.join(path, "learner.msgpack"), "r+b") as f:
        f.write(b"\0" * 64)


def test_a_resume_whose_only_checkpoint_is_damaged_stops_and_starts_nothing(two_checkpoints,
                                                                            tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(two_checkpoints, run_dir)
    older, newer = checkpoint.list_checkpoints(str(run_dir / "checkpoints"))
    shutil.rmtree(older)
    damage(newer)
    kept = {name: (run_dir / name).read_bytes()
            for name in ("config.json", "config_history.jsonl", "train.csv")}
    result = launch("impala", f"--run_dir={run_dir}", "--resume")
    assert result.returncode == 1, result.stdout + result.stderr
    (line,) = own_lines(result.stderr)
    assert line.startswith(f"error: --resume: no complete checkpoint is left in "
                           f"{run_dir / 'checkpoints'}: {os.path.basename(newer)} failed"), line
    assert "falling back to the one before it" not in result.stdout
    assert "no earlier checkpoint is left" in result.stdout, result.stdout
    assert "Traceback" not in result.stderr
    assert {name: (run_dir / name).read_bytes() for name in kept} == kept
    assert checkpoint.list_checkpoints(str(run_dir / "checkpoints")) == []


def test_the_fallback_message_names_the_checkpoint_it_falls_back_to(tmp_path):
    state = {"w": np.ones(2, np.float32)}
    paths = [checkpoint.save_checkpoint(str(tmp_path), step, state, dict(updates=step), keep=3)
             for step in (1, 2, 3)]
    damage(paths[2])
    damage(paths[1])
    printed = []
    assert checkpoint.find_resumable(str(tmp_path), printed.append) == paths[0]
    assert [p.rsplit("; ", 1)[1] for p in printed] == [
        "falling back to step_000000000002", "falling back to step_000000000001"]


def test_a_resume_cuts_the_metrics_back_to_its_checkpoint(two_checkpoints, tmp_path):
    """The newest checkpoint is damaged: the run resumes from the older one, and the rows the
    discarded stretch wrote go, from train.csv, eval.csv and the curve drawn from them."""
    run_dir = tmp_path / "run"
    shutil.copytree(two_checkpoints, run_dir)
    older, newer = checkpoint.list_checkpoints(str(run_dir / "checkpoints"))
    step = checkpoint.read_meta(older)["updates"]
    assert max(r["step"] for r in read_metrics(run_dir, "train")) > step
    assert max(r["step"] for r in read_metrics(run_dir, "eval")) > step
    damage(newer)
    (run_dir / "learning_curve.png").unlink(missing_ok=True)
    printed = []
    agent = ImpalaAgent(impala_config(run_dir, resume=True, total_env_steps=3_500, eval_period=1),
                        print_fn=printed.append)
    assert agent.resumed_from == older
    for group in ("train", "eval"):
        assert max(r["step"] for r in read_metrics(run_dir, group)) <= step, group
    assert (run_dir / "learning_curve.png").exists()
    assert any("removed" in p and "metrics rows after update" in p for p in printed), printed
    agent.run()
    for group in ("train", "eval"):
        steps = [r["step"] for r in read_metrics(run_dir, group)]
        assert steps == sorted(steps), (group, steps)


def test_truncation_keeps_rows_up_to_the_step_and_replaces_the_file_whole(tmp_path):
    (tmp_path / "train.csv").write_text("step,loss\n1,0.5\n2,0.4\n3,0.3\n,bad\n")
    inode = os.stat(tmp_path / "train.csv").st_ino
    assert truncate_metrics(str(tmp_path), 2) == 1
    assert (tmp_path / "train.csv").read_text() == "step,loss\n1,0.5\n2,0.4\n,bad\n"
    assert os.stat(tmp_path / "train.csv").st_ino != inode  # renamed into place
    assert truncate_metrics(str(tmp_path), 2) == 0 and not (tmp_path / "eval.csv").exists()
    assert sorted(os.listdir(tmp_path)) == ["train.csv"]


def test_resume_stops_in_prepare_run_folder_before_config_is_written(two_checkpoints, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(two_checkpoints, run_dir)
    for path in checkpoint.list_checkpoints(str(run_dir / "checkpoints")):
        damage(path)
    history = (run_dir / "config_history.jsonl").read_text()
    with pytest.raises(UsageError, match="no complete checkpoint is left"):
        run_folder.prepare_run_folder(impala_config(run_dir, resume=True), print)
    assert (run_dir / "config_history.jsonl").read_text() == history
