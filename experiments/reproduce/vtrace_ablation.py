"""IMPALA's off-policy correction study at small scale (Espeholt et al. 2018, Sec. 5.2.2,
Table 2): no correction, epsilon-correction, 1-step importance sampling and V-trace, as the
policy lag grows.

    python experiments/reproduce/vtrace_ablation.py                  # CartPole, 80 runs
    python experiments/reproduce/vtrace_ablation.py --lags=1,32 --seeds=0,1 --env_steps=20000
    python experiments/reproduce/vtrace_ablation.py --lags=1 --replay_proportions=0,0.5
    python experiments/reproduce/vtrace_ablation.py --quick        # a minute: the whole path

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
ablation.png). Resumable: finished runs are read from `--out_dir`, not run again.

With `--replay_proportions` each cell also runs with that share of every batch replayed from a
memory of `--replay_unrolls` recent unrolls (the paper's "with replay" columns;
`agents.impala.unroll_replay`): replayed data were acted by much older policies, so the lag
grows without K. `--quick` shrinks every size (steps, evaluations, seeds, lags) to check the
whole path in about a minute; its numbers mean nothing.
"""

import dataclasses
import json
import math
import os

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
flags.DEFINE_integer("env_steps", 100_000, "agent steps per run")
flags.DEFINE_list("replay_proportions", ["0"], "shares of each batch replayed, in [0, 1); "
                  "each is a cell of its own (0: no replay)")
flags.DEFINE_integer("replay_unrolls", 10_000, "unrolls the replay memory holds")
flags.DEFINE_bool("quick", False, "tiny sizes: the whole path in about a minute")
flags.DEFINE_list("learning_rates", [], "learning rates of each (correction, K) (default: the "
                  "base flagfile's); each is a cell of its own")
flags.DEFINE_float("log_period_s", 2.0, "seconds between the runs' train.csv rows, from which "
                   "the lag, KL(mu || pi) and trace diagnostics are averaged over the run")
flags.DEFINE_string("base_flagfile", "experiments/configs/impala_cartpole.cfg",
                    "the IMPALA settings every run starts from")
flags.DEFINE_integer("eval_period", 20, "learner updates between evaluations (the curve)")
flags.DEFINE_integer("eval_episodes", 10, "episodes per evaluation of the curve")
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


def cell_name(correction: str, lag: int, lr: float | None, replay: float = 0.0) -> str:
    return (f"{correction}_k{lag}" + ("" if lr is None else f"_lr{lr:g}")
            + (f"_replay{replay:g}" if replay else ""))


def run_config(base: ImpalaConfig, correction: str, lag: int, seed: int,
               lr: float | None = None, replay: float = 0.0) -> ImpalaConfig:
    return dataclasses.replace(
        base, seed=seed, correction=correction, actor_refresh_period=lag,
        learning_rate=base.learning_rate if lr is None else lr, total_env_steps=FLAGS.env_steps,
        eval_period=FLAGS.eval_period, eval_episodes=FLAGS.eval_episodes, eval_action="sample",
        solved_return=math.inf, checkpoint_period_s=1e9, log_period_s=FLAGS.log_period_s,
        replay_proportion=replay, replay_unrolls=FLAGS.replay_unrolls,
        run_dir=os.path.join(FLAGS.out_dir, cell_name(correction, lag, lr, replay),
                             f"seed_{seed}"))


DIAGNOSTICS = ("policy_lag_run_mean", "policy_lag_max", "behaviour_kl", "trace_product", "rho",
               "max_behaviour_kl", "min_entropy", "collapsed")


def run_diagnostics(run_dir: str) -> dict[str, float]:
    """What a run's train.csv rows (one batch's metrics each) say about its lag and its course:

    * policy_lag_run_mean: the lag of every step it trained on (the learner's histogram, in
      its last row), not one batch's;
    * policy_lag_max, behaviour_kl (KL(mu || pi)), trace_product (V-trace's prod of c over an
      unroll, `agents.impala.losses`), rho: means over the rows;
    * max_behaviour_kl, min_entropy: the largest gap and the least policy entropy seen;
    * collapsed: 1.0 if its training return ended below half of its best, else 0.0.
    """
    rows = read_metrics(run_dir, "train")
    columns = ("policy_lag_run_mean", "policy_lag_max", "behaviour_kl", "trace_product", "rho",
               "entropy", "episode_return")
    values = {key: [r[key] for r in rows if math.isfinite(r.get(key, math.nan))]
              for key in columns}  # a row before the first batch has NaN
    out = {key: float(np.mean(values[key])) if values[key] else math.nan
           for key in columns[1:5]}
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


def summarize(results: dict, corrections, lags, lrs, replays=(0.0,)) -> tuple[str, dict]:
    """The Markdown table and the per-cell estimates of finished runs."""
    cells, rows = {}, []
    for lr, replay in [(lr, r) for lr in lrs for r in replays]:
        for lag in lags:
            for correction in corrections:
                runs = results.get((correction, lag, lr, replay), [])
                if not runs:
                    continue
                scores = np.array([run_scores(r) for r in runs])  # [seeds, 2]
                # A run too short for any evaluation has no curve, so no AUC: its cell's AUC
                # is over the runs that have one (n/a if none has).
                curves = scores[np.isfinite(scores[:, 1]), 1:]
                est = aggregates.interval_estimates(
                    {"final": scores[:, :1], "auc": curves if len(curves) else scores[:, :1]},
                    reps=FLAGS.bootstrap_reps)
                if not len(curves):
                    est["auc"]["iqm"] = (math.nan,) * 3
                diag = {k: float(np.mean([r[k] for r in runs])) for k in DIAGNOSTICS}
                cells[cell_name(correction, lag, lr, replay)] = dict(
                    final=est["final"]["iqm"], auc=est["auc"]["iqm"], seeds=len(runs),
                    per_seed=scores.tolist(), **diag)
                collapsed = int(sum(r["collapsed"] for r in runs))
                rows.append([lag, correction] + ([f"{lr:g}"] if lr is not None else [])
                            + ([f"{replay:g}"] if list(replays) != [0.0] else [])
                            + [f"{diag['policy_lag_run_mean']:.1f}",
                               f"{diag['behaviour_kl']:.3f}", f"{diag['trace_product']:.3f}",
                               f"{diag['min_entropy']:.2f}", f"{collapsed}/{len(runs)}",
                               len(runs),
                               aggregates.format_estimate(est["final"]["iqm"]),
                               aggregates.format_estimate(est["auc"]["iqm"])
                               if len(curves) else "n/a"])
    header = (["K", "correction"] + (["learning rate"] if lrs != [None] else [])
              + (["replayed share"] if list(replays) != [0.0] else [])
              + ["lag (updates, run mean)", "KL(mu||pi)", "trace product", "least entropy",
                 "collapsed", "seeds",
                 "final return IQM [95% CI]", "AUC IQM [95% CI]"])
    return aggregates.markdown_table(header, rows), cells


def plot(cells: dict, corrections, lags, lrs, path: str, replays=(0.0,)) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, title in ((axes[0], "final", "final return"), (axes[1], "auc", "AUC")):
        lines = [(c, lr, r) for lr in lrs for r in replays for c in corrections]
        for i, (correction, lr, replay) in enumerate(lines):
            present = [k for k in lags if cell_name(correction, k, lr, replay) in cells]
            est = np.array([cells[cell_name(correction, k, lr, replay)][key]
                            for k in present])  # [K, 3]
            if not len(est):
                continue
            x = np.array([lags.index(k) for k in present]) + (i - (len(lines) - 1) / 2) * 0.06
            ax.errorbar(x, est[:, 0], yerr=[est[:, 0] - est[:, 1], est[:, 2] - est[:, 0]],
                        marker="o", capsize=3,
                        label=correction + ("" if lr is None else f", lr {lr:g}")
                        + (f", replay {replay:g}" if replay else ""))
        ax.set_xticks(range(len(lags)), [str(k) for k in lags])
        ax.set_xlabel("actor refresh period K (learner updates)")
        ax.set_ylabel(f"{title}, IQM over seeds (95% CI)")
        ax.set_title(title)
    axes[0].legend()
    fig.suptitle("IMPALA off-policy corrections on CartPole-v1 as the policy lag grows")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


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
    try:
        replays = [float(x) for x in FLAGS.replay_proportions]
    except ValueError as e:
        raise ValueError(f"--replay_proportions must be numbers: {e}") from None
    if not replays or any(not 0 <= r < 1 for r in replays):
        raise ValueError(f"--replay_proportions must be in [0, 1), got {replays}")
    try:
        lrs = [float(x) for x in FLAGS.learning_rates] or [None]
    except ValueError as e:
        raise ValueError(f"--learning_rates must be numbers: {e}") from None
    if any(lr is not None and not (0 < lr < math.inf) for lr in lrs):
        raise ValueError(f"--learning_rates must be positive and finite, got {lrs}")
    base = config_from_flagfile(ImpalaConfig, FLAGS.base_flagfile)
    protocol = paper_protocol("impala", episodes=FLAGS.final_episodes)
    results = {}
    variants = [(lr, replay) for lr in lrs for replay in replays]
    total, done = len(corrections) * len(lags) * len(seeds) * len(variants), 0
    for seed in seeds:  # seeds outermost: a partial study has every cell at fewer seeds
        for lr, replay in variants:
            for lag in lags:
                for correction in corrections:
                    config = run_config(base, correction, lag, seed, lr, replay)
                    result = run_and_evaluate.run("impala", config, protocol,
                                                  print_fn=lambda *a, **k: None)
                    result = dict(result, **run_diagnostics(config.run_dir))
                    results.setdefault((correction, lag, lr, replay), []).append(result)
                    done += 1
                    final, auc = run_scores(result)
                    print(f"[{done}/{total}] {cell_name(correction, lag, lr, replay)} "
                          f"seed={seed}: "
                          f"final {final:.1f} auc {auc:.1f} "
                          f"lag {result['policy_lag_run_mean']:.1f} "
                          f"kl {result['behaviour_kl']:.3f} trace {result['trace_product']:.3f} "
                          f"({result['wall_s']:.0f} s)", flush=True)
    table, cells = summarize(results, corrections, lags, lrs, replays)
    os.makedirs(FLAGS.results_dir, exist_ok=True)
    with open(os.path.join(FLAGS.results_dir, "table.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(FLAGS.results_dir, "results.json"), "w") as f:
        json.dump(dict(env_steps=FLAGS.env_steps, base_flagfile=FLAGS.base_flagfile,
                       replay_unrolls=FLAGS.replay_unrolls, cells=cells), f, indent=1)
    plot(cells, corrections, lags, lrs, os.path.join(FLAGS.results_dir, "ablation.png"),
         replays)
    print(table)


if __name__ == "__main__":
    app.run(main)
