"""The reproduction harness's results record what produced them, and a rerun uses a result only
for the same settings: equal ones reuse it, a larger budget continues the run, another protocol
evaluates the final checkpoint again, anything else is refused naming what differs; bad flags
stop the script with one line before anything trains."""

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

import run_and_evaluate
from agents import registry
from agents.run import checkpoint
from agents.run.evaluation import EvalProtocol
from agents.run.run_folder import UsageError, config_values
from conftest import REPRODUCE
from tests.agents.fault_injection import IMPALA_CFG, ROOT, impala_config, own_lines

PROTOCOL = EvalProtocol(2, "sample")
quiet = lambda *a, **k: None  # noqa: E731


def harness_run(run_dir, protocol=PROTOCOL, **overrides):
    config = impala_config(run_dir, **{"total_env_steps": 1_000, **overrides})
    return run_and_evaluate.run("impala", config, protocol, print_fn=quiet,
                                flagfile=IMPALA_CFG, frames=config.total_env_steps)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished harness run (1K CartPole steps, 2 protocol episodes) and its result."""
    run_dir = tmp_path_factory.mktemp("finished") / "CartPole" / "seed_0"
    return run_dir, harness_run(run_dir)


@pytest.fixture
def copy(finished, tmp_path):
    """A copy of the finished run's folder to change, and its result."""
    run_dir = tmp_path / "seed_0"
    shutil.copytree(finished[0], run_dir)
    return run_dir, finished[1]


def no_training(monkeypatch):
    """Any agent built from here on fails the test: nothing may train."""
    def refuse(*args, **kwargs):
        raise AssertionError("an agent was built: the run trained again")
    monkeypatch.setitem(registry.AGENTS, "impala",
                        dataclasses.replace(registry.get("impala"), load_agent=lambda: refuse))


def starts(run_dir) -> int:
    return len((run_dir / "config_history.jsonl").read_text().splitlines())


def test_equal_settings_reuse_the_result_which_records_what_produced_it(copy, monkeypatch):
    run_dir, first = copy
    config = impala_config(run_dir, total_env_steps=1_000, resume=True)
    assert first["config"] == config_values(config) | {"run_dir": first["config"]["run_dir"]}
    assert (first["frames"], first["total_env_steps"], first["seed"]) == (1_000, 1_000, 0)
    assert first["flagfile"] == IMPALA_CFG and first["protocol"]["episodes"] == 2
    assert first["protocol"]["action_rule"] == "sample" and len(first["final_returns"]) == 2
    assert first["final_steps"] == first["final_returns"]  # CartPole pays 1 a step
    no_training(monkeypatch)
    monkeypatch.setattr(run_and_evaluate.trained, "load", None)  # nor is anything evaluated
    assert harness_run(run_dir) == first


def test_a_larger_budget_continues_the_run_and_counts_its_whole_wall_time(copy):
    run_dir, first = copy
    more = harness_run(run_dir, total_env_steps=2_000)
    assert more["env_steps"] >= 2_000 > first["env_steps"] and more["updates"] > first["updates"]
    assert more["total_env_steps"] == more["frames"] == 2_000
    assert more["wall_s"] > first["wall_s"]  # the first start's time is counted too
    history = [json.loads(line) for line in
               (run_dir / "config_history.jsonl").read_text().splitlines()]
    assert history[-1]["changed"]["total_env_steps"] == [1_000, 2_000]  # a resume
    assert json.loads((run_dir / "result.json").read_text()) == more


def test_another_protocol_evaluates_the_final_checkpoint_again_without_training(
        copy, monkeypatch):
    run_dir, first = copy
    no_training(monkeypatch)
    before = (starts(run_dir), os.listdir(run_dir / "checkpoints"))
    again = harness_run(run_dir, protocol=EvalProtocol(3, "greedy"))
    assert len(again["final_returns"]) == 3 and again["protocol"]["action_rule"] == "greedy"
    for key in ("env_steps", "updates", "wall_s", "curve", "total_env_steps"):
        assert again[key] == first[key], key
    assert again["config"] == first["config"] | {"run_dir": str(run_dir)}
    assert (starts(run_dir), os.listdir(run_dir / "checkpoints")) == before
    assert json.loads((run_dir / "result.json").read_text()) == again


def test_a_result_recorded_before_the_fire_rule_is_read_with_the_rule_then_in_effect(
        copy, monkeypatch):
    """Protocols recorded before `fire_reset` existed: envpool pressed FIRE in Atari games, so
    an Atari result is of another protocol (evaluated again); a CartPole one is reused."""
    run_dir, first = copy
    old = dict(first, protocol={k: v for k, v in first["protocol"].items() if k != "fire_reset"})
    (run_dir / "result.json").write_text(json.dumps(old))
    no_training(monkeypatch)
    monkeypatch.setattr(run_and_evaluate.trained, "load", None)  # nor is anything evaluated
    assert harness_run(run_dir) == old
    pong = impala_config(run_dir, env="Pong-v5")
    assert run_and_evaluate._recorded_protocol(old, pong)["fire_reset"] is True
    assert run_and_evaluate._recorded_protocol(first, pong) == first["protocol"]


def test_another_config_or_a_smaller_budget_is_refused_naming_the_setting(copy, monkeypatch):
    run_dir, first = copy
    no_training(monkeypatch)
    with pytest.raises(UsageError, match=r"another config \(learning_rate: 0.001 -> 0.002\): "
                                         r"choose another --out_dir .* or delete "):
        harness_run(run_dir, learning_rate=0.002)
    with pytest.raises(UsageError, match=r"total_env_steps: 1000 -> 500; --frames sets it"):
        harness_run(run_dir, total_env_steps=500)
    assert json.loads((run_dir / "result.json").read_text()) == first


def test_a_run_begun_before_wall_time_was_counted_records_it_as_unknown(copy):
    """A checkpoint without the `wall_ms` counter: a resume that trains nothing counted only
    its own second, which must not pass for the run's wall time."""
    run_dir, first = copy
    os.remove(run_dir / "result.json")  # stopped in its final evaluation
    final = checkpoint.latest_checkpoint(str(run_dir / "checkpoints"))
    meta = checkpoint.read_meta(final)
    del meta["counters"]["wall_ms"]
    with open(os.path.join(final, "meta.json"), "w") as f:
        json.dump(meta, f)
    os.remove(os.path.join(final, "manifest.json"))
    checkpoint._write_manifest(final)  # its checksums, as a save made then has them
    again = harness_run(run_dir)
    assert again["env_steps"] == first["env_steps"] and again["wall_s"] is None


def atari_py(*flags):
    command = [sys.executable, os.path.join(REPRODUCE, "atari.py"), "--agent=impala",
               "--seeds=0", "--frames=100", f"--config={IMPALA_CFG}", *flags]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("bad, message", [
    ("--games=CartPole-v1,Pongg",
     r"--games: 'Pongg' is neither an Atari game of .*atari_scores.csv \(Alien, .* nor an "
     r"envpool id .*did you mean Pong"),
    ("--out_dir=FILE", r"--out_dir: '.*a_file' exists and is not a folder"),
])
def test_bad_flags_are_one_line_and_exit_1_before_anything_trains(tmp_path, bad, message):
    """The first game is fine: the bad value stops the script before it trains."""
    (tmp_path / "a_file").write_text("")
    out = tmp_path / "out"
    done = atari_py(f"--out_dir={out}", bad.replace("FILE", str(tmp_path / "a_file")),
                    "--games=CartPole-v1" if "games" not in bad else bad)
    lines = own_lines(done.stderr)
    assert done.returncode == 1 and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("error: ") and re.search(message, lines[0]), lines
    assert not out.exists()  # nothing trained, nothing written


@pytest.mark.parametrize("check, args, message", [
    ("check_budget", (-1, ["0"], 30), r"--frames must be >= 1 .*got -1"),
    ("check_budget", (100, ["0", "x"], 30), r"--seeds must be distinct integers >= 0"),
    ("check_budget", (100, ["-1"], 30), r"--seeds must be distinct integers >= 0, got '-1'"),
    ("check_budget", (100, ["0"], 0), r"--eval_episodes must be >= 1, got 0"),
    ("check_games", (["Pong", "Pong-v5"], None), r"--games: Pong is listed twice"),
    ("check_out_dir", ("FILE/sub",), r"--out_dir: .* cannot be made or written \(.*a_file is "
                                     r"not a writable folder\)"),
])
def test_each_flag_is_checked_naming_it_and_its_allowed_values(tmp_path, check, args, message):
    import checks
    import references

    (tmp_path / "a_file").write_text("")
    args = tuple(references.load_references() if a is None else
                 a.replace("FILE", str(tmp_path / "a_file")) if isinstance(a, str) else a
                 for a in args)
    with pytest.raises(UsageError, match=message):
        getattr(checks, check)(*args)
    assert checks.check_budget(100, ["0", "2"], 1) == [0, 2]
    assert checks.check_games(["Pong", "CartPole-v1", "Alien-v5"], {"Pong": {}}) == [
        "Pong-v5", "CartPole-v1", "Alien-v5"]
