"""Scores and their aggregates with confidence intervals, the form RL papers now report.

Agarwal et al. 2021 ("Deep Reinforcement Learning at the Edge of the Statistical Precipice",
arXiv:2108.13264): the interquartile mean (IQM) and the optimality gap, with 95% stratified
bootstrap confidence intervals over runs of each task, computed with their `rliable` library
rather than re-derived here. The median and mean human-normalized score are the papers' own
aggregates (Horgan et al. 2018, Table 1; Espeholt et al. 2018, Table 4).
"""

import math

import numpy as np

AGGREGATES = ("median", "mean", "iqm", "optimality_gap")


def human_normalized(score: float, random: float, human: float) -> float:
    """(score - random) / (human - random) (Mnih et al. 2015, Methods); NaN when either
    reference is unknown."""
    if any(x is None or (isinstance(x, float) and math.isnan(x)) for x in (random, human)):
        return math.nan
    if human == random:
        raise ValueError(f"human ({human}) and random ({random}) scores must differ")
    return (score - random) / (human - random)


def _check_scores(scores: np.ndarray) -> np.ndarray:
    scores = np.asarray(scores, np.float64)
    if scores.ndim != 2 or scores.size == 0:
        raise ValueError(f"scores must be a non-empty [runs, tasks] array, got shape "
                         f"{scores.shape}")
    if np.isnan(scores).any():
        raise ValueError("scores must not hold NaN (leave out tasks without references)")
    return scores


def point_aggregates(scores: np.ndarray, gap_threshold: float = 1.0) -> dict[str, float]:
    """Median, mean, IQM and optimality gap of `[runs, tasks]` scores.

    As in Horgan et al. 2018 and Espeholt et al. 2018, the median and mean are over tasks of
    each task's mean over runs. The IQM is the mean of the middle 50% of all runs x tasks
    scores and the optimality gap the mean shortfall below `gap_threshold` (1: human), both
    as rliable computes them (Agarwal et al. 2021, Sec. 4).
    """
    from rliable import metrics  # a reproduction-only dependency (requirements-dev.txt)

    scores = _check_scores(scores)
    per_task = scores.mean(axis=0)  # [tasks]
    return dict(median=float(np.median(per_task)), mean=float(np.mean(per_task)),
                iqm=float(metrics.aggregate_iqm(scores)),
                optimality_gap=float(metrics.aggregate_optimality_gap(scores, gap_threshold)))


def interval_estimates(scores_by_name: dict[str, np.ndarray], reps: int = 2000,
                       seed: int = 0, gap_threshold: float = 1.0
                       ) -> dict[str, dict[str, tuple[float, float, float]]]:
    """Each aggregate of each named `[runs, tasks]` score array as (point, low, high): the
    stratified bootstrap's 95% interval (runs resampled within each task; rliable's
    `get_interval_estimates`, Agarwal et al. 2021, Sec. 4). One run per task has no
    interval: low and high are NaN (a bootstrap of one run would print a zero-width one)."""
    from rliable import library

    arrays = {name: _check_scores(s) for name, s in scores_by_name.items()}
    out = {name: {k: (v, math.nan, math.nan)
                  for k, v in point_aggregates(x, gap_threshold).items()}
           for name, x in arrays.items() if x.shape[0] < 2}
    several = {name: x for name, x in arrays.items() if name not in out}
    if not several:
        return out

    def aggregates(x):
        values = point_aggregates(x, gap_threshold)
        return np.array([values[k] for k in AGGREGATES])

    points, intervals = library.get_interval_estimates(
        several, aggregates, reps=reps, random_state=np.random.RandomState(seed))
    return out | {name: {k: (float(points[name][i]), float(intervals[name][0, i]),
                             float(intervals[name][1, i])) for i, k in enumerate(AGGREGATES)}
                  for name in several}


def welch_interval(a: np.ndarray, b: np.ndarray, level: float = 0.95
                   ) -> tuple[float, float, float]:
    """mean(b) - mean(a) with Welch's t interval (Welch 1947: unequal variances, the
    Welch-Satterthwaite degrees of freedom). NaN bounds when either side has one seed, or
    when both have no spread (no interval can be estimated)."""
    from scipy import stats  # installed with rliable, a reproduction-only dependency

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    diff = float(b.mean() - a.mean())
    if len(a) < 2 or len(b) < 2:
        return diff, math.nan, math.nan
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    if va + vb == 0:
        return diff, math.nan, math.nan
    dof = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = stats.t.ppf(0.5 + level / 2, dof) * math.sqrt(va + vb)
    return diff, diff - half, diff + half


def probability_of_improvement(a: np.ndarray, b: np.ndarray) -> float:
    """P(b > a) over all pairs of a seed of `a` and one of `b`, ties counting half: the
    Mann-Whitney U statistic over len(a) * len(b) (Agarwal et al. 2021, Sec. 4)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    wins = (b[:, None] > a[None, :]).sum() + 0.5 * (b[:, None] == a[None, :]).sum()
    return float(wins / (len(a) * len(b)))


def format_estimate(estimate: tuple[float, float, float], digits: int = 3) -> str:
    """`point [low, high]`, or `point (1 seed)` when there is no interval."""
    point, low, high = estimate
    if math.isnan(low) or math.isnan(high):
        return f"{point:.{digits}g} (1 seed)"
    return f"{point:.{digits}g} [{low:.{digits}g}, {high:.{digits}g}]"


def markdown_table(header: list[str], rows: list[list]) -> str:
    """A Markdown table; floats with 4 significant digits."""
    def cell(x):
        return f"{x:.4g}" if isinstance(x, float) else str(x)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)
