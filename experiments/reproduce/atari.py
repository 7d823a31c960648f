"""Atari (or classic control) runs of Ape-X or IMPALA, scored as the papers score them.

    python experiments/reproduce/atari.py --agent=impala --games=Pong,Breakout \
        --frames=200000000 --seeds=0,1,2 --config=experiments/configs/impala_atari.cfg
    python experiments/reproduce/atari.py --agent=apex --games=CartPole-v1 --frames=100000 \
        --seeds=0,1 --config=experiments/configs/apex_cartpole.cfg

Each game and seed trains in turn (one after another: a small machine runs one at a time)
with the flagfile's settings, logging evaluations for the learning curve, and its final
parameters are then evaluated with the paper's protocol (`agents.run.evaluation`: up to 30
no-op starts, 108K-frame episodes, whole games with real scores, 30 episodes on envs seeded
apart from training; Ape-X epsilon-greedy with --eval_epsilon, IMPALA sampling or --greedy).

Budget: --frames counts what the papers count. On Atari that is emulator frames, and each
agent step is 4 of them (frame skip 4, Mnih et al. 2015), so the run's total_env_steps is
frames / 4 (the papers' 200M frames are 50M agent steps); on classic control a frame is an
env step.

Results in --out_dir: `<game>/seed_<s>/` run folders with `result.json`, then `scores.csv`
(each game and seed's final score and human-normalized score, and on Atari how many of the
protocol's games lasted until the 108K-frame cap: a game that waits for an action the agent
never takes), `summary.md` (ours against
the paper per game; median and mean HNS, IQM and optimality gap with 95% stratified bootstrap
intervals, Agarwal et al. 2021) and `curves.png` (frames on x, the paper's score as a line).
Classic-control games have no human references: their table shows returns only.

Run again, the script picks up what --out_dir holds (`run_and_evaluate`): a game and seed whose
`result.json` was produced by the same config, budget and protocol is not run again; an
interrupted one resumes; a larger --frames continues the finished run; another --eval_episodes,
--greedy or --eval_epsilon evaluates its final checkpoint again without training; another
--config (or a smaller --frames than it trained) is refused, naming the setting that differs.

Every flag, and what each run folder holds, is checked before anything trains: a bad value or
a refused folder is one `error:` line and exit status 1 (2 for an unknown flag), as the agents'
launchers do (`agents.run.launch`).
"""

if __name__ == "__main__":  # first: glibc reads its malloc settings when a process starts
    from agents.run.allocator import restart_keeping_freed_memory

    restart_keeping_freed_memory()

import csv
import dataclasses
import math
import os
import sys

import numpy as np
from absl import app, flags

import aggregates
import checks
import references
import run_and_evaluate
from run_and_evaluate import agent_steps, frames_of, game_name
from agents import registry
from agents.run.envs import is_atari
from agents.run.flags import config_from_flagfile
from agents.run.checkpoint import CheckpointError
from agents.run.interrupts import GUARD
from agents.run.launch import parse_flags
from agents.run.run_folder import UsageError

flags.DEFINE_enum("agent", "impala", list(registry.AGENTS), "which agent")
flags.DEFINE_list("games", ["Pong"], "Atari games (Pong or Pong-v5) or envpool ids")
flags.DEFINE_integer("frames", 200_000_000, "budget per run: emulator frames on Atari (4 per "
                     "agent step), env steps on classic control")
flags.DEFINE_list("seeds", ["0", "1", "2"], "seeds of each game")
flags.DEFINE_string("config", None, "the agent's flagfile (default: "
                    "experiments/configs/<agent>_atari.cfg)")
flags.DEFINE_string("out_dir", None, "results (default: runs/reproduce_<agent>)")
flags.DEFINE_integer("eval_episodes", 30, "episodes of the final protocol evaluation")
flags.DEFINE_bool("greedy", False, "IMPALA: evaluate with argmax actions instead of samples")
flags.DEFINE_float("eval_epsilon", None, "Ape-X: the evaluation's epsilon (default: "
                   "agents.apex.config.PAPER_EVAL_EPSILON, 0.001; 0 is greedy)")
flags.DEFINE_integer("bootstrap_reps", 2000, "bootstrap resamples of each interval")
FLAGS = flags.FLAGS


def collect(results: dict, refs: dict, column: str) -> tuple[list[list], dict, dict]:
    """Per-game rows of the summary, and the `[seeds, games]` raw and human-normalized scores
    of the games that have them."""
    rows, hns_by_game = [], {}
    for env, runs in results.items():
        final = np.array([np.mean(r["final_returns"]) for r in runs])  # [seeds]
        ref = refs.get(game_name(env), {})
        paper = ref.get(column, math.nan)
        norm = [aggregates.human_normalized(x, ref.get("random"), ref.get("human"))
                for x in final]
        if ref and not math.isnan(norm[0]):
            hns_by_game[env] = norm
        paper_hns = (aggregates.human_normalized(paper, ref["random"], ref["human"])
                     if ref else math.nan)
        # Each seed's score rather than a spread: two or three seeds make a poor std.
        per_seed = ", ".join(f"{x:.4g}" for x in final)
        rows.append([game_name(env), len(runs), float(final.mean()), per_seed,
                     paper, float(np.mean(norm)), paper_hns])
    return rows, hns_by_game, {env: [np.mean(r["final_returns"]) for r in runs]
                               for env, runs in results.items()}


# A bootstrap can only resample the runs it has: with a few a game it understates the spread.
FEW_SEEDS = "; from so few runs a game they understate the spread of new seeds"


def summary_markdown(results: dict, refs: dict, column: str, reps: int) -> str:
    rows, hns_by_game, _ = collect(results, refs, column)
    text = ["Per game: our final score (mean over seeds of each seed's protocol evaluation) "
            f"against the paper's ({column}, after {references.frames_label(column)}).", "",
            aggregates.markdown_table(["game", "seeds", "ours", "ours per seed", "paper",
                                       "ours HNS", "paper HNS"], rows)]
    seeds = {len(v) for v in hns_by_game.values()}
    if hns_by_game and len(seeds) == 1:
        ours = np.array(list(hns_by_game.values())).T  # [seeds, games]
        paper = np.array([[aggregates.human_normalized(refs[game_name(g)][column],
                                                       refs[game_name(g)]["random"],
                                                       refs[game_name(g)]["human"])
                           for g in hns_by_game]])  # [1, games]
        est = aggregates.interval_estimates({"ours": ours}, reps=reps)["ours"]
        point = aggregates.point_aggregates(paper)
        text += ["", f"Human-normalized aggregates over {ours.shape[1]} game(s), "
                 + (f"{ours.shape[0]} seeds (95% stratified bootstrap intervals"
                    + (FEW_SEEDS if ours.shape[0] < 5 else "") + "):"
                    if ours.shape[0] > 1 else "1 seed (no intervals):"), "",
                 aggregates.markdown_table(
                     ["aggregate", "ours", "paper (same games)"],
                     [[k, aggregates.format_estimate(est[k]), point[k]]
                      for k in aggregates.AGGREGATES])]
    return "\n".join(text) + "\n"


def plot_curves(results: dict, refs: dict, column: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.5), squeeze=False)
    for ax, (env, runs) in zip(axes[0], results.items()):
        for r in runs:
            x = [frames_of(p["env_steps"], env) for p in r["curve"]]
            ax.plot(x, [p["mean_return"] for p in r["curve"]], label=f"seed {r['seed']}")
        paper = refs.get(game_name(env), {}).get(column, math.nan)
        if not math.isnan(paper):
            ax.axhline(paper, color="k", linestyle="--",
                       label=f"paper ({column}, {references.frames_label(column)})")
        ax.set_xlabel("frames" if is_atari(env) else "env steps")
        ax.set_ylabel("evaluation return")
        ax.set_title(game_name(env))
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def games_at_cap(result: dict, env: str) -> int | str:
    """How many of an Atari run's protocol games reached the episode cap; "" where unknown
    (not Atari, or a result saved before games' lengths were recorded)."""
    steps = result.get("final_steps")
    if steps is None or not is_atari(env):
        return ""
    cap = agent_steps(result["protocol"]["max_episode_frames"], env)
    return sum(n >= cap for n in steps)


def write_scores(results: dict, refs: dict, path: str) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["game", "seed", "frames", "final_return", "human_normalized",
                         "games_at_cap"])
        for env, runs in results.items():
            ref = refs.get(game_name(env), {})
            for r in runs:
                final = float(np.mean(r["final_returns"]))
                writer.writerow([game_name(env), r["seed"], frames_of(r["env_steps"], env),
                                 final, aggregates.human_normalized(
                                     final, ref.get("random"), ref.get("human")),
                                 games_at_cap(r, env)])


def check_flags(refs: dict) -> tuple[list[str], list[int]]:
    """(envs, seeds) of the flags; UsageError naming the flag and the values it allows."""
    envs = checks.check_games(FLAGS.games, refs)
    seeds = checks.check_budget(FLAGS.frames, FLAGS.seeds, FLAGS.eval_episodes)
    checks.check_out_dir(FLAGS.out_dir or f"runs/reproduce_{FLAGS.agent}")
    return envs, seeds


def planned_runs(agent: str, envs: list[str], seeds: list[int]) -> list[tuple]:
    """(env, config, protocol) of every game and seed, each folder's plan checked (`plan`:
    reuse, train, continue or re-evaluate) before any of them trains."""
    flagfile = FLAGS.config or f"experiments/configs/{agent}_atari.cfg"
    if not os.path.isfile(flagfile):
        raise UsageError(f"--config: {flagfile!r} is not a file; name an agent's flagfile "
                         "(experiments/configs/*.cfg)")
    out_dir = FLAGS.out_dir or f"runs/reproduce_{agent}"
    protocol = registry.paper_protocol(agent, FLAGS.eval_episodes, FLAGS.greedy,
                                       FLAGS.eval_epsilon)
    runs = []
    for env in envs:
        for seed in seeds:
            try:
                config = config_from_flagfile(
                    registry.get(agent).config, flagfile, env=env, seed=seed,
                    total_env_steps=agent_steps(FLAGS.frames, env), solved_return=math.inf,
                    run_dir=os.path.join(out_dir, game_name(env), f"seed_{seed}"), resume=True)
            except ValueError as e:
                raise UsageError(f"--config {flagfile}: {e}") from None
            run_protocol = dataclasses.replace(protocol, noop_max=max(1, config.noop_max))
            run_and_evaluate.plan(config, run_protocol)  # refuses before anything trains
            runs.append((env, config, run_protocol))
    return runs


def main(argv):
    del argv
    # Ctrl-C or SIGTERM stops the run under way with a final checkpoint (the script resumes
    # it when run again), also when the script was started in the background, where SIGINT
    # would otherwise be ignored.
    GUARD.install()
    GUARD.starting()  # the imports are done: a signal raises until a run is under way
    agent = FLAGS.agent
    out_dir = FLAGS.out_dir or f"runs/reproduce_{agent}"
    refs = references.load_references()
    try:
        runs = planned_runs(agent, *check_flags(refs))
        results, column = {}, None
        for env, config, protocol in runs:
            column = references.paper_column(agent, getattr(config, "torso", ""))
            result = run_and_evaluate.run(
                agent, config, protocol, print_fn=print, frames=FLAGS.frames,
                flagfile=FLAGS.config or f"experiments/configs/{agent}_atari.cfg")
            results.setdefault(env, []).append(result)
            print(f"{game_name(env)} seed {config.seed}: final "
                  f"{np.mean(result['final_returns']):.2f} over "
                  f"{len(result['final_returns'])} episodes", flush=True)
    except (UsageError, CheckpointError) as e:  # one line, as the launchers print them
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    os.makedirs(out_dir, exist_ok=True)
    write_scores(results, refs, os.path.join(out_dir, "scores.csv"))
    summary = summary_markdown(results, refs, column, FLAGS.bootstrap_reps)
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write(summary)
    plot_curves(results, refs, column, os.path.join(out_dir, "curves.png"))
    print(summary)


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
