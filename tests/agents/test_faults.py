"""Fault injection: what a user can do wrong, and what can go wrong under a run, end to end.

Each case ends in one clear message and an exit status, never an abort, and no checkpoint is
lost: bad flags and run folders, damaged checkpoints, a config changed on resume, a full disk,
signals during shutdown, SIGKILL, and a failure in every kind of thread.
"""

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from agents.apex import learner as apex_learner
from agents.apex.agent import ApexAgent
from agents.impala.agent import ImpalaAgent
from agents.run import checkpoint, run_folder
from agents.run.run_folder import UsageError
from agents.run.actor_threads import ActorThreads
from agents.run.runner import StopEvent, WorkerError
from agents.run.stats import RunStats
from replay.prioritized import PrioritizedReplay
from tests.agents.fault_injection import (APEX_CFG, IMPALA_CFG, ROOT, apex_config, fill_disk,
                                          impala_config, launch, own_lines, watched)

# ------------------------------------------------------------------------------ bad flags

USAGE = [
    ("apex", ["--run_dir=/proc/no_such_dir"], "run_dir '/proc/no_such_dir' cannot be created"),
    ("impala", ["--run_dir=/proc/no_such_dir"], "run_dir '/proc/no_such_dir' cannot be created"),
    ("apex", ["--run_dir=README.md"], "run_dir 'README.md' exists and is not a folder"),
    ("impala", ["--run_dir=README.md"], "run_dir 'README.md' exists and is not a folder"),
    ("apex", ["--env=NoSuchEnv-v0"], "env_id 'NoSuchEnv-v0' is not an envpool env"),
    ("apex", ["--learner_devices=7"], "learner_devices [7] out of range"),
    ("impala", ["--torso=nature", "--norm=group", "--num_groups=5"],
     "num_groups=5 does not divide [32, 64]"),
    ("apex", ["--norm=group"], "torso=mlp has no normalization"),
    ("apex", ["--replay_capacity=32", "--min_replay_size=16"],
     "replay_capacity=32 is below an actor's largest add"),
    ("apex", ["--replay_capacity=60", "--min_replay_size=16"],
     "replay_capacity=60 is below batch_size=64"),
]


@pytest.mark.parametrize("agent,flags,message", USAGE,
                         ids=[f"{a}:{' '.join(f)}" for a, f, _ in USAGE])
def test_a_usage_error_is_one_line_and_exit_1(agent, flags, message, tmp_path):
    if not any(f.startswith("--run_dir") for f in flags):
        flags = [*flags, f"--run_dir={tmp_path / 'run'}"]
    result = launch(agent, *flags)
    lines = own_lines(result.stderr)
    assert result.returncode == 1, result.stderr
    assert lines == [line for line in lines if line.startswith("error: ")], result.stderr
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr and "Fatal" not in result.stderr
    assert not (tmp_path / "run").exists()


SMALL_HOST = """
from agents.run import host_memory
host_memory.available_bytes = lambda: 3 * 2**20
import runpy
runpy.run_path("experiments/run_apex.py", run_name="__main__")
"""


def test_a_replay_too_large_for_the_memory_left_is_a_usage_error(tmp_path):
    """A replay maps its arrays lazily: too large for the host, it would be OOM-killed hours in,
    once full, and again after every --resume. Here the host has 3 MiB left."""
    result = subprocess.run(
        [sys.executable, "-c", SMALL_HOST, f"--flagfile={APEX_CFG}", f"--run_dir={tmp_path}"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True,
        timeout=90)
    lines = own_lines(result.stderr)
    assert result.returncode == 1 and len(lines) == 1, result.stderr
    assert re.match(r"error: replay_capacity=50000 does not fit in memory: the replay takes "
                    r"4\.5 MiB once full \(94 bytes a transition\) and this process can take "
                    r"3\.0 MiB more", lines[0]), lines
    fits = int(re.search(r"use replay_capacity <= ([\d,]+)", lines[0])[1].replace(",", ""))
    assert 15_000 <= fits < 50_000 and "Traceback" not in result.stderr
    assert not os.path.exists(tmp_path / "checkpoints")


def test_the_capacity_offered_instead_fits(monkeypatch, tmp_path):
    from agents.apex import replay as apex_replay
    from agents.run.envs import actor_env_settings, env_info
    config = apex_config(tmp_path, replay_capacity=100_000, replay_shards=2,
                         backend="ray")
    info = env_info(actor_env_settings(config, 0))
    monkeypatch.setattr(apex_replay.host_memory, "available_bytes", lambda: 2**20)
    with pytest.raises(ValueError, match="each replay shard takes") as raised:
        apex_replay.make_replay(config, info)
    fits = int(re.search(r"<= ([\d,]+)", str(raised.value))[1].replace(",", ""))
    apex_replay.make_replay(dataclasses.replace(config, replay_capacity=fits), info)


@pytest.mark.skipif(open("/proc/sys/vm/overcommit_memory").read().strip() == "1",
                    reason="this kernel maps any size; the size check above then refuses it")
def test_a_replay_no_host_could_map_is_a_usage_error(tmp_path):
    """A mistyped capacity (150 GiB of CartPole observations): NumPy's MemoryError names it."""
    from agents.apex import replay as apex_replay
    from agents.run.envs import actor_env_settings, env_info
    config = apex_config(tmp_path, replay_capacity=10**10)
    with pytest.raises(ValueError, match=r"replay_capacity=10000000000 does not fit in memory: "
                                         r"Unable to allocate .*; use a smaller replay_capacity"):
        apex_replay.make_replay(config, env_info(actor_env_settings(config, 0)))


def test_shards_that_share_a_host_are_checked_together(tmp_path):
    """Each shard alone fits in 1 MiB; three on one host do not, whatever the other hosts do."""
    from agents.apex.replay import check_shards_fit
    config = apex_config(tmp_path, replay_capacity=30_000, replay_shards=4, num_actors=4,
                         backend="ray")
    shard = 7_500 * 100  # bytes once full: a quarter of the capacity, 100 bytes a transition
    spread = [("a", shard, 2**20), ("b", shard, 2**20), ("c", shard, 2**20), ("d", shard, None)]
    check_shards_fit(spread, config)
    crowded = [("a", shard, 2**20), ("b", shard, 2**20), ("b", shard, 3 * 2**20),
               ("b", shard, 2**20)]
    with pytest.raises(ValueError, match=r"replay_capacity=30000 does not fit in memory: 3 "
                                         r"replay shards on one host take 2\.1 MiB once full "
                                         r"\(100 bytes a transition\) and that host can take "
                                         r"1\.0 MiB more") as raised:
        check_shards_fit(crowded, config)
    fits = int(re.search(r"<= ([\d,]+)", str(raised.value))[1].replace(",", ""))
    assert 6_000 <= fits < 30_000  # 4 shards, each of them a third of 1 MiB
    per_shard = -(-fits // 4) * 100
    check_shards_fit([(host, per_shard, available) for host, _, available in crowded],
                     dataclasses.replace(config, replay_capacity=fits))


# ------------------------------------------------------------------------ damaged checkpoints

@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """An Ape-X run with two complete checkpoints (a first run and one resume)."""
    run_dir = tmp_path_factory.mktemp("run")
    ApexAgent(apex_config(run_dir)).run()
    ApexAgent(apex_config(run_dir, resume=True, total_env_steps=6_000)).run()
    paths = checkpoint.list_checkpoints(os.path.join(run_dir, "checkpoints"))
    assert len(paths) == 2
    return run_dir


DAMAGE = {
    "replay.npz deleted": ("replay.npz", os.remove),
    "learner.msgpack truncated": ("learner.msgpack", lambda p: os.truncate(p, 100)),
    "learner.msgpack garbage": ("learner.msgpack", lambda p: open(p, "r+b").write(b"\0" * 64)),
    "meta.json garbage": ("meta.json", lambda p: open(p, "r+b").write(b"garbage")),
    "replay.npz garbage": ("replay.npz", lambda p: open(p, "r+b").write(b"\x80\x04garbage")),
    "manifest.json deleted": ("manifest.json", os.remove),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_checkpoint_falls_back_to_the_complete_one_with_its_replay(
        case, finished_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    older, newer = checkpoint.list_checkpoints(str(run_dir / "checkpoints"))
    name, damage = DAMAGE[case]
    damage(os.path.join(newer, name))
    printed = []
    agent = ApexAgent(apex_config(run_dir, resume=True, total_env_steps=6_500),
                      print_fn=printed.append)
    assert agent.resumed_from == older
    assert any(os.path.basename(newer) in p and name in p for p in printed), printed
    with np.load(os.path.join(older, "replay.npz")) as saved:
        assert len(agent.replay) == int(saved["size"]) > 0  # the replay came back
    summary = agent.run()  # and the run goes on, keeping a complete checkpoint at every save
    assert checkpoint.is_complete(summary["checkpoint"], checksums=True)
    assert checkpoint.is_complete(older, checksums=True)


# ------------------------------------------------------------------------- changed config

def test_resume_refuses_a_network_change_and_keeps_the_saved_config(finished_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    original = (run_dir / "config.json").read_text()
    with pytest.raises(UsageError, match=r"mlp_hidden_sizes: \[128, 128\] -> \[64, 64\]"):
        ApexAgent(apex_config(run_dir, resume=True, mlp_hidden_sizes=(64, 64)))
    result = launch("apex", f"--run_dir={run_dir}", "--resume", "--mlp_hidden_sizes=64,64",
                    "--replay_capacity=40000")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    (line,) = own_lines(result.stderr)
    assert "mlp_hidden_sizes" in line and "replay_capacity: 50000 -> 40000" in line
    assert (run_dir / "config.json").read_text() == original


def test_resume_accepts_and_records_a_budget_or_step_size_change(finished_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    printed = []
    config = apex_config(run_dir, resume=True, learning_rate=0.0005, total_env_steps=9_000)
    assert run_folder.prepare_run_folder(config, printed.append)
    saved = json.load(open(run_dir / "config.json"))["learning_rate"]
    assert saved != 0.0005
    assert any(f"learning_rate: {saved} -> 0.0005" in p for p in printed), printed
    history = [json.loads(line) for line in open(run_dir / "config_history.jsonl")]
    assert len(history) == 3 and history[-1]["changed"]["learning_rate"] == [saved, 0.0005]
    assert json.load(open(run_dir / "config.json"))["learning_rate"] == saved


def test_an_unchanged_infinite_solved_return_is_not_reported_as_a_change(tmp_path):
    # A checkpoint's meta keeps inf (JSON's Infinity); config.json writes it as None.
    config = apex_config(tmp_path, solved_return=float("inf"))
    saved = json.loads(json.dumps(dataclasses.asdict(config)))
    assert run_folder.config_changes(saved, config) == ({}, {})
    changed = dataclasses.replace(config, solved_return=20.0)
    fixed, allowed = run_folder.config_changes(saved, changed)
    assert not fixed and allowed == {"solved_return": (None, 20.0)}


def test_a_field_added_since_is_compared_with_the_value_runs_had_before_it(tmp_path):
    """Runs saved before `fire_reset` existed pressed FIRE in Atari games (envpool's default):
    resuming one without it is a change of task; for other envs the field does not apply."""
    def saved_without_fire_reset(config):
        saved = json.loads(json.dumps(dataclasses.asdict(config)))
        del saved["fire_reset"]
        return saved

    pong = apex_config(tmp_path, env="Pong-v5")
    assert run_folder.config_changes(saved_without_fire_reset(pong), pong) == (
        {"fire_reset": (True, False)}, {})
    fired = dataclasses.replace(pong, fire_reset=True)
    assert run_folder.config_changes(saved_without_fire_reset(pong), fired) == ({}, {})
    cartpole = apex_config(tmp_path)
    assert run_folder.config_changes(saved_without_fire_reset(cartpole), cartpole) == ({}, {})


def test_resume_without_a_checkpoint_says_so(tmp_path):
    printed = []
    assert run_folder.prepare_run_folder(apex_config(tmp_path, resume=True),
                                         printed.append) is None
    assert any("no complete checkpoint" in p for p in printed)


def test_a_new_run_moves_an_earlier_one_aside(finished_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    printed = []
    assert run_folder.prepare_run_folder(apex_config(run_dir), printed.append) is None
    (moved,) = os.listdir(run_dir / "previous")
    assert len(checkpoint.list_checkpoints(str(run_dir / "previous" / moved / "checkpoints")))
    assert not (run_dir / "checkpoints").exists() and "moved it to" in printed[0]


def test_a_folder_in_use_refuses_a_second_lock_until_released(finished_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    held = run_folder.RunFolderLock(str(run_dir))
    with pytest.raises(UsageError, match="in use by another run .an agent in this process"):
        run_folder.RunFolderLock(str(run_dir))
    # A new run moves the earlier run aside, but not the lock that keeps a third one out.
    run_folder.prepare_run_folder(apex_config(run_dir), print)
    assert os.listdir(run_dir / "previous") and (run_dir / run_folder.LOCK_FILE).exists()
    with pytest.raises(UsageError, match="in use by another run"):
        run_folder.RunFolderLock(str(run_dir))
    held.release()
    held.release()  # idempotent
    run_folder.RunFolderLock(str(run_dir)).release()


def test_an_agent_that_fails_to_build_or_finishes_lets_go_of_its_folder(tmp_path):
    with pytest.raises(ValueError, match="not an envpool env"):
        ApexAgent(apex_config(tmp_path, env="NoSuchEnv-v0"))
    agent = ApexAgent(apex_config(tmp_path, total_env_steps=600, min_replay_size=100))
    with pytest.raises(UsageError, match="an agent in this process that was not closed"):
        ApexAgent(apex_config(tmp_path, resume=True))
    agent.run()
    ApexAgent(apex_config(tmp_path, resume=True)).close()


# ------------------------------------------------------------------------------ full disk

@pytest.mark.parametrize("policy", ["retry", "stop"])
def test_a_full_disk_during_a_periodic_save_is_reported_and_handled(policy, tmp_path,
                                                                    monkeypatch):
    calls = fill_disk(monkeypatch, PrioritizedReplay, "save", failures=(1,))
    printed = []
    summary = ApexAgent(apex_config(tmp_path, checkpoint_period_s=0.2, checkpoint_failure=policy,
                                    total_env_steps=6_000),
                        print_fn=printed.append).run()
    failure = [p for p in printed if "periodic checkpoint failed" in p]
    assert len(failure) == 1 and "No space left on device" in failure[0]
    if policy == "retry":
        assert "retrying" in failure[0] and len(calls) > 2  # later periodic saves went on
    else:
        assert "stopping: checkpoint_failure=stop" in printed and len(calls) == 2
        # Under load the stop can come before the first env step is counted.
        assert summary.get("env_steps", 0) < 6_000
    assert checkpoint.is_complete(summary["checkpoint"], checksums=True)
    assert not [n for n in os.listdir(tmp_path / "checkpoints") if n.endswith(".tmp")]


def test_a_failed_final_save_exits_1(tmp_path, monkeypatch):
    fill_disk(monkeypatch, PrioritizedReplay, "save")
    printed = []
    summary = ApexAgent(apex_config(tmp_path), print_fn=printed.append).run()
    assert summary["checkpoint_failed"] and summary["checkpoint"] is None
    assert any("final checkpoint failed" in p for p in printed)


# ---------------------------------------------------------------------- signals and kills

SLOW_STOP = """
import sys, time
from agents.run import runner
original = runner.ThreadRunner.stop
def slow_stop(self, timeout=30.0):
    print("joining", flush=True)
    time.sleep(1.5)
    original(self, timeout)
runner.ThreadRunner.stop = slow_stop
import runpy
runpy.run_path("experiments/run_{agent}.py", run_name="__main__")
"""


@pytest.mark.parametrize("agent", ["apex", "impala"])
def test_ctrl_c_stops_with_a_checkpoint_and_later_signals_do_not_interrupt_it(agent, tmp_path):
    cfg = APEX_CFG if agent == "apex" else IMPALA_CFG
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_STOP.format(agent=agent), f"--flagfile={cfg}",
         f"--run_dir={tmp_path}", "--total_env_steps=100000000", "--log_period_s=0.3",
         "--solved_return=inf"], cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen, interrupted, joining = [], False, False
    with watched(proc):
        # Every line is read through this one loop: another reader (communicate) would miss
        # the lines this file object has already read ahead. The actor threads' own join can
        # print "joining" before the driver's "interrupted" line.
        for line in proc.stdout:
            seen.append(line)
            if line.startswith(f"[{agent}") and not interrupted:
                proc.send_signal(signal.SIGINT)
                interrupted = True
            if line.startswith("joining") and not joining:
                joining = True
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGINT):
                    proc.send_signal(sig)  # as GNU timeout does to the process group
                    time.sleep(0.1)
        proc.wait(timeout=30)
    out = "".join(seen)
    assert proc.returncode == 130, out
    assert "interrupted (SIGINT): stopping threads and writing a checkpoint" in out, out
    assert out.count("already stopping") == 3 and "Fatal Python error" not in out, out
    assert not [n for n in os.listdir(tmp_path / "checkpoints") if n.endswith(".tmp")]
    assert checkpoint.find_resumable(str(tmp_path / "checkpoints"), print) is not None


SLOW_EVALUATION = """
import time
from agents.run import evaluation
original = evaluation.select_actions
def slow_select_actions(*args, **kwargs):
    print("evaluation step", flush=True)
    time.sleep(0.3)
    return original(*args, **kwargs)
evaluation.select_actions = slow_select_actions
import runpy
runpy.run_path("experiments/run_{agent}.py", run_name="__main__")
"""


@pytest.mark.parametrize("agent", ["apex", "impala"])
def test_ctrl_c_during_an_evaluation_abandons_it_and_writes_the_final_checkpoint(agent,
                                                                                tmp_path):
    """An Atari evaluation plays up to 27K steps: the evaluator must not make the stop wait."""
    cfg = APEX_CFG if agent == "apex" else IMPALA_CFG
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_EVALUATION.format(agent=agent), f"--flagfile={cfg}",
         f"--run_dir={tmp_path}", "--total_env_steps=100000000", "--log_period_s=0.3",
         "--eval_period=1", "--solved_return=inf"], cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    seen = []
    with watched(proc):
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("evaluation step") and seen.count(line) == 1:
                proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    out = "".join(seen)
    assert proc.returncode == 130, out
    stopping = next(i for i, line in enumerate(seen) if line.startswith("interrupted (SIGINT)"))
    # At most the step under way when the stop came; a CartPole episode has at least 8.
    assert sum(line.startswith("evaluation step") for line in seen[stopping:]) <= 1, out
    assert "did not stop" not in out and "Fatal Python error" not in out, out
    assert checkpoint.find_resumable(str(tmp_path / "checkpoints"), print) is not None


def test_a_second_launch_into_a_folder_in_use_is_refused_and_costs_the_first_nothing(tmp_path):
    """A double launch, or a job requeued while its first copy still runs: the second must not
    remove the first's unfinished save, move its folder aside or prune its checkpoints."""
    proc = subprocess.Popen(
        [sys.executable, "experiments/run_apex.py", f"--flagfile={APEX_CFG}",
         f"--run_dir={tmp_path}", "--total_env_steps=100000000", "--checkpoint_period_s=0.2",
         "--log_period_s=0.3", "--solved_return=inf"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    with watched(proc):
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("[apex"):
                break
        second = [subprocess.Popen(
            [sys.executable, "experiments/run_apex.py", f"--flagfile={APEX_CFG}",
             f"--run_dir={tmp_path}", *flags], cwd=ROOT, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True) for flags in ([], ["--resume"])]
        results = [p.communicate(timeout=90) for p in second]
        proc.send_signal(signal.SIGINT)
        seen += proc.stdout.readlines()
        proc.wait(timeout=30)
    for p, (out, err) in zip(second, results):
        lines = own_lines(err)
        assert p.returncode == 1, out + err
        assert len(lines) == 1 and lines[0].startswith(f"error: run_dir '{tmp_path}' is in use "
                                                       f"by another run (pid {proc.pid} on "), err
    first = "".join(seen)
    assert proc.returncode == 130 and "Traceback" not in first, first
    assert not (tmp_path / "previous").exists()
    assert len(open(tmp_path / "config_history.jsonl").readlines()) == 1
    newest = checkpoint.list_checkpoints(str(tmp_path / "checkpoints"))[-1]
    assert checkpoint.is_complete(newest, checksums=True)
    assert checkpoint.find_resumable(str(tmp_path / "checkpoints"), print) == newest


def test_a_run_killed_at_a_random_moment_resumes(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "experiments/run_apex.py", f"--flagfile={APEX_CFG}",
         f"--run_dir={tmp_path}", "--total_env_steps=100000000", "--checkpoint_period_s=0.2",
         "--log_period_s=0.2", "--solved_return=inf"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:  # a few checkpoints in, kill it wherever it is
            if line.startswith("[apex") and " 0 (" not in line.split("|")[1]:
                time.sleep(np.random.default_rng().uniform(1.0, 2.0))
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        proc.kill()
    result = launch("apex", f"--run_dir={tmp_path}", "--resume", "--total_env_steps=1",
                    "--solved_return=inf")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "resumed from" in result.stdout
    assert not [n for n in os.listdir(tmp_path / "checkpoints") if n.endswith(".tmp")]


# --------------------------------------------------------------------------------- budget

@pytest.mark.parametrize("make_config,agent_cls", [(apex_config, ApexAgent),
                                                   (impala_config, ImpalaAgent)])
def test_the_env_step_budget_holds_within_one_step_of_each_actor(make_config, agent_cls,
                                                                 tmp_path):
    config = make_config(tmp_path, total_env_steps=1_000, log_period_s=10.0,
                         min_replay_size=64) if agent_cls is ApexAgent else make_config(
        tmp_path, total_env_steps=1_000, log_period_s=10.0)
    summary = agent_cls(config).run()
    assert 1_000 <= summary["env_steps"] <= 1_000 + config.num_actors * config.actor_batch_size


def test_actor_threads_stop_at_the_step_that_spends_the_budget():
    """The budget's event reaches the actor threads from the step that spends it, not when the
    runtime's thread next gets the GIL: every actor that sees the budget spent is stopped."""
    stats, stop = RunStats(), StopEvent()
    stats.stop_at("env_steps", 100, stop)
    stopped_when_spent = []

    class CountingActor:
        def __init__(self, actor_id):
            self.actor_id = actor_id

        def run(self, actor_stop):
            while not actor_stop.is_set():
                stats.add(env_steps=1)
                if stats.get("env_steps") >= 100:
                    stopped_when_spent.append(actor_stop.is_set())
                    return

    runtime = ActorThreads(None, lambda _server, _stats: [CountingActor(i) for i in range(2)])
    thread = threading.Thread(target=runtime.run_actors, args=(None, stats, stop))
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
    assert stopped_when_spent and all(stopped_when_spent)
    assert 100 <= stats.get("env_steps") <= 100 + 1


def test_a_stop_event_calls_a_callback_added_after_it_was_set():
    stop, calls = StopEvent(), []
    stop.set()
    stop.on_set(lambda: calls.append(1))
    assert calls == [1]


# ------------------------------------------------------------------------ thread failures

def failing_after(n, original, message):
    calls = []

    def wrapper(*args, **kwargs):
        calls.append(1)
        if len(calls) == n:
            raise RuntimeError(message)
        return original(*args, **kwargs)

    return wrapper


THREADS = [
    ("apex learner", ApexAgent, apex_config, "learner", apex_learner, "sample_to_batch"),
    ("apex prefetch", ApexAgent, apex_config, "prefetch", PrioritizedReplay, "sample"),
    ("apex evaluator", ApexAgent, apex_config, "evaluator", "agents.run.evaluation",
     "play_episodes"),
    ("impala learner", ImpalaAgent, impala_config, "learner", "agents.impala.unroll_queue",
     "stack_unrolls"),
    ("impala evaluator", ImpalaAgent, impala_config, "evaluator", "agents.run.evaluation",
     "play_episodes"),
]


@pytest.mark.parametrize("case", THREADS, ids=[c[0] for c in THREADS])
def test_a_failure_in_any_thread_ends_the_run_with_its_traceback(case, tmp_path, monkeypatch):
    name, agent_cls, make_config, thread, owner, attribute = case
    if isinstance(owner, str):
        owner = sys.modules[owner]
    monkeypatch.setattr(owner, attribute, failing_after(3, getattr(owner, attribute),
                                                        f"injected {name} failure"))
    config = make_config(tmp_path, total_env_steps=10**9, eval_period=5)
    start = time.monotonic()
    with pytest.raises(WorkerError, match=rf"(?s)thread '{thread}' failed.*injected {name}"):
        agent_cls(config).run()
    assert time.monotonic() - start < 90
    assert dataclasses.asdict(config)  # the config itself was never at fault
