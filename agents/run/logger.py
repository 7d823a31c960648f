"""Metrics for researchers: CSV files, TensorBoard events, and a learning-curve PNG."""

import csv
import math
import os


class MetricsLogger:
    """Writes each group of metrics (`train`, `eval`) to `<run_dir>/<group>.csv` and TensorBoard.

    Args:
      run_dir: the run's folder.
      tensorboard: also write TensorBoard event files under `<run_dir>/tb`.
    """

    def __init__(self, run_dir: str, tensorboard: bool = True):
        os.makedirs(run_dir, exist_ok=True)
        self.run_dir = run_dir
        self._files, self._writers = {}, {}
        self._tb = None
        if tensorboard:  # imported here: hosts that only run learners may lack it
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(os.path.join(run_dir, "tb"))

    def write(self, group: str, step: int, metrics: dict[str, float]) -> None:
        row = {"step": step, **{k: float(v) for k, v in metrics.items()}}
        writer = self._writers.get(group)
        if writer is None or not set(row) <= set(writer.fieldnames):
            writer = self._open(group, list(row))
        writer.writerow(row)
        self._files[group].flush()
        if self._tb is not None:
            for key, value in row.items():
                if key != "step" and math.isfinite(value):
                    self._tb.add_scalar(f"{group}/{key}", value, step)

    def _open(self, group: str, keys: list[str]) -> csv.DictWriter:
        """Opens `<group>.csv` for appending with a header holding `keys`. Columns can appear
        after the first row (the learner's metrics arrive with its first update, a resumed
        run's file has its own header), so a file missing some is rewritten with them."""
        path = os.path.join(self.run_dir, f"{group}.csv")
        if group in self._files:
            self._files.pop(group).close()
        rows, fields = [], []
        if os.path.exists(path):
            with open(path, newline="") as f:
                reader = csv.DictReader(f)
                rows, fields = list(reader), list(reader.fieldnames or [])
        fields += [k for k in keys if k not in fields]
        with open(path + ".tmp", "w", newline="") as f:
            rewrite = csv.DictWriter(f, fieldnames=fields)
            rewrite.writeheader()
            rewrite.writerows(rows)
        os.replace(path + ".tmp", path)
        self._files[group] = open(path, "a", newline="")
        self._writers[group] = csv.DictWriter(self._files[group], fieldnames=fields)
        return self._writers[group]

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        if self._tb is not None:
            self._tb.close()


def read_metrics(run_dir: str, group: str) -> list[dict[str, float]]:
    """The rows `MetricsLogger` wrote to `<run_dir>/<group>.csv`, in order, as floats (a column
    a row left empty is absent from it); [] if the run never wrote that group."""
    path = os.path.join(run_dir, f"{group}.csv")
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return [{k: float(v) for k, v in row.items() if v not in ("", None)}
                for row in csv.DictReader(f)]


def plot_learning_curve(run_dir: str, x: str = "env_steps", y: str = "mean_return",
                        group: str = "eval", target: float | None = None) -> str | None:
    """Plots `y` against `x` from `<run_dir>/<group>.csv` into `learning_curve.png`, with a
    dashed line at `target` (e.g. the solved return) when it is finite."""
    rows = [r for r in read_metrics(run_dir, group) if x in r and y in r]
    if not rows:
        return None
    import matplotlib
    matplotlib.use("Agg")  # files only; no display on a training host
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([r[x] for r in rows], [r[y] for r in rows], marker=".")
    if target is not None and math.isfinite(target):
        ax.axhline(target, color="gray", linestyle="--", linewidth=1, label=f"target {target:g}")
        ax.legend(loc="lower right")
    ax.set_xlabel(x)
    ax.set_ylabel(f"{group} {y}")
    ax.set_title(os.path.basename(os.path.normpath(run_dir)))
    ax.grid(alpha=0.3)
    out = os.path.join(run_dir, "learning_curve.png")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
