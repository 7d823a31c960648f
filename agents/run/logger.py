"""Metrics for researchers: CSV files, TensorBoard events, and a learning-curve PNG.

Every write happens in the caller's thread (the driver's), so a failure (a full disk) raises
there as `MetricsError` and the run stops with it, like a failure of any thread. Every file is
opened through `agents.run.files`: a link planted under a name written here is refused.
"""

import csv
import math
import os
import secrets
import time

from agents.run import files


class MetricsError(OSError):
    """Writing the run's metrics failed (a full disk, a vanished folder)."""


class TensorBoardFile:
    """A TensorBoard event file written in the calling thread.

    tensorboardX's `SummaryWriter` writes from a thread of its own that ends silently at the
    first write error, after which its bounded queue fills and the next scalar blocks the
    caller for good: the run's main thread, which then neither reports nor stops.
    """

    def __init__(self, logdir: str):
        # Imported here: hosts that only run learners may lack tensorboardX.
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto import event_pb2
        from tensorboardX.summary import scalar

        files.real_folder(logdir, create=True)
        self._event, self._scalar = event_pb2.Event, scalar
        # tensorboardX opens the file with a plain open(): a name no one can guess beforehand
        # keeps a link from being planted under it (`files.check_run_dir` refuses older ones).
        self._file = EventsWriter(os.path.join(logdir, "events"),
                                  filename_suffix=f".{secrets.token_hex(8)}")

    def add_scalars(self, prefix: str, step: int, values: dict[str, float]) -> None:
        """Writes `prefix/<key>` for each finite value at `step`, then flushes."""
        now = time.time()
        for key, value in values.items():
            if math.isfinite(value):
                self._file.write_event(self._event(
                    summary=self._scalar(f"{prefix}/{key}", value), step=step, wall_time=now))
        self._file.flush()

    def close(self) -> None:
        self._file.close()


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
        self._tb = TensorBoardFile(os.path.join(run_dir, "tb")) if tensorboard else None
        self.failed: MetricsError | None = None

    def write(self, group: str, step: int, metrics: dict[str, float]) -> None:
        """Appends a row to `<group>.csv` and TensorBoard. Raises `MetricsError` if either
        fails; after that the logger writes nothing more (the run is stopping)."""
        if self.failed is not None:
            return
        try:
            self._write(group, step, metrics)
        except OSError as e:
            self.failed = MetricsError(f"writing the run's metrics to {self.run_dir} failed: "
                                       f"{e}")
            raise self.failed from e

    def _write(self, group: str, step: int, metrics: dict[str, float]) -> None:
        row = {"step": step, **{k: float(v) for k, v in metrics.items()}}
        writer = self._writers.get(group)
        if writer is None or not set(row) <= set(writer.fieldnames):
            writer = self._open(group, list(row))
        writer.writerow(row)
        self._files[group].flush()
        if self._tb is not None:
            self._tb.add_scalars(group, step, {k: v for k, v in row.items() if k != "step"})

    def _open(self, group: str, keys: list[str]) -> csv.DictWriter:
        """Opens `<group>.csv` for appending with a header holding `keys`. Columns can appear
        after the first row (the learner's metrics arrive with its first update, a resumed
        run's file has its own header), so a file missing some is rewritten with them."""
        path = os.path.join(self.run_dir, f"{group}.csv")
        if group in self._files:
            self._files.pop(group).close()
        rows, fields = [], []
        if os.path.lexists(path):
            with files.open_file(path, "r", newline="") as f:
                reader = csv.DictReader(f)
                rows, fields = list(reader), list(reader.fieldnames or [])
        fields += [k for k in keys if k not in fields]
        if os.path.lexists(path + ".tmp") and not os.path.islink(path + ".tmp"):
            os.remove(path + ".tmp")  # the run's own, left by a crash mid-rewrite
        with files.open_file(path + ".tmp", "x", newline="") as f:
            rewrite = csv.DictWriter(f, fieldnames=fields)
            rewrite.writeheader()
            rewrite.writerows(rows)
        os.replace(path + ".tmp", path)
        self._files[group] = files.open_file(path, "a", newline="")
        self._writers[group] = csv.DictWriter(self._files[group], fieldnames=fields)
        return self._writers[group]

    def close(self) -> None:
        """Closes the files; after a failure, whatever still closes (the failure was raised)."""
        closers = [f.close for f in self._files.values()]
        closers += [self._tb.close] if self._tb is not None else []
        for close in closers:
            try:
                close()
            except OSError:
                if self.failed is None:
                    raise


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
    files.save_figure(fig, out, dpi=100)
    plt.close(fig)
    return out


def truncate_metrics(run_dir: str, step: int, groups: tuple[str, ...] = ("train", "eval")) -> int:
    """Removes the rows with `step` > `step` from each `<run_dir>/<group>.csv`; returns how many.

    A resumed run continues from its checkpoint's step, so rows written after that checkpoint
    (before a crash, or by a stretch whose checkpoint was damaged and moved aside) belong to
    training that is discarded; kept, they would interleave with the new rows (steps going
    2726 then 1645) and the curve would zig-zag. Each file is rewritten whole into a temporary
    and renamed over the original, so a crash leaves either the old or the new file.
    """
    removed = 0
    for group in groups:
        path = os.path.join(run_dir, f"{group}.csv")
        if not os.path.isfile(path):
            continue
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            rows, fields = list(reader), list(reader.fieldnames or [])
        kept = [row for row in rows if not _after(row.get("step"), step)]
        if len(kept) == len(rows):
            continue
        if os.path.lexists(path + ".tmp") and not os.path.islink(path + ".tmp"):
            os.remove(path + ".tmp")  # the run's own, left by a crash mid-rewrite
        with open(path + ".tmp", "x", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(kept)
        os.replace(path + ".tmp", path)
        removed += len(rows) - len(kept)
    return removed


def _after(value: str | None, step: int) -> bool:
    try:
        return float(value) > step
    except (TypeError, ValueError):  # a damaged row: not one of the discarded stretch's
        return False
