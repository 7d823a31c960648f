"""Opening what a run writes, so that a link planted in its folder is refused, never followed.

A run folder is often shared (a group's scratch space, a job's working directory). Whoever can
write there can put a symbolic link under a name the run writes (`.lock`, `train.csv.tmp`,
`checkpoints`) pointing at a file elsewhere; a plain `open(path, "w")` would then truncate that
file. So every file the run writes is opened here:
  * with `O_NOFOLLOW`: a link as the last component makes the open fail instead of being
    followed;
  * new files and temporaries with `O_CREAT | O_EXCL`, which fails on any existing name, a link
    included;
  * an existing file is truncated or appended to only once it is known to be a regular file with
    one name (a hard link to a file elsewhere would be written through as well);
  * every folder the run writes in under run_dir (`checkpoints`, `tb`, `previous`) is made or
    checked here to be a real folder, not a link to one.
`check_run_dir` applies the same rules at a start to every name the run will write, so a planted
link stops the run with one message before anything is written. run_dir itself may be a link:
whoever passed `--run_dir` chose it.
"""

import errno
import os
import re
import shutil
import stat
from typing import IO, Any

# What the run writes directly in run_dir, and the folders it writes in (`check_run_dir`).
RUN_FILES = (".lock", "config.json", "config_history.jsonl", "learning_curve.png")
RUN_FILE_PATTERN = re.compile(r"^\w+\.csv(\.tmp)?$")  # metrics and their rewrites
RUN_FOLDERS = ("checkpoints", "tb", "previous")

_MODES = {  # open mode -> os.open flags before O_NOFOLLOW, and whether it writes
    "r": (os.O_RDONLY, False), "rb": (os.O_RDONLY, False),
    "w": (os.O_WRONLY | os.O_CREAT, True), "wb": (os.O_WRONLY | os.O_CREAT, True),
    "a": (os.O_WRONLY | os.O_CREAT | os.O_APPEND, True),
    "a+": (os.O_RDWR | os.O_CREAT | os.O_APPEND, True),
    "x": (os.O_WRONLY | os.O_CREAT | os.O_EXCL, True),
    "xb": (os.O_WRONLY | os.O_CREAT | os.O_EXCL, True),
}


class UnsafePath(ValueError):
    """A name the run writes is a link, or not the kind of file or folder the run keeps there;
    the message names the path and what to do."""


def _refuse(path: str, what: str) -> UnsafePath:
    return UnsafePath(f"refusing to write {path}: {what}. A run writes only files and folders it "
                      "made itself there, never through a link: remove it or choose another "
                      "--run_dir")


def _describe(path: str) -> str:
    """What is at `path`, for a message: a link and its target, or the kind of file."""
    if os.path.islink(path):
        return f"it is a symbolic link (to {os.readlink(path)})"
    mode = os.lstat(path).st_mode
    if stat.S_ISDIR(mode):
        return "it is a folder, not a file"
    if stat.S_ISREG(mode):
        return f"it is a file with {os.lstat(path).st_nlink} names (a hard link)"
    return "it is not a regular file"


def real_folder(path: str, create: bool = False) -> str:
    """Checks that `path` is a folder and not a link to one (creating it when missing and
    `create`); returns `path`.

    Raises:
      UnsafePath: `path` is a link, or exists and is not a folder.
    """
    if create:
        if os.path.dirname(path):  # the folders above: run_dir and its parents, the user's
            os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            os.mkdir(path)  # never follows a link: an existing name, a link included, fails
        except FileExistsError:
            pass
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return path
    if stat.S_ISLNK(mode):
        raise _refuse(path, f"it is a symbolic link (to {os.readlink(path)}), not a folder")
    if not stat.S_ISDIR(mode):
        raise _refuse(path, "it is a file, not a folder")
    return path


def open_file(path: str, mode: str = "r", **fdopen_kwargs: Any) -> IO:
    """`open(path, mode)` that never follows a link at `path` and never writes a file that has
    other names; modes r, rb, w, wb, a, a+, x, xb (x: the file must be new).

    Raises:
      UnsafePath: `path` is a link, or (writing) not a regular file, or a file with hard links.
      OSError: anything else `open` raises (a missing file when reading, a full disk).
    """
    flags, writes = _MODES[mode]
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        # ELOOP: a link at the last component; EEXIST: a new file's name is taken (a link too).
        if e.errno == errno.ELOOP or (e.errno == errno.EEXIST and os.path.islink(path)):
            raise _refuse(path, _describe(path)) from None
        raise
    try:
        info = os.fstat(fd)
        if writes and (not stat.S_ISREG(info.st_mode) or info.st_nlink > 1):
            raise _refuse(path, _describe(path))
        if mode in ("w", "wb"):  # truncated only now that it is known to be the run's own
            os.ftruncate(fd, 0)
        return os.fdopen(fd, mode.replace("x", "w"), **fdopen_kwargs)
    except BaseException:
        os.close(fd)
        raise


def remove_tree(path: str) -> None:
    """Deletes the folder `path` and all in it, if it exists (`shutil.rmtree` with errors
    ignored, as a cleanup); a link there is refused rather than silently left.

    Raises:
      UnsafePath: `path` is a link.
    """
    if os.path.islink(path):
        raise _refuse(path, f"it is a symbolic link (to {os.readlink(path)}), not a folder")
    shutil.rmtree(path, ignore_errors=True)


def save_figure(fig: Any, path: str, **savefig_kwargs: Any) -> None:
    """`fig.savefig(path)` (a PNG) through `open_file`."""
    with open_file(path, "wb") as f:
        fig.savefig(f, format="png", **savefig_kwargs)


def check_run_dir(run_dir: str) -> None:
    """Checks, before a run writes anything, every name it will write in `run_dir`: none is a
    link, each file is a regular file, each of its folders a real folder, and the folders hold
    no links under names the run writes there.

    Raises:
      UnsafePath: naming the first path that fails.
    """
    if not os.path.isdir(run_dir):
        return
    for name in sorted(os.listdir(run_dir)):
        path = os.path.join(run_dir, name)
        if name in RUN_FOLDERS:
            real_folder(path)
            for entry in sorted(os.listdir(path)):
                if os.path.islink(os.path.join(path, entry)):
                    raise _refuse(os.path.join(path, entry), _describe(os.path.join(path, entry)))
        elif name in RUN_FILES or RUN_FILE_PATTERN.match(name):
            info = os.lstat(path)
            if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
                raise _refuse(path, _describe(path))
