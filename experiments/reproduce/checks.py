"""The reproduction scripts' flag values, checked before anything trains.

Each check raises `UsageError` with one line naming the flag and the values it allows; the
scripts print it as the agents' launchers do (`error: ...`, exit status 1). Kept apart from the
scripts so that the checks carry no absl flag definitions (two scripts define flags of the same
names, and tests import the checks beside either).
"""

import difflib
import os

import references
from agents.run.run_folder import UsageError
from run_and_evaluate import env_id, game_name


def check_games(games: list[str], refs: dict) -> list[str]:
    """The envpool ids of --games. Each must be an Atari game of the reference scores (Pong)
    or an envpool id that envpool lists (Pong-v5, CartPole-v1), and appear once."""
    import envpool  # here: its list is only needed once the flags are checked

    known, envs = set(envpool.list_all_envs()), []
    if not games:
        raise UsageError("--games must name at least one game")
    for game in games:
        if game not in refs and game not in known:
            close = difflib.get_close_matches(game, list(refs) + sorted(known), n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise UsageError(
                f"--games: {game!r} is neither an Atari game of "
                f"{os.path.relpath(references.SCORES_FILE)} ({', '.join(refs)}) nor an envpool "
                f"id (envpool.list_all_envs(), e.g. CartPole-v1, Pong-v5){hint}")
        if env_id(game) in envs:
            raise UsageError(f"--games: {game_name(env_id(game))} is listed twice")
        envs.append(env_id(game))
    return envs


def check_out_dir(out_dir: str) -> None:
    """--out_dir: a folder, or a path whose nearest existing parent is a writable folder."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise UsageError(f"--out_dir: {out_dir!r} exists and is not a folder; name a new or "
                         "existing folder")
    parent = os.path.abspath(out_dir)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--out_dir: {out_dir!r} cannot be made or written ({parent} is not a "
                         "writable folder); name a folder you can write")


def check_budget(frames: int, seeds: list[str], eval_episodes: int) -> list[int]:
    """The seeds of --seeds (distinct integers >= 0); --frames and --eval_episodes >= 1."""
    if frames < 1:
        raise UsageError(f"--frames must be >= 1 (emulator frames on Atari, env steps on "
                         f"classic control), got {frames}")
    try:
        values = [int(s) for s in seeds]
    except ValueError:
        values = [-1]
    if not values or min(values) < 0 or len(set(values)) != len(values):
        raise UsageError(f"--seeds must be distinct integers >= 0, got {','.join(seeds)!r}")
    if eval_episodes < 1:
        raise UsageError(f"--eval_episodes must be >= 1, got {eval_episodes}")
    return values
