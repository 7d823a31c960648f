"""The run folder, settled before anything starts.

`RunFolderLock` and `prepare_run_folder` run first in every agent, before any environment,
thread or cluster: the lock keeps a second run out of a folder in use, and `prepare_run_folder`
makes sure `run_dir` is a writable folder, removes the run's own partial saves, chooses the
checkpoint a resumed run continues from, refuses a config that no longer fits that checkpoint,
and records every start's config. Whatever goes wrong here is a `UsageError` (or, for a link
planted under a name the run writes, `files.UnsafePath`): the launcher prints its message alone
and exits 1. Every file here is written through `agents.run.files`.

Files it keeps in `run_dir`:
  .lock                  the lock of the run using the folder (its pid and host, for the message
                         a second run gets); left behind, harmlessly, when the run ends;
  config.json            the config of the run's first start, never overwritten;
  config_history.jsonl   one line per start: time, checkpoint resumed from, changed fields,
                         the whole config;
  previous/<time>/       a finished or stopped run found in run_dir when a new one (not
                         `--resume`) starts there, moved aside whole: nothing is overwritten.
                         Only a run of this project is moved (it has `config_history.jsonl`
                         or checkpoints); a folder holding anything else's `config.json` is
                         refused.
"""

import dataclasses
import datetime
import errno
import fcntl
import json
import math
import os
import socket
import tempfile
from typing import Any, Callable

from agents.run import checkpoint, files


class UsageError(ValueError):
    """A run asked for in a way that cannot work (its run folder, a resume that does not fit);
    not a bug, so the launcher prints the message without a traceback."""


def _json_values(values: dict) -> dict:
    """`values` as `config.json` holds them: tuples as lists, infinities as None."""
    values = {k: (None if isinstance(v, float) and math.isinf(v) else v)
              for k, v in values.items()}
    return json.loads(json.dumps(values))


def config_values(config: Any) -> dict:
    """The config as JSON values (tuples as lists, infinities as None), as `config.json` holds."""
    return _json_values(dataclasses.asdict(config))


def _check_writable(run_dir: str) -> None:
    if not run_dir:
        raise UsageError("run_dir must name a folder, got an empty string")
    if os.path.exists(run_dir) and not os.path.isdir(run_dir):
        raise UsageError(f"run_dir {run_dir!r} exists and is not a folder")
    try:
        os.makedirs(run_dir, exist_ok=True)
        with tempfile.TemporaryFile(dir=run_dir):
            pass
    except OSError as e:
        raise UsageError(f"run_dir {run_dir!r} cannot be created or written: "
                         f"{e.strerror or e}") from None
    files.check_run_dir(run_dir)  # before anything is written there
    _refuse_foreign(run_dir)


HISTORY = "config_history.jsonl"


def _refuse_foreign(run_dir: str) -> None:
    """A `config.json` without this project's history or checkpoints next to it is someone
    else's: a new run would move it (and all else there) to previous/, a resume would overwrite
    it. The folder is refused instead."""
    if (os.path.exists(os.path.join(run_dir, "config.json"))
            and not os.path.exists(os.path.join(run_dir, HISTORY))
            and not checkpoint.list_checkpoints(os.path.join(run_dir, "checkpoints"))):
        raise UsageError(
            f"run_dir {run_dir!r} holds a config.json but no {HISTORY} or checkpoints/: it is "
            "not a run folder of these agents, and a run would move or overwrite what is in it. "
            "Choose another --run_dir (a new or empty folder)")


LOCK_FILE = ".lock"


class RunFolderLock:
    """Holds `run_dir` for one run until `release()` (or the end of the process).

    Two runs in one folder would cost each other checkpoints: a second start removes the first's
    unfinished save (`step_N.tmp`) under it and, without `--resume`, moves its folder aside;
    with `--resume` both write and prune the same `checkpoints/`. So a run takes an exclusive
    `flock` on `run_dir/.lock` before it touches anything there, and a second run (a double
    launch, a job requeued while the first still runs) stops with a `UsageError` naming the
    holder. The kernel drops the lock when the holding process ends, however it ends (SIGKILL
    included), so a stale lock never blocks `--resume`. Where the filesystem has no locks at all,
    the run goes on without one and says so.

    Args:
      run_dir: the run folder; created if missing (the same checks as `prepare_run_folder`).
      print_fn: where the note about a filesystem without locks goes.

    Raises:
      UsageError: run_dir unusable, or held by another run.
    """

    def __init__(self, run_dir: str, print_fn: Callable = print) -> None:
        _check_writable(run_dir)
        path = os.path.join(run_dir, LOCK_FILE)
        self._file = files.open_file(path, "a+")
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.seek(0)
            holder = self._file.read().split()
            self.release()
            raise UsageError(f"run_dir {run_dir!r} is in use by another run "
                             f"({_describe_holder(holder)}); stop that run first or choose "
                             "another --run_dir") from None
        except OSError as e:
            if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                self.release()
                raise
            print_fn(f"run_dir {run_dir!r} is on a filesystem without file locks: nothing keeps "
                     "a second run out of it")
        self._file.truncate(0)
        self._file.write(f"{os.getpid()} {socket.gethostname()}\n")
        self._file.flush()

    def release(self) -> None:
        """Lets another run use the folder (closing the file drops the lock); idempotent."""
        self._file.close()


def _describe_holder(holder: list[str]) -> str:
    """`holder`: the words of a lock file, `[pid, host]`."""
    if len(holder) != 2:
        return "its pid not yet recorded"
    pid, host = holder
    if pid == str(os.getpid()) and host == socket.gethostname():
        return "an agent in this process that was not closed: call its close() or run() first"
    return f"pid {pid} on {host}"


def config_changes(saved: dict, config: Any) -> tuple[dict, dict]:
    """(fixed, allowed): fields whose value differs from the saved config, as
    `{field: (old, new)}`, split by `config.RESUME_MAY_CHANGE`. Fields the saved config does not
    record (added since) are compared with the value they had in effect before they existed
    (`config.former_values()`), or not at all. A checkpoint's meta keeps infinities, which
    compare as the None `config_values` writes for them."""
    saved = dict(config.former_values(), **_json_values(saved))
    fixed, allowed = {}, {}
    for name, new in config_values(config).items():
        if name not in saved or saved[name] == new:
            continue
        (allowed if name in config.RESUME_MAY_CHANGE else fixed)[name] = (saved[name], new)
    return fixed, allowed


def _describe(changes: dict) -> str:
    return ", ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in sorted(changes.items()))


def _move_previous_run(run_dir: str, ckpt_dir: str, print_fn: Callable) -> None:
    """A new run in a folder holding another run (its config or checkpoints) moves that run
    aside whole (a foreign `config.json` was refused by `_check_writable`)."""
    if not (os.path.exists(os.path.join(run_dir, "config.json"))
            or checkpoint.list_checkpoints(ckpt_dir)):
        return
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    target = os.path.join(files.real_folder(os.path.join(run_dir, "previous"), create=True),
                          stamp)
    os.mkdir(target)
    for name in os.listdir(run_dir):
        if name not in ("previous", LOCK_FILE):  # the lock stays with the folder it guards
            os.rename(os.path.join(run_dir, name), os.path.join(target, name))
    print_fn(f"run_dir {run_dir} held an earlier run; moved it to {target} (pass --resume to "
             "continue a run instead)")


def _append_history(run_dir: str, config: Any, resumed_from: str | None, changed: dict) -> None:
    """Appends this start to the history; a start that restores nothing also (re)writes
    `config.json`, since no checkpoint was made with any earlier one."""
    values = config_values(config)
    path = os.path.join(run_dir, "config.json")
    if resumed_from is None or not os.path.exists(path):
        with files.open_file(path, "w") as f:
            json.dump(values, f, indent=2, sort_keys=True)
    entry = dict(started=datetime.datetime.now().isoformat(timespec="seconds"),
                 resumed_from=resumed_from,
                 changed={k: list(v) for k, v in sorted(changed.items())}, config=values)
    with files.open_file(os.path.join(run_dir, HISTORY), "a") as f:
        f.write(json.dumps(entry, sort_keys=True) + "\n")


def prepare_run_folder(config: Any, print_fn: Callable = print, chief: bool = True) -> str | None:
    """Settles `config.run_dir` for a start of this run; returns the checkpoint to resume from.

    Args:
      config: the run's config (run_dir, resume, and `RESUME_MAY_CHANGE`).
      print_fn: where notes go (partial saves removed, fallbacks, allowed changes).
      chief: this process writes the folder (with several processes only process 0); the
        others only read it.

    Returns:
      The checkpoint folder to restore, or None for a new run.

    Raises:
      UsageError: run_dir unusable; or a resume whose checkpoint was made with a config that
        differs in a field that shapes the parameters, the optimizer state or the replay.
    """
    run_dir = config.run_dir
    ckpt_dir = os.path.join(run_dir, "checkpoints")
    if chief:
        _check_writable(run_dir)  # with `files.check_run_dir`
        for path in checkpoint.remove_partial_saves(ckpt_dir):
            print_fn(f"removed {path}, a save that never finished")
    if not config.resume:
        if chief:
            _move_previous_run(run_dir, ckpt_dir, print_fn)
            _append_history(run_dir, config, None, {})
        return None
    found = checkpoint.list_checkpoints(ckpt_dir)
    path = checkpoint.find_resumable(ckpt_dir, print_fn, move_aside=chief)
    if path is None and found:  # every checkpoint was damaged: training from 0 is no resume
        raise UsageError(
            f"--resume: no complete checkpoint is left in {ckpt_dir}: "
            f"{', '.join(os.path.basename(p) for p in found)} failed verification (moved aside "
            "as .corrupt); nothing was started. Restore a checkpoint there, or start a new run "
            "without --resume (this folder's run is then moved to previous/)")
    if path is None:
        print_fn(f"--resume: no complete checkpoint in {ckpt_dir}; starting a new run")
        if chief:
            _append_history(run_dir, config, None, {})
        return None
    saved = checkpoint.read_run_meta(path)["config"]
    fixed, allowed = config_changes(saved, config)
    if fixed:
        raise UsageError(
            f"--resume: {path} was made with another config, and these fields shape the "
            f"parameters, optimizer state or replay: {_describe(fixed)}. Resume with the saved "
            f"values (see {os.path.join(run_dir, 'config.json')}) or start a new --run_dir")
    if allowed:
        print_fn(f"--resume: changed since {os.path.basename(path)}: {_describe(allowed)}")
    if chief:
        _append_history(run_dir, config, path, allowed)
    return path
