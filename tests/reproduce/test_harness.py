"""The reproduction harness end to end at a tiny budget (one game, two seeds), its
resumability, and the ablation's flags and summary."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

import run_and_evaluate
from agents.run.logger import read_metrics
from conftest import REPRODUCE

ROOT = os.path.dirname(os.path.dirname(REPRODUCE))


def test_harness_end_to_end_and_a_finished_run_is_not_run_again(tmp_path, monkeypatch):
    out = tmp_path / "out"
    command = [sys.executable, os.path.join(REPRODUCE, "atari.py"), "--agent=impala",
               "--games=CartPole-v1", "--frames=3000", "--seeds=0,1", "--eval_episodes=4",
               "--config=experiments/configs/impala_cartpole.cfg",
               f"--out_dir={out}", "--bootstrap_reps=200"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    for seed in (0, 1):
        result = json.loads((out / "CartPole" / f"seed_{seed}" / "result.json").read_text())
        assert len(result["final_returns"]) == 4 and result["env_steps"] >= 3000
        assert result["protocol"]["action_rule"] == "sample"
    assert (out / "curves.png").stat().st_size > 0
    summary = (out / "summary.md").read_text()
    assert "| CartPole | 2 |" in summary
    rows = (out / "scores.csv").read_text().splitlines()
    assert rows[0] == "game,seed,frames,final_return,human_normalized,games_at_cap"
    assert len(rows) == 3 and all(row.endswith(",") for row in rows[1:])  # no cap: not Atari

    # Resumable: a run with a result of the same settings is read back, no agent is built.
    from agents import registry
    from agents.impala.config import ImpalaConfig
    from agents.registry import paper_protocol
    from agents.run.flags import config_from_flagfile

    monkeypatch.setitem(registry.AGENTS, "impala",
                        dataclasses.replace(registry.get("impala"), load_agent=lambda: None))
    config = config_from_flagfile(
        ImpalaConfig, os.path.join(ROOT, "experiments/configs/impala_cartpole.cfg"),
        seed=1, total_env_steps=3000, solved_return=np.inf,
        run_dir=str(out / "CartPole" / "seed_1"))
    protocol = paper_protocol("impala", 4)  # with the config's no-ops, as atari.py does
    protocol = type(protocol)(**{**vars(protocol), "noop_max": max(1, config.noop_max)})
    again = run_and_evaluate.run("impala", config, protocol)
    assert again == json.loads((out / "CartPole" / "seed_1" / "result.json").read_text())


def test_harness_end_to_end_on_an_atari_game(tmp_path):
    """Pong at a few thousand frames, two seeds: scores from the protocol's full games,
    human-normalized against the data file, beside the paper's score."""
    out = tmp_path / "out"
    command = [sys.executable, os.path.join(REPRODUCE, "atari.py"), "--agent=impala",
               "--games=Pong", "--frames=3000", "--seeds=0,1", "--eval_episodes=2",
               "--config=experiments/configs/impala_pong_cpu.cfg", f"--out_dir={out}",
               "--bootstrap_reps=200"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split(",") for line in (out / "scores.csv").read_text().splitlines()[1:]]
    assert [r[0] for r in rows] == ["Pong", "Pong"]
    for game, seed, frames, final_return, hns, at_cap in rows:
        assert int(frames) >= 3000 and -21 <= float(final_return) <= 21
        assert at_cap == "0"  # an untrained agent loses each game long before 27K steps
        # Pong: random -20.7, human 14.6 (the data file's references)
        assert float(hns) == pytest.approx((float(final_return) + 20.7) / (14.6 + 20.7))
    summary = (out / "summary.md").read_text()
    assert "| Pong | 2 |" in summary and "optimality_gap" in summary
    assert (out / "curves.png").stat().st_size > 0


def test_the_budget_counts_frames_four_to_an_atari_step():
    from run_and_evaluate import agent_steps, env_id

    assert agent_steps(200_000_000, "Pong-v5") == 50_000_000
    assert agent_steps(10_000, "CartPole-v1") == 10_000
    assert env_id("Pong") == "Pong-v5" and env_id("CartPole-v1") == "CartPole-v1"
    with pytest.raises(ValueError, match="frames must be >= 1"):
        agent_steps(0, "Pong-v5")


def test_ablation_flags_and_summary():
    import vtrace_ablation

    vtrace_ablation.FLAGS(["vtrace_ablation"])  # defaults
    with pytest.raises(ValueError, match="--corrections: 'retrace' is not one of"):
        vtrace_ablation.parse_levels(["retrace"], ["1"], ["0"])
    with pytest.raises(ValueError, match="--lags must be >= 1"):
        vtrace_ablation.parse_levels(["none"], ["0"], ["0"])

    def fake(final, curve, **diagnostics):
        return dict(final_returns=[final], curve=[dict(env_steps=i, mean_return=c)
                                                  for i, c in enumerate(curve)],
                    policy_lag_run_mean=2.0, policy_lag_max=4.0, behaviour_kl=0.1,
                    trace_product=0.5, rho=1.0, max_behaviour_kl=0.2, min_entropy=0.5,
                    collapsed=float(final < 100), **diagnostics)

    Key = vtrace_ablation.Key
    # the none run was recorded before unlikely_fraction existed: its cell shows NaN
    results = {Key("vtrace", 1): [fake(100.0, [10, 30], unlikely_fraction=0.01),
                                  fake(200.0, [20, 40], unlikely_fraction=0.03)],
               Key("none", 1): [fake(50.0, [5, 15])]}
    assert vtrace_ablation.run_scores(results[Key("vtrace", 1)][0]) == (100.0, 20.0)
    table, cells = vtrace_ablation.summarize(results, ["vtrace", "none"])
    assert "| 1 | vtrace | 2.0 | 0.100 | 0.500 | 0.02 | 0.50 | 0/2 | 2 |" in table
    assert "| 1 | none | 2.0 | 0.100 | 0.500 | nan | 0.50 | 1/1 | 1 |" in table
    np.testing.assert_allclose(cells["vtrace_k1"]["final"][0], 150.0)  # IQM of two = mean
    np.testing.assert_allclose(cells["none_k1"]["auc"], [10.0, np.nan, np.nan])  # one seed
    assert "| 50 (1 seed) | 10 (1 seed) |" in table  # no zero-width interval
    with_lr = {Key("vtrace", 8, lr=0.001, entropy=0.01): results[Key("vtrace", 1)]}
    table, cells = vtrace_ablation.summarize(with_lr, ["vtrace"])
    assert "| 8 | vtrace | 0.001 | 0.01 | 2.0 |" in table and "vtrace_k8_lr0.001_ent0.01" in cells
    with_replay = {Key("vtrace", 1, replay=0.5): results[Key("vtrace", 1)],
                   Key("vtrace", 1): results[Key("none", 1)]}
    table, cells = vtrace_ablation.summarize(with_replay, ["vtrace"])
    assert "| 1 | vtrace | 0.5 | 2.0 |" in table and "| 1 | vtrace | 0 | 2.0 |" in table
    assert set(cells) == {"vtrace_k1", "vtrace_k1_replay0.5"}


def test_the_sweep_chooses_each_cells_best_setting_by_its_mean_score():
    import vtrace_ablation

    Key = vtrace_ablation.Key

    def runs(*aucs):
        return [dict(final_returns=[100.0 - a], curve=[dict(env_steps=0, mean_return=a)])
                for a in aucs]

    sweep = {Key("vtrace", 16, 0.001, 0.0, 0.01): runs(10, 50),  # mean AUC 30
             Key("vtrace", 16, 0.0003, 0.0, 0.01): runs(35, 35),  # 35: the best AUC
             Key("is_1step", 16, 0.001, 0.0, 0.01): runs(60, 60),
             Key("is_1step", 16, 0.0003, 0.0, 0.01): runs(20, 20),
             Key("vtrace", 1, 0.001, 0.5, 0.01): runs(1, 1),
             Key("vtrace", 1, 0.0003, 0.5, 0.01): runs(1, 1)}  # a tie: the first listed
    assert vtrace_ablation.choose(sweep, "auc") == {
        Key("vtrace", 16): Key("vtrace", 16, 0.0003, 0.0, 0.01),
        Key("is_1step", 16): Key("is_1step", 16, 0.001, 0.0, 0.01),
        Key("vtrace", 1, replay=0.5): Key("vtrace", 1, 0.001, 0.5, 0.01)}
    by_final = vtrace_ablation.choose(sweep, "final")  # final = 100 - AUC here
    assert by_final[Key("vtrace", 16)] == Key("vtrace", 16, 0.001, 0.0, 0.01)


def test_the_quick_study_runs_the_whole_path_and_resumes(tmp_path):
    """`--quick`, tuned, with and without replay: the sweep, the chosen settings on the other
    seed, the tables, the figure; run again, it reads the finished runs instead of training
    them again."""
    command = [sys.executable, os.path.join(REPRODUCE, "vtrace_ablation.py"), "--quick",
               "--corrections=vtrace,is_1step", "--lag_sources=4,1:0.5",
               "--learning_rates=0.001,0.003", "--tune_seeds=0", "--seeds=0,1",
               f"--out_dir={tmp_path / 'runs'}", f"--results_dir={tmp_path / 'results'}"]
    first = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    # the sweep: 2 settings x 2 corrections x 2 lag sources (stale actors, replay) on seed 0;
    # then seed 1 of the 4 chosen settings
    assert first.stdout.count("seed=0") == 8 and first.stdout.count("seed=1") == 4
    table = (tmp_path / "results" / "table.md").read_text()
    assert "replayed share" in table and "| 4 | is_1step | 0.00" in table
    assert table.count("| 2 |") == 4  # every chosen cell at both seeds
    sweep = (tmp_path / "results" / "sweep.md").read_text()
    rows = [line for line in sweep.splitlines() if line.startswith("| ") and "K |" not in line]
    assert len(rows) == 8  # every setting of every cell, on the tune seed
    assert (tmp_path / "results" / "ablation.png").stat().st_size > 0
    replayed = read_metrics(str(tmp_path / "runs" / "vtrace_k1_lr0.001_replay0.5" / "seed_0"),
                            "train")
    assert replayed[-1]["replay_reuse"] > 0  # replayed unrolls were trained on
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and again.stdout.count("seed=") == 12
    assert (tmp_path / "results" / "table.md").read_text() == table  # the same runs, read
    # an interrupted run (a folder without its result) starts over instead of resuming
    interrupted = tmp_path / "runs" / "vtrace_k4_lr0.001" / "seed_0"
    (interrupted / "result.json").unlink()
    third = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert third.returncode == 0, third.stdout + third.stderr
    assert third.stdout.count("started over") == 1 and third.stdout.count("seed=") == 12
    assert len((interrupted / "config_history.jsonl").read_text().splitlines()) == 1


def test_the_study_refuses_a_tuning_without_a_sweep(tmp_path):
    command = [sys.executable, os.path.join(REPRODUCE, "vtrace_ablation.py"), "--quick",
               "--tune_seeds=0", f"--out_dir={tmp_path}", f"--results_dir={tmp_path}"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "--tune_seeds needs a sweep" in done.stderr
    assert not list(tmp_path.iterdir())  # refused before any run
    command[-3:-2] = ["--lag_sources=16,1:1.5"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "--lag_sources: '1:1.5' needs K >= 1" in done.stderr


def test_ablation_diagnostics_average_the_whole_run(tmp_path):
    import vtrace_ablation

    rows = ("step,policy_lag_run_mean,policy_lag_max,behaviour_kl,trace_product,rho,"
            "unlikely_fraction,entropy,episode_return\n")
    rows += "1,2,3,0.1,0.5,1,0.02,0.6,20\n2,6,9,0.3,0.1,1,0.04,0.2,60\n3,,,,,,,,\n"
    rows += "4,nan,nan,nan,nan,nan,nan,nan,nan\n5,,,,,,,0.4,25\n"
    (tmp_path / "train.csv").write_text(rows)
    diag = vtrace_ablation.run_diagnostics(str(tmp_path))
    expected = dict(policy_lag_run_mean=6.0, policy_lag_max=6.0, behaviour_kl=0.2,
                    trace_product=0.3, rho=1.0, unlikely_fraction=0.03, max_behaviour_kl=0.3,
                    min_entropy=0.2, collapsed=1.0)  # ended at 25, below half of its best (60)
    assert diag.keys() == expected.keys()
    np.testing.assert_allclose([diag[k] for k in expected], list(expected.values()))


def test_ctrl_c_stops_the_harness_with_a_checkpoint_also_in_the_background(tmp_path):
    """A script started in the background inherits SIGINT ignored; the harness takes it over,
    so Ctrl-C still stops the run under way, with a checkpoint and no result written."""
    out = tmp_path / "out"
    command = [sys.executable, os.path.join(REPRODUCE, "atari.py"), "--agent=impala",
               "--games=CartPole-v1", "--frames=100000000", "--seeds=0",
               "--config=experiments/configs/impala_cartpole.cfg", f"--out_dir={out}"]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT,
                                                                        signal.SIG_IGN))
    watchdog = threading.Timer(120, proc.kill)  # a stop that hangs fails instead of hanging
    watchdog.start()
    seen, interrupted = [], False
    try:
        for line in proc.stdout:  # one reader: lines read ahead are never lost to another
            seen.append(line)
            if line.startswith("[impala") and not interrupted:
                proc.send_signal(signal.SIGINT)
                interrupted = True
        proc.wait(timeout=30)
    finally:
        watchdog.cancel()
        proc.kill()
    text = "".join(seen)
    assert proc.returncode != 0, text
    assert "interrupted (SIGINT): stopping threads and writing a checkpoint" in text, text
    assert os.listdir(out / "CartPole" / "seed_0" / "checkpoints"), text
    assert not (out / "CartPole" / "seed_0" / "result.json").exists()
