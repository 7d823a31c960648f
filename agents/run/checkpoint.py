"""Checkpoints that survive crashes, prove they are complete, and run no code on load.

A checkpoint is a folder `step_<N>` holding `learner.msgpack` (any pytree of arrays, through
`flax.serialization`), `meta.json` (counters and the config), optionally `replay.npz`, and
`manifest.json`, written last: the size and SHA-256 of every other file. A checkpoint counts only
when its manifest is there and every file matches it, so a folder with a missing, truncated or
altered file is recognised as incomplete instead of being half restored.

Saving writes into `step_<N>.tmp` and renames it into place when complete; an interrupted save
leaves only that partial folder, which `remove_partial_saves` deletes at the next start. Old
checkpoints are pruned to the newest `keep` complete ones, never fewer, so the only complete
checkpoint is never deleted. On resume, `find_resumable` takes the newest complete checkpoint;
a newer one that fails its manifest is moved aside (`step_<N>.corrupt`) with a message naming
the file, and kept for inspection.

Every file and folder a save writes goes through `agents.run.files`: a link planted under a
name it writes (`checkpoints`, `step_<N>.tmp`) is refused, never followed.

The same rules as orbax-checkpoint's `CheckpointManager` (atomic finalize, cleanup of partial
saves, keep-N); `benchmarks/bench_checkpoint.py` measures both formats on an Atari replay.
"""

import dataclasses
import hashlib
import json
import os
import re
import shutil
from typing import Any, Callable

import flax.serialization
import jax
import numpy as np

from agents.run import files as files_module
from agents.run.divergence import Diverged, nonfinite_leaves

MANIFEST = "manifest.json"
# Written into every meta.json: a checkpoint that has it must have its manifest too. One
# without it was saved before checkpoints had manifests (complete by construction then: the
# folder was renamed into place when written) and is accepted unverified.
FORMAT = 2
_NAME = re.compile(r"^step_(\d+)$")
_PARTIAL = re.compile(r"^step_\d+\.tmp$")
_REPLACED = re.compile(r"^(step_\d+)\.old$")


class CheckpointError(ValueError):
    """A checkpoint that is incomplete or corrupt; the message names its folder and file."""


class CheckpointMismatch(ValueError):
    """A complete checkpoint that does not fit this run (another network, replay or shards)."""


class NonFiniteCheckpoint(CheckpointError):
    """A complete checkpoint whose learner state holds NaN or inf: saved from a run that had
    diverged (by a version that did not check), so resuming or evaluating it is pointless."""


def _names(paths: list[str]) -> str:
    return ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")


def check_finite(path: str, state: Any) -> None:
    """Raises `NonFiniteCheckpoint` naming `path` and the leaves if `state` (the learner state
    read from it) holds NaN or inf."""
    bad = nonfinite_leaves(state)
    if bad:
        raise NonFiniteCheckpoint(
            f"{path}: learner.msgpack holds non-finite values ({_names(bad)}): the run had "
            "diverged when it was saved; resume from an earlier checkpoint (move this one "
            "aside) or start a new run")


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def _write_manifest(folder: str) -> None:
    table = {name: dict(bytes=os.path.getsize(os.path.join(folder, name)),
                        sha256=_sha256(os.path.join(folder, name)))
             for name in sorted(os.listdir(folder)) if name != MANIFEST}
    with files_module.open_file(os.path.join(folder, MANIFEST), "x") as f:
        json.dump(dict(files=table), f, indent=2, sort_keys=True)


def verify(path: str, checksums: bool = True) -> dict:
    """Checks `path` against its manifest; returns the manifest's file table.

    Args:
      path: a checkpoint folder.
      checksums: also compare SHA-256 (reads every byte); False compares sizes only.

    Raises:
      CheckpointError: naming the folder and the first file that is missing or differs.
    """
    try:
        with open(os.path.join(path, MANIFEST)) as f:
            files = _file_table(json.load(f))
    except FileNotFoundError:
        if _is_legacy(path):
            return {name: dict(bytes=os.path.getsize(os.path.join(path, name)))
                    for name in sorted(os.listdir(path))}
        raise CheckpointError(f"{path}: {MANIFEST} is missing (the save did not finish)") from None
    except (ValueError, OSError) as e:
        raise CheckpointError(f"{path}: {MANIFEST} is unreadable ({e})") from None
    for name, entry in sorted(files.items()):
        file = os.path.join(path, name)
        if not os.path.isfile(file):
            raise CheckpointError(f"{path}: {name} is missing")
        size = os.path.getsize(file)
        if size != entry["bytes"]:
            raise CheckpointError(f"{path}: {name} has {size:,} bytes, the manifest says "
                                  f"{entry['bytes']:,} (truncated or replaced)")
        if checksums and _sha256(file) != entry["sha256"]:
            raise CheckpointError(f"{path}: {name} does not match its checksum (corrupt)")
    return files


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _file_table(manifest: object) -> dict:
    """The `files` table of a parsed manifest; a ValueError saying what is wrong with it (a
    damaged or hand-edited manifest must read as a damaged checkpoint, not crash the reader)."""
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict):
        raise ValueError('not an object with a "files" table')
    for name, entry in files.items():
        if name in (MANIFEST, "", ".", "..") or "/" in name or "\\" in name:
            raise ValueError(f"names {name!r}, not a file of the checkpoint's folder")
        if not (isinstance(entry, dict) and isinstance(entry.get("bytes"), int)
                and entry["bytes"] >= 0 and _SHA256.match(str(entry.get("sha256")))):
            raise ValueError(f"its entry for {name} is not {{bytes: <size>, sha256: <64 hex "
                             f"digits>}}: {str(entry)[:100]}")
    return files


def _is_legacy(path: str) -> bool:
    """A checkpoint saved before manifests existed: a readable meta.json without `format`."""
    try:
        with open(os.path.join(path, "meta.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return False
    return (isinstance(meta, dict) and "format" not in meta
            and os.path.isfile(os.path.join(path, "learner.msgpack")))


def is_complete(path: str, checksums: bool = False) -> bool:
    try:
        verify(path, checksums)
        return True
    except CheckpointError:
        return False


def save_checkpoint(directory: str, step: int, learner_state: Any, meta: dict,
                    replay: Any = None, keep: int = 2) -> str:
    """Writes checkpoint `step` into `directory` atomically; returns its path.

    A failure while writing (a full disk, say) removes the partial folder and re-raises; every
    earlier checkpoint stays as it was.

    Raises:
      Diverged: `learner_state` holds NaN or inf; nothing is written and nothing pruned, so
        the newest finite checkpoint stays.
    """
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    learner_state = jax.device_get(learner_state)
    bad = nonfinite_leaves(learner_state)
    if bad:
        raise Diverged(f"the learner state holds non-finite values ({_names(bad)}) at update "
                       f"{step:,}")
    files_module.real_folder(directory, create=True)
    final = os.path.join(directory, f"step_{step:012d}")
    tmp, replaced = final + ".tmp", final + ".old"
    files_module.remove_tree(tmp)
    try:
        os.mkdir(tmp)  # new: whatever is written in it is the run's own
        with files_module.open_file(os.path.join(tmp, "learner.msgpack"), "xb") as f:
            f.write(flax.serialization.to_bytes(learner_state))
        with files_module.open_file(os.path.join(tmp, "meta.json"), "x") as f:
            json.dump(dict(meta, format=FORMAT), f, indent=2, sort_keys=True)
        if replay is not None:
            replay.save(os.path.join(tmp, "replay.npz"))
        _write_manifest(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if os.path.exists(final):  # the same step saved again: keep it until the new one is in
        os.rename(final, replaced)
    os.rename(tmp, final)
    shutil.rmtree(replaced, ignore_errors=True)
    prune(directory, keep)
    return final


def copy_without_replay(path: str, destination: str) -> str:
    """Copies checkpoint `path`, verified first, to the new folder `destination` without its
    replay: the learner state and meta that a record keeps to evaluate or animate the agent
    (an Ape-X replay of Atari frames is about 1.5 GB). The copy has its own manifest, and a run
    resumed from it starts with an empty replay, as one saved with `checkpoint_replay=false`
    does. Returns `destination`.

    Raises:
      CheckpointError: `path` is incomplete or corrupt.
      FileExistsError: `destination` exists.
    """
    verify(path)
    if os.path.lexists(destination):  # a record is never overwritten
        raise FileExistsError(f"{destination} exists; name a new folder")
    os.makedirs(os.path.dirname(os.path.abspath(destination)), exist_ok=True)
    tmp = destination + ".tmp"
    files_module.remove_tree(tmp)
    os.mkdir(tmp)
    try:
        for name in ("learner.msgpack", "meta.json"):
            shutil.copyfile(os.path.join(path, name), os.path.join(tmp, name))
        _write_manifest(tmp)
        os.rename(tmp, destination)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return destination


def prune(directory: str, keep: int) -> list[str]:
    """Deletes complete checkpoints beyond the newest `keep`; returns what it deleted.
    Incomplete folders are not counted and not deleted."""
    complete = [p for p in list_checkpoints(directory) if is_complete(p)]
    for old in complete[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return complete[:-keep]


def remove_partial_saves(directory: str) -> list[str]:
    """Deletes the folders of saves that never finished (`step_<N>.tmp`), and puts back a
    checkpoint that a crash left renamed aside mid-replacement; returns what it removed."""
    if not os.path.isdir(directory):
        return []
    removed = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if _PARTIAL.match(name):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        elif match := _REPLACED.match(name):
            original = os.path.join(directory, match.group(1))
            if os.path.exists(original):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
            else:
                os.rename(path, original)
    return removed


def list_checkpoints(directory: str) -> list[str]:
    """Checkpoint folders `step_<N>` in `directory` (complete or not), oldest first."""
    if not os.path.isdir(directory):
        return []
    names = sorted((int(m.group(1)), n) for n in os.listdir(directory)
                   if (m := _NAME.match(n)) and os.path.isdir(os.path.join(directory, n)))
    return [os.path.join(directory, n) for _, n in names]


def latest_checkpoint(directory: str) -> str | None:
    """The newest complete checkpoint (sizes checked against its manifest), or None."""
    complete = [p for p in list_checkpoints(directory) if is_complete(p)]
    return complete[-1] if complete else None


def find_resumable(directory: str, print_fn: Callable = print,
                   move_aside: bool = True) -> str | None:
    """The newest checkpoint that passes `verify` with checksums, or None if none does.

    Each newer one that fails is reported (folder and file) and, with `move_aside`, renamed to
    `step_<N>.corrupt` so no later save or prune confuses it with a good one.
    """
    paths = list_checkpoints(directory)
    for index in reversed(range(len(paths))):
        path = paths[index]
        try:
            verify(path)
        except CheckpointError as e:
            note = f"; moved aside to {path}.corrupt" if move_aside else ""
            then = (f"falling back to {os.path.basename(paths[index - 1])}" if index else
                    "no earlier checkpoint is left")
            print_fn(f"checkpoint {os.path.basename(path)} is incomplete or corrupt: {e}{note}; "
                     f"{then}")
            if move_aside:
                shutil.rmtree(path + ".corrupt", ignore_errors=True)
                os.rename(path, path + ".corrupt")
            continue
        if not os.path.exists(os.path.join(path, MANIFEST)):
            print_fn(f"checkpoint {os.path.basename(path)} was saved before checkpoints had "
                     "manifests: resuming from it unverified")
        return path
    return None


def read_meta(path: str) -> dict:
    """The `meta.json` of checkpoint `path`: a JSON object (a run's: `read_run_meta`)."""
    try:
        with open(os.path.join(path, "meta.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: meta.json is unreadable ({e})") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path}: meta.json holds {type(meta).__name__}, not an object")
    return meta


_KIND = {dict: "object", int: "integer"}


def read_run_meta(path: str) -> dict:
    """The `meta.json` of a run's checkpoint (`save_run`), checked to hold what restoring it
    reads: `config` and `counters` objects (`env_steps` among the counters) and `updates`.

    Raises:
      CheckpointError: naming the file and the entry missing or of the wrong type.
    """
    meta = read_meta(path)
    for key, kind in (("config", dict), ("counters", dict), ("updates", int)):
        if not isinstance(meta.get(key), kind) or isinstance(meta.get(key), bool):
            raise CheckpointError(f"{path}: meta.json has no {key} {_KIND[kind]} (got "
                                  f"{str(meta.get(key))[:60]}); a run's checkpoint records its "
                                  "config, counters and updates")
    if not isinstance(meta["counters"].get("env_steps"), int):
        raise CheckpointError(f"{path}: meta.json's counters have no integer env_steps")
    return meta


def restore_checkpoint(path: str, learner_template: Any, replay: Any = None,
                       verified: bool = False) -> tuple[Any, dict]:
    """Restores (learner state shaped like `learner_template`, meta) and fills `replay`.

    Args:
      path: a checkpoint folder.
      learner_template: a pytree of this run's learner state; the saved one must match it.
      replay: filled from `replay.npz` when given and the checkpoint has one (a checkpoint saved
        without its replay, `checkpoint_replay=false`, leaves it as it is).
      verified: `path` already passed `verify` with checksums (skips reading it twice).

    Raises:
      CheckpointError: the checkpoint is incomplete or corrupt.
      CheckpointMismatch: it is complete but belongs to a run of another shape.
      NonFiniteCheckpoint: its learner state holds NaN or inf.
    """
    files = verify(path) if not verified else verify(path, checksums=False)
    meta = read_meta(path)
    with open(os.path.join(path, "learner.msgpack"), "rb") as f:
        data = f.read()
    try:
        state = flax.serialization.from_bytes(jax.device_get(learner_template), data)
    except Exception as e:  # noqa: BLE001  (flax raises several kinds for a foreign tree)
        raise CheckpointMismatch(
            f"{path}: learner.msgpack does not fit this run's network and optimizer "
            f"({type(e).__name__}: {str(e)[:300]})") from None
    check_finite(path, state)
    if replay is not None and "replay.npz" in files:
        try:
            replay.load(os.path.join(path, "replay.npz"))
        except ValueError as e:
            raise CheckpointMismatch(f"{path}: replay.npz does not fit this run's replay "
                                     f"({e})") from None
    return state, meta


def read_params(path: str, template: Any, network_name: str) -> Any:
    """The network parameters of checkpoint folder `path`'s learner state (without its
    optimizer state), for a trained agent to play or be evaluated.

    Args:
      path: a checkpoint folder that passed `verify`.
      template: the parameters' tree of shapes (`jax.eval_shape` of the network's init).
      network_name: what the parameters must fit, for the error message.

    Raises:
      CheckpointMismatch: the saved parameters do not have the template's tree and shapes.
      NonFiniteCheckpoint: they hold NaN or inf (saved from a run that diverged).
    """
    with open(os.path.join(path, "learner.msgpack"), "rb") as f:
        state = flax.serialization.msgpack_restore(f.read())
    try:
        params = flax.serialization.from_state_dict(template, state["params"])
        if jax.tree.map(np.shape, params) != jax.tree.map(lambda x: x.shape, template):
            raise ValueError("parameter shapes differ")
    except (KeyError, ValueError) as e:
        raise CheckpointMismatch(
            f"{path}: its parameters do not fit {network_name} "
            f"({type(e).__name__}: {str(e)[:300]})") from None
    check_finite(path, {"params": params})
    return params


def save_run(directory: str, learner_state: Any, stats: Any, config: Any,
             replay: Any = None) -> str:
    """Checkpoints a run: learner state, the counters of `stats`, the config and the replay."""
    step = int(learner_state.steps)
    meta = dict(counters=stats.state_dict(), config=dataclasses.asdict(config), updates=step)
    return save_checkpoint(directory, step, learner_state, meta, replay)


def save_solved(directory: str, solved: Any, config: Any) -> str:
    """Saves the parameters that solved a run (`Evaluator.solved_at`) as checkpoint
    `directory/step_<updates>`: `{"params": ...}` without optimizer state, with the run's config
    and the env steps of that evaluation, so `agents.trained.load` and `experiments/evaluate.py`
    read it as any checkpoint (a run cannot resume from it)."""
    meta = dict(counters=dict(env_steps=int(solved.env_steps)),
                config=dataclasses.asdict(config), updates=int(solved.updates), solved=True)
    return save_checkpoint(directory, int(solved.updates), {"params": solved.params}, meta,
                           keep=1)


def resume_run(path: str, learner_template: Any, stats: Any, replay: Any = None) -> Any:
    """Restores checkpoint `path` (chosen by `find_resumable`) into `stats` (and `replay`);
    returns the learner state."""
    state, meta = restore_checkpoint(path, learner_template, replay, verified=True)
    stats.load_state_dict(meta["counters"])
    return state
