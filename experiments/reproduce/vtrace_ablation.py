"""IMPALA's off-policy correction study at small scale (Espeholt et al. 2018, Sec. 5.2.2,
Table 2): no correction, epsilon-correction, 1-step importance sampling and V-trace, as the
policy lag grows.

    python experiments/reproduce/vtrace_ablation.py                  # CartPole, 80 runs
    python experiments/reproduce/vtrace_ablation.py --lags=1,32 --seeds=0,1 --env_steps=20000
    python experiments/reproduce/vtrace_ablation.py --lags=1 --replay_proportions=0,0.5
    python experiments/reproduce/vtrace_ablation.py --quick        # a minute: the whole path
    # tuned: each cell's best (learning rate, entropy cost) on 2 seeds, then run on 5
    python experiments/reproduce/vtrace_ablation.py --lag_sources=16,1:0.5 \
        --learning_rates=0.0003,0.001 --entropy_costs=0.01,0.001 --tune_seeds=0,1 --seeds=0,1,2,3,4

The lag is a controlled knob: actors keep their parameters until the learner's are
`actor_refresh_period` = K versions newer (the learner publishes every update), so the
behaviour policy trails the learned one by up to K updates, on top of the queue's own lag
(the measured mean is reported). Every correction runs at every K over every seed, one run
after another, on the base flagfile's CartPole settings. Each run is scored by

  * final: the mean return of `--final_episodes` episodes of the final parameters, evaluated
    as the paper evaluates (actions sampled from the policy, envs seeded apart from training);
  * AUC: the area under the run's evaluation curve (evaluations every `eval_period` updates,
    which fall evenly in env steps) divided by its length, i.e. the mean evaluation return.

Each cell of the table is the IQM over seeds with a 95% stratified bootstrap interval
(rliable; Agarwal et al. 2021). Results go to `--results_dir` (table.md, results.json,
ablation.png). Resumable: finished runs are read from `--out_dir`, not run again; a run that
was interrupted starts over (a study's run is one uninterrupted run: resumed, its replay memory
would start empty and its lag and trace records would mix two starts).

With `--replay_proportions` each cell also runs with that share of every batch replayed from a
memory of `--replay_unrolls` recent unrolls (the paper's "with replay" columns;
`agents.impala.unroll_replay`): replayed data were acted by much older policies, so the lag
grows without K.

With `--tune_seeds`, the study compares the corrections the way the paper did, each at its own
best hyperparameters (Espeholt et al. 2018, Sec. 5.2.2 and Appendix D.1: every method swept
over the same combinations): every `--learning_rates` x `--entropy_costs` setting runs on the
tune seeds first, each cell (correction, lag source) keeps the setting with the best mean
`--select_by` score over them, and only that setting runs on `--seeds` (the tune seeds' runs of
it are reused). `sweep.md` lists every setting's scores; `table.md` the chosen ones. Several
`--tasks` (base flagfiles) give each task its own subfolder of `--out_dir` and
`--results_dir`. `--quick` shrinks every size (steps, evaluations, seeds, lags) to check the
whole path in about a minute; its numbers mean nothing.
"""

if __name__ == "__main__":  # first: glibc reads its malloc settings when a process starts
    from agents.run.allocator import restart_keeping_freed_memory

    restart_keeping_freed_memory()

import dataclasses
import json
import math
import os
import shutil
from typing import NamedTuple

import numpy as np
from absl import app, flags

import aggregates
import run_and_evaluate
from agents.impala.config import ImpalaConfig
from agents.impala.losses import CORRECTIONS
from agents.registry import paper_protocol
from agents.run.flags import config_from_flagfile
from agents.run.interrupts import GUARD
from agents.run.logger import read_metrics

flags.DEFINE_list("corrections", list(CORRECTIONS), f"any of {CORRECTIONS}")
flags.DEFINE_list("lags", ["1", "8", "16", "32"], "actor_refresh_period levels K (>= 1)")
flags.DEFINE_list("seeds", ["0", "1", "2", "3", "4"], "seeds of each (correction, K)")
flags.DEFINE_integer("env_steps", None, "agent steps per run (default: each task "
                     "flagfile's total_env_steps)")
flags.DEFINE_list("replay_proportions", ["0"], "shares of each batch replayed, in [0, 1); "
                  "each is a cell of its own (0: no replay)")
flags.DEFINE_list("lag_sources", [], "lag sources as K or K:replayed_share (e.g. 16,1:0.5: "
                  "stale actors alone, replay alone), instead of every --lags x "
                  "--replay_proportions")
flags.DEFINE_integer("replay_unrolls", 10_000, "unrolls the replay memory holds")
flags.DEFINE_bool("quick", False, "tiny sizes: the whole path in about a minute")
flags.DEFINE_list("learning_rates", [], "learning rates of each (correction, K) (default: the "
                  "base flagfile's); each is a cell of its own, or a sweep with --tune_seeds")
flags.DEFINE_list("entropy_costs", [], "entropy costs, as --learning_rates")
flags.DEFINE_list("tune_seeds", [], "seeds of the sweep over --learning_rates x "
                  "--entropy_costs; each cell then runs its best setting on --seeds (empty: no "
                  "sweep, every setting on every seed)")
flags.DEFINE_enum("select_by", "auc", ["auc", "final"], "the sweep's score (mean over the tune "
                  "seeds) that chooses each cell's setting")
flags.DEFINE_float("log_period_s", 2.0, "seconds between the runs' train.csv rows, from which "
                   "the lag, KL(mu || pi) and trace diagnostics are averaged over the run")
flags.DEFINE_list("tasks", ["experiments/configs/vtrace_study_cartpole.cfg"],
                  "base flagfiles: the IMPALA settings of each task's runs, with its budget "
                  "(total_env_steps) and curve (eval_period, eval_episodes)")
flags.DEFINE_alias("base_flagfile", "tasks")
flags.DEFINE_integer("eval_period", None, "learner updates between evaluations (the curve; "
                     "default: each task flagfile's)")
flags.DEFINE_integer("eval_episodes", None, "episodes per evaluation of the curve (default: "
                     "each task flagfile's)")
flags.DEFINE_integer("final_episodes", 30, "episodes of the final evaluation")
flags.DEFINE_string("out_dir", "runs/vtrace_ablation", "run folders")
flags.DEFINE_string("results_dir", "docs/results/vtrace_ablation", "table, data and figure")
flags.DEFINE_integer("bootstrap_reps", 2000, "bootstrap resamples of each interval")
FLAGS = flags.FLAGS


def parse_levels(corrections, lags, seeds) -> tuple[list[str], list[int], list[int]]:
    """Validated flag values; ValueError naming the flag."""
    for c in corrections:
        if c not in CORRECTIONS:
            raise ValueError(f"--corrections: {c!r} is not one of {CORRECTIONS}")
    try:
        lags, seeds = [int(k) for k in lags], [int(s) for s in seeds]
    except ValueError as e:
        raise ValueError(f"--lags and --seeds must be integers: {e}") from None
    if not corrections or not lags or not seeds:
        raise ValueError("--corrections, --lags and --seeds must each name at least one value")
    if min(lags) < 1:
        raise ValueError(f"--lags must be >= 1, got {lags}")
    if min(seeds) < 0:
        raise ValueError(f"--seeds must be >= 0, got {seeds}")
    return list(corrections), lags, seeds


QUICK = dict(env_steps=10_000, eval_period=2, eval_episodes=2, final_episodes=2,
             bootstrap_reps=100, log_period_s=0.5)


class Key(NamedTuple):
    """One cell of the study: a correction at a lag source (K, replayed share) with a setting
    (learning rate, entropy cost; None: the base flagfile's)."""

    correction: str
    lag: int
    lr: float | None = None
    replay: float = 0.0
    entropy: float | None = None


def cell_name(key: Key) -> str:
    return (f"{key.correction}_k{key.lag}" + ("" if key.lr is None else f"_lr{key.lr:g}")
            + ("" if key.entropy is None else f"_ent{key.entropy:g}")
            + (f"_replay{key.replay:g}" if key.replay else ""))


def run_config(base: ImpalaConfig, key: Key, seed: int, out_dir: str) -> ImpalaConfig:
    return dataclasses.replace(
        base, seed=seed, correction=key.correction, actor_refresh_period=key.lag,
        learning_rate=base.learning_rate if key.lr is None else key.lr,
        entropy_cost=base.entropy_cost if key.entropy is None else key.entropy,
        total_env_steps=FLAGS.env_steps or base.total_env_steps,
        eval_period=FLAGS.eval_period or base.eval_period,
        eval_episodes=FLAGS.eval_episodes or base.eval_episodes, eval_action="sample",
        solved_return=math.inf, checkpoint_period_s=1e9, log_period_s=FLAGS.log_period_s,
        replay_proportion=key.replay, replay_unrolls=FLAGS.replay_unrolls,
        run_dir=os.path.join(out_dir, cell_name(key), f"seed_{seed}"))


DIAGNOSTICS = ("policy_lag_run_mean", "policy_lag_max", "behaviour_kl", "trace_product", "rho",
               "unlikely_fraction", "max_behaviour_kl", "min_entropy", "collapsed")


def run_diagnostics(run_dir: str) -> dict[str, float]:
    """What a run's train.csv rows (one batch's metrics each) say about its lag and its course:

    * policy_lag_run_mean: the lag of every step it trained on (the learner's histogram, in
      its last row), not one batch's;
    * policy_lag_max, behaviour_kl (KL(mu || pi)), trace_product (V-trace's prod of c over an
      unroll, `agents.impala.losses`), rho, unlikely_fraction (the steps whose action the
      learner gives less than the epsilon correction's epsilon): means over the rows;
    * max_behaviour_kl, min_entropy: the largest gap and the least policy entropy seen;
    * collapsed: 1.0 if its training return ended below half of its best, else 0.0.
    """
    rows = read_metrics(run_dir, "train")
    columns = ("policy_lag_run_mean", "policy_lag_max", "behaviour_kl", "trace_product", "rho",
               "unlikely_fraction", "entropy", "episode_return")
    values = {key: [r[key] for r in rows if math.isfinite(r.get(key, math.nan))]
              for key in columns}  # a row before the first batch has NaN
    out = {key: float(np.mean(values[key])) if values[key] else math.nan
           for key in columns[1:6]}
    last = lambda key: values[key][-1] if values[key] else math.nan  # noqa: E731
    out["policy_lag_run_mean"] = last("policy_lag_run_mean")
    out["max_behaviour_kl"] = max(values["behaviour_kl"], default=math.nan)
    out["min_entropy"] = min(values["entropy"], default=math.nan)
    returns = values["episode_return"]
    out["collapsed"] = float(bool(returns) and returns[-1] < 0.5 * max(returns))
    return out


def run_scores(result: dict) -> tuple[float, float]:
    """(final return, AUC) of one run's result."""
    curve = [point["mean_return"] for point in result["curve"]]
    return float(np.mean(result["final_returns"])), float(np.mean(curve)) if curve else math.nan


def order(key: Key, corrections) -> tuple:
    """Table order: setting, then lag source, then correction as listed."""
    return (key.lr or 0.0, key.entropy or 0.0, key.replay, key.lag,
            corrections.index(key.correction))


def summarize(results: dict, corrections) -> tuple[str, dict]:
    """The Markdown table and the per-cell estimates of finished runs (`results`: Key -> the
    runs' results, one per seed)."""
    keys = sorted((k for k in results if results[k]), key=lambda k: order(k, corrections))
    show_lr = any(k.lr is not None for k in keys)
    show_entropy = any(k.entropy is not None for k in keys)
    show_replay = any(k.replay for k in keys)
    cells, rows = {}, []
    for key in keys:
        runs = results[key]
        scores = np.array([run_scores(r) for r in runs])  # [seeds, 2]
        # A run too short for any evaluation has no curve, so no AUC: its cell's AUC is over
        # the runs that have one (n/a if none has).
        curves = scores[np.isfinite(scores[:, 1]), 1:]
        est = aggregates.interval_estimates(
            {"final": scores[:, :1], "auc": curves if len(curves) else scores[:, :1]},
            reps=FLAGS.bootstrap_reps)
        if not len(curves):
            est["auc"]["iqm"] = (math.nan,) * 3
        # runs recorded before a diagnostic existed lack it: NaN
        diag = {k: float(np.mean([r.get(k, math.nan) for r in runs])) for k in DIAGNOSTICS}
        cells[cell_name(key)] = dict(
            correction=key.correction, lag=key.lag, lr=key.lr, entropy_cost=key.entropy,
            replay=key.replay, final=est["final"]["iqm"], auc=est["auc"]["iqm"],
            seeds=len(runs), per_seed=scores.tolist(), **diag)
        collapsed = int(sum(r["collapsed"] for r in runs))
        rows.append([key.lag, key.correction] + ([f"{key.lr:g}"] if show_lr else [])
                    + ([f"{key.entropy:g}"] if show_entropy else [])
                    + ([f"{key.replay:g}"] if show_replay else [])
                    + [f"{diag['policy_lag_run_mean']:.1f}",
                       f"{diag['behaviour_kl']:.3f}", f"{diag['trace_product']:.3f}",
                       f"{diag['unlikely_fraction']:.2g}",
                       f"{diag['min_entropy']:.2f}", f"{collapsed}/{len(runs)}", len(runs),
                       aggregates.format_estimate(est["final"]["iqm"]),
                       aggregates.format_estimate(est["auc"]["iqm"])
                       if len(curves) else "n/a"])
    header = (["K", "correction"] + (["learning rate"] if show_lr else [])
              + (["entropy cost"] if show_entropy else [])
              + (["replayed share"] if show_replay else [])
              + ["lag (updates, run mean)", "KL(mu||pi)", "trace product",
                 "pi(a) < epsilon", "least entropy",
                 "collapsed", "seeds",
                 "final return IQM [95% CI]", "AUC IQM [95% CI]"])
    return aggregates.markdown_table(header, rows), cells


def choose(sweep: dict, select_by: str) -> dict[Key, Key]:
    """Each cell's setting with the best mean `select_by` score ("auc" or "final") over its
    sweep runs: {the cell without its setting: the chosen Key}. A tie goes to the setting
    listed first."""
    index = 1 if select_by == "auc" else 0
    best: dict[Key, tuple[float, Key]] = {}
    for key, runs in sweep.items():
        if not runs:
            continue
        score = float(np.mean([run_scores(r)[index] for r in runs]))
        cell = key._replace(lr=None, entropy=None)
        if cell not in best or score > best[cell][0]:
            best[cell] = (score, key)
    return {cell: key for cell, (_, key) in best.items()}


def source_label(lag: int, replay: float) -> str:
    return f"K={lag}" + (f", replay {replay:g}" if replay else "")


def plot(cells: dict, corrections, path: str, title: str, by_correction: bool = False) -> None:
    """Final return and AUC (IQM, 95% CI) per lag source; one line per correction and setting,
    or per correction alone (`by_correction`: each cell at its own chosen setting)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sources = sorted({(c["lag"], c["replay"]) for c in cells.values()},
                     key=lambda s: (s[1], s[0]))
    lines: dict[str, list] = {}
    for cell in sorted(cells.values(), key=lambda c: corrections.index(c["correction"])):
        label = cell["correction"] + ("" if by_correction else "".join(
            f", {name} {cell[key]:g}" for name, key in (("lr", "lr"), ("entropy", "entropy_cost"))
            if cell[key] is not None))
        lines.setdefault(label, []).append(cell)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, name in ((axes[0], "final", "final return"), (axes[1], "auc", "AUC")):
        for i, (label, line) in enumerate(lines.items()):
            line = sorted(line, key=lambda c: sources.index((c["lag"], c["replay"])))
            est = np.array([c[key] for c in line])  # [sources, 3]
            x = (np.array([sources.index((c["lag"], c["replay"])) for c in line])
                 + (i - (len(lines) - 1) / 2) * 0.06)
            ax.errorbar(x, est[:, 0], yerr=[est[:, 0] - est[:, 1], est[:, 2] - est[:, 0]],
                        marker="o", capsize=3, label=label)
        ax.set_xticks(range(len(sources)), [source_label(*s) for s in sources])
        ax.set_xlabel("lag source (actor refresh period K, replayed share)")
        ax.set_ylabel(f"{name}, IQM over seeds (95% CI)")
        ax.set_title(name)
    axes[0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parse_numbers(name: str, values, low_ok=False) -> list[float | None]:
    """A list flag of positive finite numbers ([None] when empty: the base's value)."""
    try:
        numbers = [float(x) for x in values] or [None]
    except ValueError as e:
        raise ValueError(f"--{name} must be numbers: {e}") from None
    if any(x is not None and not (0 < x < math.inf or (low_ok and x == 0)) for x in numbers):
        raise ValueError(f"--{name} must be positive and finite, got {numbers}")
    return numbers


def run_cell(base: ImpalaConfig, key: Key, seed: int, out_dir: str, protocol,
             progress: str) -> dict:
    """One run (or the finished run its folder holds), with its diagnostics."""
    config = run_config(base, key, seed, out_dir)
    if (os.path.isdir(config.run_dir)
            and not os.path.exists(os.path.join(config.run_dir, run_and_evaluate.RESULT))):
        shutil.rmtree(config.run_dir)
        print(f"{config.run_dir}: an interrupted run, started over", flush=True)
    result = run_and_evaluate.run("impala", config, protocol, print_fn=lambda *a, **k: None)
    result = dict(result, **run_diagnostics(config.run_dir))
    final, auc = run_scores(result)
    print(f"[{progress}] {cell_name(key)} seed={seed}: final {final:.1f} auc {auc:.1f} "
          f"lag {result['policy_lag_run_mean']:.1f} kl {result['behaviour_kl']:.3f} "
          f"trace {result['trace_product']:.3f} ({result['wall_s']:.0f} s)", flush=True)
    return result


def write_results(results_dir: str, table: str, cells: dict, corrections, title: str,
                  by_correction: bool, **extra) -> None:
    os.makedirs(results_dir, exist_ok=True)
    with open(os.path.join(results_dir, "table.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(results_dir, "results.json"), "w") as f:
        json.dump(dict(replay_unrolls=FLAGS.replay_unrolls,
                       cells=cells, **extra), f, indent=1)
    plot(cells, corrections, os.path.join(results_dir, "ablation.png"), title, by_correction)


def parse_sources(values) -> list[tuple[int, float]]:
    """`--lag_sources` entries K or K:replayed_share as (K, share); ValueError naming the flag."""
    sources = []
    for value in values:
        lag, _, replay = value.partition(":")
        try:
            source = (int(lag), float(replay or 0))
        except ValueError:
            raise ValueError(f"--lag_sources: {value!r} is not K or K:replayed_share") from None
        if source[0] < 1 or not 0 <= source[1] < 1:
            raise ValueError(f"--lag_sources: {value!r} needs K >= 1 and a share in [0, 1)")
        sources.append(source)
    return sources


def study_task(flagfile: str, corrections, sources, seeds, tune_seeds, settings,
               out_dir: str, results_dir: str) -> str:
    """The study on one task; returns its table."""
    base = config_from_flagfile(ImpalaConfig, flagfile)
    protocol = paper_protocol("impala", episodes=FLAGS.final_episodes)
    cells = [Key(c, lag, replay=r) for lag, r in sources for c in corrections]
    budget = FLAGS.env_steps or base.total_env_steps
    title = (f"IMPALA off-policy corrections on {base.env} as the policy lag grows "
             f"({budget:,} agent steps)")
    results: dict[Key, list] = {}
    sweep_seeds = tune_seeds or seeds
    total, done = len(sweep_seeds) * len(settings) * len(cells), 0
    for seed in sweep_seeds:  # seeds outermost: a partial study has every cell at fewer seeds
        for lr, entropy in settings:
            for cell in cells:
                key = cell._replace(lr=lr, entropy=entropy)
                done += 1
                results.setdefault(key, []).append(run_cell(
                    base, key, seed, out_dir, protocol, f"{done}/{total}"))
    if not tune_seeds:
        table, summary = summarize(results, corrections)
        write_results(results_dir, table, summary, corrections, title, by_correction=False,
                      base_flagfile=flagfile, env_steps=budget)
        return table
    sweep_table, sweep_cells = summarize(results, corrections)
    chosen = choose(results, FLAGS.select_by)
    final = {key: [r for seed, r in zip(tune_seeds, results[key]) if seed in seeds]
             for key in chosen.values()}
    more = [s for s in seeds if s not in tune_seeds]
    total, done = len(more) * len(cells), 0
    for seed in more:
        for cell in cells:
            done += 1
            final[chosen[cell]].append(run_cell(base, chosen[cell], seed, out_dir, protocol,
                                                f"tuned {done}/{total}"))
    table, summary = summarize(final, corrections)
    write_results(results_dir, table, summary, corrections, title + " (each at its best "
                  "setting)", by_correction=True, base_flagfile=flagfile, env_steps=budget,
                  sweep=sweep_cells,
                  tune_seeds=tune_seeds, select_by=FLAGS.select_by)
    with open(os.path.join(results_dir, "sweep.md"), "w") as f:
        f.write(f"Every setting on seeds {tune_seeds} (IQM of {len(tune_seeds)} = their mean); "
                f"each cell's setting chosen by the mean {FLAGS.select_by}:\n\n"
                + sweep_table + "\n")
    return table


def main(argv):
    del argv
    # Ctrl-C or SIGTERM stops the run under way with a final checkpoint (the script resumes
    # it when run again), also when the script was started in the background, where SIGINT
    # would otherwise be ignored.
    GUARD.install()
    GUARD.starting()  # the imports are done: a signal raises until a run is under way
    if FLAGS.quick:
        for name, value in QUICK.items():
            setattr(FLAGS, name, value)
        if FLAGS["lags"].using_default_value:
            FLAGS.lags = ["1", "4"]
        if FLAGS["seeds"].using_default_value:
            FLAGS.seeds = ["0", "1"]
    corrections, lags, seeds = parse_levels(FLAGS.corrections, FLAGS.lags, FLAGS.seeds)
    replays = [0.0 if x is None else x for x in parse_numbers(
        "replay_proportions", FLAGS.replay_proportions, low_ok=True)]
    if any(not 0 <= r < 1 for r in replays):
        raise ValueError(f"--replay_proportions must be in [0, 1), got {replays}")
    sources = [(lag, r) for r in replays for lag in lags]
    if FLAGS.lag_sources:
        if not (FLAGS["lags"].using_default_value or FLAGS.quick) or \
                not FLAGS["replay_proportions"].using_default_value:
            raise ValueError("--lag_sources replaces --lags and --replay_proportions: give one")
        sources = parse_sources(FLAGS.lag_sources)
    settings = [(lr, e) for lr in parse_numbers("learning_rates", FLAGS.learning_rates)
                for e in parse_numbers("entropy_costs", FLAGS.entropy_costs)]
    tune_seeds = parse_levels(corrections, lags, FLAGS.tune_seeds)[2] if FLAGS.tune_seeds \
        else []
    if tune_seeds and len(settings) < 2:
        raise ValueError("--tune_seeds needs a sweep: give --learning_rates or --entropy_costs "
                         "at least two values between them")
    if not FLAGS.tasks:
        raise ValueError("--tasks must name at least one flagfile")
    for flagfile in FLAGS.tasks:
        name = os.path.splitext(os.path.basename(flagfile))[0]
        several = len(FLAGS.tasks) > 1
        table = study_task(
            flagfile, corrections, sources, seeds, tune_seeds, settings,
            os.path.join(FLAGS.out_dir, name) if several else FLAGS.out_dir,
            os.path.join(FLAGS.results_dir, name) if several else FLAGS.results_dir)
        print(f"{name}:\n{table}")


if __name__ == "__main__":
    app.run(main)
