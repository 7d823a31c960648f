"""Learning curves of several runs side by side, from their run folders' CSV files.

    python experiments/plot_runs.py --runs=runs/impala_pong_cpu,runs/impala_pong_a2c_cpu \
        --labels="paper settings,A2C settings" --out=docs/results/pong_curves.png

Three panels against emulator frames (agent steps x --frame_skip; 1 for classic control):
the training return (mean of the last 100 episodes, train.csv), the evaluations' mean return
(eval.csv), and the policy's entropy where a run logs one (IMPALA); a panel no run has data
for is left out.
"""

import os

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
from absl import app, flags  # noqa: E402

from agents.run.logger import read_metrics  # noqa: E402

flags.DEFINE_list("runs", None, "run folders (each with train.csv, and eval.csv once evaluated)")
flags.DEFINE_list("labels", None, "a label per run (default: the folder names)")
flags.DEFINE_integer("frame_skip", 4, "emulator frames per agent step (1: classic control)")
flags.DEFINE_string("out", "curves.png", "the PNG to write")
flags.mark_flag_as_required("runs")
FLAGS = flags.FLAGS

PANELS = (("train", "episode_return", "training return (last 100 episodes)"),
          ("eval", "mean_return", "evaluation mean return"),
          ("train", "entropy", "policy entropy"))


def plot_runs(runs: list[str], labels: list[str], frame_skip: int, out: str) -> list[str]:
    """Writes the curves of `runs` to the PNG `out`; returns the titles of the panels drawn.

    A panel no run has data for (the entropy of Ape-X runs) is left out.
    """
    if len(labels) != len(runs):
        raise ValueError(f"labels must name each of the {len(runs)} runs, got {len(labels)}")
    if frame_skip < 1:
        raise ValueError(f"frame_skip must be >= 1, got {frame_skip}")
    panels = []  # (title, [(label, frames, values, points?)]) of each panel with data
    for group, key, title in PANELS:
        series = []
        for run_dir, label in zip(runs, labels):
            rows = [r for r in read_metrics(run_dir, group) if key in r and "env_steps" in r]
            if rows:
                series.append((label, [r["env_steps"] * frame_skip for r in rows],
                               [r[key] for r in rows], group == "eval"))
        if series:
            panels.append((title, series))
    if not panels:
        raise ValueError(f"runs hold no train.csv or eval.csv rows to plot: {runs}")
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6), squeeze=False)
    for ax, (title, series) in zip(axes[0], panels):
        for label, frames, values, points in series:
            ax.plot(frames, values, marker="." if points else None, label=label)
        ax.set_title(title)
        ax.set_xlabel("frames" if frame_skip > 1 else "env steps")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return [title for title, _ in panels]


def main(argv):
    del argv
    labels = FLAGS.labels or [os.path.basename(os.path.normpath(r)) for r in FLAGS.runs]
    plot_runs(FLAGS.runs, labels, FLAGS.frame_skip, FLAGS.out)
    print(f"wrote {FLAGS.out}")


if __name__ == "__main__":
    app.run(main)
