"""Two or more configs of `atari.py` compared game by game, over their seeds.

    python experiments/reproduce/compare.py \
        --runs=runs/reproduce_impala_atari_cpu_replay,runs/reproduce_impala_no_norm \
        --labels="GroupNorm,no norm" --games=Breakout --out_dir=runs/group_norm_breakout

Each --runs folder is an `atari.py` --out_dir; every seed that has a `result.json` for a game
counts (each seed's score is the mean of its protocol games). The first folder is the baseline;
for each other config and game, `compare.md` gives each seed's score, the difference of the
means over seeds with Welch's 95% t interval (unequal variances; a few seeds make it wide, as
it should be: Colas et al. 2018, "How Many Random Seeds?", recommend Welch's test for such
comparisons) and the probability of improvement, the share of (seed of one, seed of the other)
pairs the other config wins, ties counting half (Agarwal et al. 2021, Sec. 4, for one task).
`curves.png` draws every seed of every config, one colour a config, one panel a game.

Results are compared only when made under the same protocol and budget; otherwise one `error:`
line names the game and what differs (exit status 1). The config fields that differ between
the folders are listed, so the table says what was compared.
"""

import glob
import json
import math
import os
import sys

import numpy as np
from absl import app, flags

from aggregates import probability_of_improvement, welch_interval
from run_and_evaluate import NOT_COMPARED, env_id, frames_of, game_name
from agents.run import files
from agents.run.launch import parse_flags
from agents.run.run_folder import UsageError

flags.DEFINE_list("runs", None, "atari.py --out_dir folders; the first is the baseline")
flags.DEFINE_list("labels", None, "a label per folder (default: the folder names)")
flags.DEFINE_list("games", None, "games to compare (default: those every folder has)")
flags.DEFINE_string("out_dir", None, "where compare.md and curves.png go")
flags.mark_flags_as_required(["runs", "out_dir"])
FLAGS = flags.FLAGS

# Fields every run has its own value of, or that say where a run lives.
PER_RUN = NOT_COMPARED | {"seed"}


def load_results(out_dir: str, game: str) -> list[dict]:
    """The `result.json` of each seed of `game` in `out_dir`, by seed."""
    paths = glob.glob(os.path.join(out_dir, game_name(env_id(game)), "seed_*", "result.json"))
    results = []
    for path in paths:
        with open(path) as f:
            results.append(json.load(f))
    return sorted(results, key=lambda r: r["seed"])


def seed_scores(results: list[dict]) -> np.ndarray:
    """Each seed's score, the mean of its protocol games: `[seeds]`."""
    return np.array([np.mean(r["final_returns"]) for r in results], np.float64)


def check_comparable(game: str, labels: list[str], runs: list[list[dict]]) -> None:
    """UsageError unless every folder has results of `game`, all under one protocol and
    budget."""
    for label, results in zip(labels, runs):
        if not results:
            raise UsageError(f"--runs: {label} has no result of {game} (a finished atari.py "
                             "run writes <out_dir>/<game>/seed_<s>/result.json)")
    for key in ("protocol", "frames"):
        seen = {json.dumps(r[key], sort_keys=True): label
                for label, results in zip(labels, runs) for r in results}
        if len(seen) > 1:
            values = "; ".join(f"{label}: {value}" for value, label in seen.items())
            raise UsageError(f"--runs: {game} results differ in their {key} ({values}); "
                             f"compare runs made under one {key}")


def config_differences(labels: list[str], runs: list[list[dict]]) -> list[str]:
    """Lines `field: value (label), value (label)` for each config field that differs
    between the folders (the first result of each; `runs` holds one game's)."""
    configs = [results[0]["config"] for results in runs]
    fields = sorted(set().union(*configs) - PER_RUN)
    lines = []
    for field in fields:
        values = [c.get(field) for c in configs]
        if any(v != values[0] for v in values):
            lines.append(f"{field}: " + ", ".join(f"{v} ({label})"
                                                  for v, label in zip(values, labels)))
    return lines


def game_rows(labels: list[str], runs: list[list[dict]]) -> list[list]:
    """One row a config: label, seeds, each seed's score, mean, and against the baseline the
    difference with Welch's interval and the probability of improvement."""
    base = seed_scores(runs[0])
    rows = []
    for i, (label, results) in enumerate(zip(labels, runs)):
        scores = seed_scores(results)
        row = [label, len(scores), ", ".join(f"{x:.4g}" for x in scores),
               f"{scores.mean():.4g}"]
        if i == 0:
            rows.append(row + ["(baseline)", "-"])
            continue
        diff, low, high = welch_interval(base, scores)
        interval = ("(no interval: one seed or no spread)" if math.isnan(low)
                    else f"[{low:.4g}, {high:.4g}]")
        rows.append(row + [f"{diff:+.4g} {interval}",
                           f"{probability_of_improvement(base, scores):.2f}"])
    return rows


def markdown(games: list[str], labels: list[str], by_game: dict, differences: list[str]) -> str:
    frames = next(iter(by_game.values()))[0][0]["frames"]
    text = [f"Configs compared after {frames:,} frames each (the papers' unit), each seed scored "
            "with its protocol evaluation (the mean of its games).", "",
            "What differs between the configs:", ""]
    text += [f"- {line}" for line in differences] or ["- nothing but the folders"]
    header = ["config", "seeds", "each seed", "mean", f"mean - {labels[0]} (Welch 95%)",
              f"P(better than {labels[0]})"]
    for game in games:
        rows = game_rows(labels, by_game[game])
        text += ["", f"{game_name(env_id(game))}:", "", "| " + " | ".join(header) + " |",
                 "|" + "---|" * len(header)]
        text += ["| " + " | ".join(str(x) for x in row) + " |" for row in rows]
    return "\n".join(text) + "\n"


def plot_curves(games: list[str], labels: list[str], by_game: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(games), figsize=(5 * len(games), 3.5), squeeze=False)
    for ax, game in zip(axes[0], games):
        env = env_id(game)
        for i, (label, results) in enumerate(zip(labels, by_game[game])):
            for j, r in enumerate(results):
                x = [frames_of(p["env_steps"], env) for p in r["curve"]]
                ax.plot(x, [p["mean_return"] for p in r["curve"]], color=f"C{i}",
                        alpha=0.8, label=label if j == 0 else None)
        ax.set_xlabel("frames")
        ax.set_ylabel("evaluation return")
        ax.set_title(game_name(env))
        ax.legend(fontsize=8)
    fig.tight_layout()
    files.save_figure(fig, path, dpi=100)
    plt.close(fig)


def check_flags() -> tuple[list[str], list[str]]:
    """(games, labels) of the flags; UsageError naming the flag and what it allows."""
    if len(FLAGS.runs) < 2:
        raise UsageError(f"--runs must name at least two atari.py --out_dir folders, got "
                         f"{len(FLAGS.runs)}")
    for out_dir in FLAGS.runs:
        if not os.path.isdir(out_dir):
            raise UsageError(f"--runs: {out_dir!r} is not a folder (an atari.py --out_dir)")
    labels = FLAGS.labels or [os.path.basename(os.path.normpath(d)) for d in FLAGS.runs]
    if len(labels) != len(FLAGS.runs) or len(set(labels)) != len(labels):
        raise UsageError(f"--labels must give each of the {len(FLAGS.runs)} --runs folders its "
                         f"own label, got {','.join(labels)!r}")
    games = FLAGS.games
    if not games:
        names = [{os.path.basename(os.path.dirname(os.path.dirname(p)))
                  for p in glob.glob(os.path.join(d, "*", "seed_*", "result.json"))}
                 for d in FLAGS.runs]
        games = sorted(set.intersection(*names))
        if not games:
            raise UsageError("--runs: the folders have no game in common; name --games")
    return games, labels


def main(argv):
    del argv
    try:
        games, labels = check_flags()
        by_game = {game: [load_results(d, game) for d in FLAGS.runs] for game in games}
        for game, runs in by_game.items():
            check_comparable(game_name(env_id(game)), labels, runs)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    text = markdown(games, labels, by_game, config_differences(labels, by_game[games[0]]))
    os.makedirs(FLAGS.out_dir, exist_ok=True)
    with open(os.path.join(FLAGS.out_dir, "compare.md"), "w") as f:
        f.write(text)
    plot_curves(games, labels, by_game, os.path.join(FLAGS.out_dir, "curves.png"))
    print(text)


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
