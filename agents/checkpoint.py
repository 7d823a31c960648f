"""Checkpoints that survive crashes and run no code on load.

A checkpoint is a folder `step_<N>` holding `learner.msgpack` (any pytree of arrays, through
`flax.serialization`), `meta.json` (counters and the config) and optionally `replay.npz`. It is
written under a temporary name and renamed into place only when complete, so a crash during a
save leaves the previous checkpoint untouched; older complete checkpoints beyond `keep` are
removed afterwards.
"""

import dataclasses
import json
import os
import re
import shutil
from typing import Any

import flax.serialization
import jax

_NAME = re.compile(r"^step_(\d+)$")


def save_checkpoint(directory: str, step: int, learner_state: Any, meta: dict,
                    replay: Any = None, keep: int = 2) -> str:
    """Writes checkpoint `step` into `directory` atomically; returns its path."""
    os.makedirs(directory, exist_ok=True)
    final = os.path.join(directory, f"step_{step:012d}")
    tmp = final + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    with open(os.path.join(tmp, "learner.msgpack"), "wb") as f:
        f.write(flax.serialization.to_bytes(jax.device_get(learner_state)))
    with open(os.path.join(tmp, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2, sort_keys=True)
    if replay is not None:
        replay.save(os.path.join(tmp, "replay.npz"))
    if os.path.exists(final):
        shutil.rmtree(final)
    os.rename(tmp, final)
    for old in list_checkpoints(directory)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(directory: str) -> list[str]:
    """Complete checkpoints in `directory`, oldest first."""
    if not os.path.isdir(directory):
        return []
    names = sorted((int(m.group(1)), n) for n in os.listdir(directory)
                   if (m := _NAME.match(n)))
    return [os.path.join(directory, n) for _, n in names]


def latest_checkpoint(directory: str) -> str | None:
    found = list_checkpoints(directory)
    return found[-1] if found else None


def restore_checkpoint(path: str, learner_template: Any, replay: Any = None) -> tuple[Any, dict]:
    """Restores (learner state shaped like `learner_template`, meta) and fills `replay`.

    A checkpoint saved without its replay leaves `replay` as it is (empty, for a new run).
    """
    with open(os.path.join(path, "learner.msgpack"), "rb") as f:
        state = flax.serialization.from_bytes(jax.device_get(learner_template), f.read())
    with open(os.path.join(path, "meta.json")) as f:
        meta = json.load(f)
    if replay is not None and os.path.exists(os.path.join(path, "replay.npz")):
        replay.load(os.path.join(path, "replay.npz"))
    return state, meta


def save_run(directory: str, learner_state: Any, stats: Any, config: Any,
             replay: Any = None) -> str:
    """Checkpoints a run: learner state, the counters of `stats`, the config and the replay."""
    step = int(learner_state.steps)
    meta = dict(counters=stats.state_dict(), config=dataclasses.asdict(config), updates=step)
    return save_checkpoint(directory, step, learner_state, meta, replay)


def resume_run(directory: str, learner_template: Any, stats: Any,
               replay: Any = None) -> tuple[Any, str | None]:
    """Restores the latest checkpoint of `directory`, if any, into `stats` (and `replay`).

    Returns:
      (the restored learner state, or `learner_template` when there is no checkpoint; the path
      restored from, or None).
    """
    path = latest_checkpoint(directory)
    if path is None:
        return learner_template, None
    state, meta = restore_checkpoint(path, learner_template, replay)
    stats.load_state_dict(meta["counters"])
    return state, path
