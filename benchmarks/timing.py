"""Shared timing helpers for the benchmarks: median wall time of a call after warm-up."""

import statistics
import time
from typing import Callable


def median_seconds(fn: Callable[[], object], *, repeats: int, warmup: int = 3) -> float:
    """Median wall time of `fn()` in seconds, waiting for any JAX arrays it returns."""
    import jax  # here, so replay benchmarks that never touch JAX do not load it
    for _ in range(warmup):
        jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def interleaved_medians(fns: dict[str, Callable[[], object]], *, repeats: int,
                        warmup: int = 3) -> dict[str, float]:
    """Median seconds per call of each function, timed in alternation.

    Alternating the contenders call by call exposes them to the same machine load, so their
    ratio stays meaningful on a busy host even when the absolute times drift.
    """
    import jax
    for fn in fns.values():
        for _ in range(warmup):
            jax.block_until_ready(fn())
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            jax.block_until_ready(fn())
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def verdict(ratio: float, target: float) -> str:
    """The table cell for a ratio that must be at least `target`."""
    return f">= {target}: " + ("met" if ratio >= target else "**missed**")


def print_table(header: list[str], rows: list[list[object]]) -> None:
    """Prints rows as a Markdown table (pasteable into BUILD_NOTES.md)."""
    cells = [header] + [[f"{c:.4g}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    fmt = lambda row: "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |"  # noqa
    print(fmt(cells[0]))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in cells[1:]:
        print(fmt(row))


def parse_parts(doc: str, parts: str, seconds: float = 20.0) -> tuple[list[str], float]:
    """The benchmark's `--parts` (comma-separated, default `parts`) and `--seconds` (per
    measurement) from the command line; `doc`'s first line is the help."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--parts", default=parts)
    parser.add_argument("--seconds", type=float, default=seconds)
    args = parser.parse_args()
    return args.parts.split(","), args.seconds
