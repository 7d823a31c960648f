"""Checkpoints: complete or not counted, corrupt ones named and skipped, partial saves removed,
the only complete checkpoint never pruned, saves killed at random moments always resumable."""

import errno
import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from agents.impala.learner import TrainingState
from agents.run import checkpoint
from agents.run.checkpoint import CheckpointError, CheckpointMismatch
from agents.run.config import RunConfig
from agents.run.stats import RunStats
from replay.prioritized import PrioritizedReplay

SPEC = {"x": ((64,), np.float32)}
STATE = {"w": np.arange(6, dtype=np.float32), "steps": np.int32(3)}


def replay_with(n, seed=0):
    replay = PrioritizedReplay(256, SPEC, seed=seed)
    replay.add({"x": np.full((n, 64), n, np.float32)}, np.ones(n))
    return replay


def save(directory, step, replay=None, keep=2):
    return checkpoint.save_checkpoint(str(directory), step, STATE, dict(updates=step), replay,
                                      keep=keep)


def test_a_checkpoint_has_a_manifest_of_every_file_written_last(tmp_path):
    path = save(tmp_path, 1, replay_with(3))
    files = checkpoint.verify(path)
    assert sorted(files) == ["learner.msgpack", "meta.json", "replay.npz"]
    for name, entry in files.items():
        assert entry["bytes"] == os.path.getsize(os.path.join(path, name))
    state, meta = checkpoint.restore_checkpoint(path, STATE, replay := replay_with(1))
    np.testing.assert_array_equal(state["w"], STATE["w"])
    assert meta == dict(updates=1, format=checkpoint.FORMAT) and len(replay) == 3


DAMAGE = {
    "replay.npz deleted": ("replay.npz", lambda p: os.remove(p)),
    "learner.msgpack truncated": ("learner.msgpack", lambda p: os.truncate(p, 5)),
    "learner.msgpack garbage": ("learner.msgpack",
                                lambda p: open(p, "r+b").write(b"\xff" * os.path.getsize(p))),
    "meta.json garbage": ("meta.json", lambda p: open(p, "r+b").write(b"{{{{")),
    "replay.npz garbage": ("replay.npz", lambda p: open(p, "r+b").write(b"\x80garbage")),
    "manifest.json deleted": ("manifest.json", lambda p: os.remove(p)),
    "manifest.json garbage": ("manifest.json", lambda p: open(p, "w").write("[")),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_newest_checkpoint_is_named_and_the_one_before_it_resumes(case, tmp_path):
    older = save(tmp_path, 1, replay_with(3))
    newer = save(tmp_path, 2, replay_with(5))
    name, damage = DAMAGE[case]
    damage(os.path.join(newer, name))
    printed = []
    assert checkpoint.find_resumable(str(tmp_path), printed.append) == older
    assert len(printed) == 1 and "step_000000000002" in printed[0] and name in printed[0]
    assert os.path.isdir(newer + ".corrupt")  # kept for inspection, never chosen again
    replay = replay_with(1)
    checkpoint.restore_checkpoint(older, STATE, replay, verified=True)
    assert len(replay) == 3  # the older checkpoint's replay, not an empty one
    with pytest.raises(CheckpointError, match=name.replace(".", r"\.")):
        checkpoint.verify(newer + ".corrupt")


def test_a_checkpoint_saved_before_manifests_existed_still_resumes(tmp_path):
    """Folders written by earlier versions (renamed into place when complete, no manifest, no
    format in meta.json) resume unverified, with a note; they are not moved aside."""
    older = save(tmp_path, 1, replay_with(3))
    legacy = save(tmp_path, 2, replay_with(5))
    os.remove(os.path.join(legacy, "manifest.json"))
    meta_path = os.path.join(legacy, "meta.json")
    meta = json.load(open(meta_path))
    del meta["format"]
    json.dump(meta, open(meta_path, "w"))
    printed = []
    assert checkpoint.find_resumable(str(tmp_path), printed.append) == legacy
    assert "before checkpoints had manifests" in printed[0]
    replay = replay_with(1)
    checkpoint.restore_checkpoint(legacy, STATE, replay, verified=True)
    assert len(replay) == 5 and os.path.isdir(older)


def test_the_only_complete_checkpoint_is_never_pruned(tmp_path):
    only = save(tmp_path, 1)
    for step in (2, 3):  # newer but incomplete: no manifest
        os.makedirs(tmp_path / f"step_{step:012d}")
    save(tmp_path, 4, keep=1)
    assert not os.path.exists(only)  # keep=1: the newer complete one replaces it
    newest = checkpoint.latest_checkpoint(str(tmp_path))
    assert newest.endswith("step_000000000004")
    os.remove(os.path.join(newest, "meta.json"))
    save(tmp_path, 5, keep=1)  # 4 is incomplete now: 5 is the only complete one and stays
    assert checkpoint.latest_checkpoint(str(tmp_path)).endswith("step_000000000005")
    save(tmp_path, 6, keep=2)
    complete = [p for p in checkpoint.list_checkpoints(str(tmp_path))
                if checkpoint.is_complete(p)]
    assert [os.path.basename(p) for p in complete] == ["step_000000000005", "step_000000000006"]


def test_a_failed_save_leaves_no_partial_folder_and_the_previous_one_intact(tmp_path,
                                                                            monkeypatch):
    first = save(tmp_path, 1, replay_with(3))

    def full_disk(self, path):
        with open(path, "wb") as f:
            f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(PrioritizedReplay, "save", full_disk)
    with pytest.raises(OSError, match="No space left"):
        save(tmp_path, 2, replay_with(4))
    assert os.listdir(tmp_path) == [os.path.basename(first)]
    checkpoint.verify(first)


def test_partial_saves_are_removed_and_a_replaced_step_put_back(tmp_path):
    save(tmp_path, 1)
    os.makedirs(tmp_path / "step_000000000002.tmp")
    os.rename(save(tmp_path, 3), tmp_path / "step_000000000003.old")  # crash mid-replace
    removed = checkpoint.remove_partial_saves(str(tmp_path))
    assert [os.path.basename(p) for p in removed] == ["step_000000000002.tmp"]
    assert sorted(os.listdir(tmp_path)) == ["step_000000000001", "step_000000000003"]


def test_a_checkpoint_of_another_shape_is_a_mismatch_not_corruption(tmp_path):
    path = save(tmp_path, 1, replay_with(3))
    with pytest.raises(CheckpointMismatch, match="learner.msgpack does not fit"):
        checkpoint.restore_checkpoint(path, {"other": np.zeros(2)})
    bigger = PrioritizedReplay(512, SPEC)
    with pytest.raises(CheckpointMismatch, match="replay.npz does not fit"):
        checkpoint.restore_checkpoint(path, STATE, bigger)


def test_a_copy_without_the_replay_restores_the_learner_and_leaves_a_replay_empty(tmp_path):
    path = save(tmp_path / "run", 7, replay_with(3))
    copy = checkpoint.copy_without_replay(path, str(tmp_path / "record" / "step_7"))
    assert sorted(checkpoint.verify(copy)) == ["learner.msgpack", "meta.json"]
    state, meta = checkpoint.restore_checkpoint(copy, STATE, replay := replay_with(0))
    np.testing.assert_array_equal(state["w"], STATE["w"])
    assert meta == dict(updates=7, format=checkpoint.FORMAT) and len(replay) == 0
    with pytest.raises(FileExistsError, match="step_7 exists"):
        checkpoint.copy_without_replay(path, copy)
    os.truncate(os.path.join(path, "learner.msgpack"), 5)  # a damaged source is not copied
    with pytest.raises(CheckpointError, match="learner.msgpack"):
        checkpoint.copy_without_replay(path, str(tmp_path / "other"))
    assert not os.path.exists(tmp_path / "other")


SAVER = """
import sys, numpy as np
from agents.run import checkpoint
from replay.prioritized import PrioritizedReplay
replay = PrioritizedReplay(200_000, {"x": ((64,), np.float32)})
replay.add({"x": np.ones((200_000, 64), np.float32)}, np.ones(200_000))
step = 0
while True:
    step += 1
    checkpoint.save_checkpoint(sys.argv[1], step, {"w": np.full(3, step)}, dict(updates=step),
                               replay)
    print(step, flush=True)
"""


def test_saves_killed_at_random_moments_always_leave_a_resumable_checkpoint(tmp_path):
    """SIGKILL at random moments of saves (about 0.1 s each), then what a restart does."""
    directory = str(tmp_path / "checkpoints")
    root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    rng = random.Random(0)
    for _ in range(4):
        proc = subprocess.Popen([sys.executable, "-c", SAVER, directory], cwd=root,
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip()  # one save finished
        time.sleep(rng.uniform(0.0, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        checkpoint.remove_partial_saves(directory)
        assert not [n for n in os.listdir(directory) if not n.startswith("step_")
                    or "." in n]
        path = checkpoint.find_resumable(directory, print)
        assert path is not None
        state, meta = checkpoint.restore_checkpoint(path, {"w": np.zeros(3, np.int64)},
                                                    verified=True)
        assert state["w"][0] == meta["updates"]
        assert len(checkpoint.list_checkpoints(directory)) <= 3
    assert json.load(open(os.path.join(path, "manifest.json")))["files"]


def test_a_run_stopped_before_its_first_step_saves_a_checkpoint_that_resumes(tmp_path):
    # Ctrl-C during startup: no actor has stepped yet, so no counter was ever added.
    state = TrainingState(params={"w": np.zeros(3, np.float32)}, opt_state=(),
                          steps=np.int32(0))
    path = checkpoint.save_run(str(tmp_path), state, RunStats(), RunConfig())
    assert checkpoint.read_run_meta(path)["counters"] == {"env_steps": 0}
    resumed = RunStats()
    checkpoint.resume_run(path, state, resumed)
    assert resumed.get("env_steps") == 0 and resumed.since_start(("env_steps",)) == [0]
