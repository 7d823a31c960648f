"""Learning curves of several runs side by side, from their run folders' CSV files.

    python experiments/plot_runs.py --runs=runs/impala_pong_cpu,runs/impala_pong_a2c_cpu \
        --labels="paper settings,A2C settings" --out=docs/results/pong_curves.png

Three panels against emulator frames (agent steps x --frame_skip; 1 for classic control):
the training return (mean of the last 100 episodes, train.csv), the evaluations' mean return
(eval.csv), and the policy's entropy where the run logs one (IMPALA).
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


def main(argv):
    del argv
    labels = FLAGS.labels or [os.path.basename(os.path.normpath(r)) for r in FLAGS.runs]
    if len(labels) != len(FLAGS.runs):
        raise ValueError(f"labels must name each of the {len(FLAGS.runs)} runs, got "
                         f"{len(labels)}")
    if FLAGS.frame_skip < 1:
        raise ValueError(f"frame_skip must be >= 1, got {FLAGS.frame_skip}")
    fig, axes = plt.subplots(1, len(PANELS), figsize=(5 * len(PANELS), 3.6))
    for ax, (group, key, title) in zip(axes, PANELS):
        for run_dir, label in zip(FLAGS.runs, labels):
            rows = [r for r in read_metrics(run_dir, group) if key in r and "env_steps" in r]
            if rows:
                ax.plot([r["env_steps"] * FLAGS.frame_skip for r in rows],
                        [r[key] for r in rows], marker="." if group == "eval" else None,
                        label=label)
        ax.set_title(title)
        ax.set_xlabel("frames" if FLAGS.frame_skip > 1 else "env steps")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(FLAGS.out, dpi=90)
    print(f"wrote {FLAGS.out}")


if __name__ == "__main__":
    app.run(main)
