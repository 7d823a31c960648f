"""What a user sees for a mistake or a damaged file: one clear line and the documented status.

Malformed checkpoint files, inspect_checkpoint.py on each kind of run, Atari-only flags and a
conv torso given for CartPole, a `checkpoints` that is a file, a folder that is not a run's, and
unknown flags (exit 2, as README says).
"""

import dataclasses
import json
import os
import re
import subprocess
import sys

import jax
import numpy as np
import pytest

from agents.run import checkpoint, run_folder
from agents.run.checkpoint import CheckpointError
from agents.run.envs import ATARI_ONLY, actor_env_settings, env_info
from agents.run.run_folder import UsageError
from tests.agents.fault_injection import ROOT, apex_config, impala_config, launch, own_lines


def one_error_line(result, status: int = 1) -> str:
    lines = own_lines(result.stderr)
    assert result.returncode == status, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr and "FATAL" not in result.stderr
    return lines[0]


def run_checkpoint(run_dir, agent: str = "impala", meta: dict | None = None) -> str:
    """A checkpoint of a CartPole run of `agent` with freshly initialized parameters, as
    `save_run` lays it out (`meta` replaces its meta.json), without running anything."""
    if agent == "impala":
        from agents.impala.builder import make_network
        config = impala_config(run_dir)
    else:
        from agents.apex.builder import make_network
        config = apex_config(run_dir)
    info = env_info(actor_env_settings(config, 0))
    params = make_network(config, info).init(jax.random.PRNGKey(0),
                                             np.zeros((1,) + info.obs_shape, info.obs_dtype))
    run_folder._append_history(str(run_dir), config, None, {})
    meta = dict(config=dataclasses.asdict(config), counters=dict(env_steps=100),
                updates=5) if meta is None else meta
    return checkpoint.save_checkpoint(os.path.join(run_dir, "checkpoints"), 5,
                                      {"params": params}, meta)


def rewrite(path: str, name: str, text: str) -> None:
    """Replaces `name` in checkpoint `path` and writes a manifest that matches it, as a
    hand-edited checkpoint would be."""
    with open(os.path.join(path, name), "w") as f:
        f.write(text)
    if name != checkpoint.MANIFEST:
        os.remove(os.path.join(path, checkpoint.MANIFEST))
        checkpoint._write_manifest(path)


# ------------------------------------------------------------------ damaged checkpoint files

MANIFESTS = [('{"files": []}', 'not an object with a "files" table'),
             ('[1, 2]', 'not an object with a "files" table'),
             ('{"files": {"meta.json": {}}}', "its entry for meta.json is not {bytes: <size>"),
             ('{"files": {"meta.json": 5}}', "its entry for meta.json is not {bytes: <size>"),
             ('{"files": {"../../x": {"bytes": 1, "sha256": "' + "0" * 64 + '"}}}',
              "names '../../x', not a file of the checkpoint's folder")]


@pytest.mark.parametrize("text,message", MANIFESTS, ids=[t for t, _ in MANIFESTS])
def test_a_malformed_manifest_is_a_damaged_checkpoint(text, message, tmp_path):
    path = checkpoint.save_checkpoint(str(tmp_path), 3, {"w": np.zeros(2)}, {})
    rewrite(path, checkpoint.MANIFEST, text)
    with pytest.raises(CheckpointError,
                       match=re.escape(f"{path}: manifest.json is unreadable ({message}")):
        checkpoint.verify(path)
    printed = []  # and a resume moves it aside, as any damaged checkpoint
    assert checkpoint.find_resumable(str(tmp_path), printed.append) is None
    assert os.path.isdir(path + ".corrupt") and "is incomplete or corrupt" in printed[0]


METAS = [("[]", "meta.json holds list, not an object"),
         ('{"updates": 5, "counters": {"env_steps": 1}}', "meta.json has no config object"),
         ('{"updates": 5, "config": {}}', "meta.json has no counters object"),
         ('{"updates": "5", "config": {}, "counters": {"env_steps": 1}}',
          "meta.json has no updates integer"),
         ('{"updates": 5, "config": {}, "counters": {}}',
          "meta.json's counters have no integer env_steps")]


@pytest.mark.parametrize("text,message", METAS, ids=[t for t, _ in METAS])
def test_a_malformed_meta_stops_a_resume_and_a_load_with_its_name(text, message, tmp_path):
    path = run_checkpoint(tmp_path)
    rewrite(path, "meta.json", text)
    config = dataclasses.replace(impala_config(tmp_path), resume=True)
    with pytest.raises(CheckpointError, match=f"{path}: {message}"):
        run_folder.prepare_run_folder(config, print)
    from agents import trained
    with pytest.raises(CheckpointError, match=f"{path}: {message}"):
        trained.load("impala", path)


# --------------------------------------------------------------------- inspect_checkpoint.py

def inspect(run_dir) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "experiments/inspect_checkpoint.py", f"--run_dir={run_dir}",
         "--env=CartPole-v1", "--torso=mlp", "--random_steps=20"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_inspect_checkpoint_reads_an_mlp_run(tmp_path):
    """IMPALA on CartPole: the mlp torso's last layer stands for the conv torsos' dense one."""
    path = run_checkpoint(tmp_path)
    result = inspect(tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"16 frames; checkpoint {path} after 5 updates, 100 agent steps"  # 8 envs
    assert lines[1].startswith("initial: dense units never active ")
    assert lines[2].startswith("trained: dense units never active ")
    assert "(uniform 0.693)" in lines[2]  # two actions


def test_inspect_checkpoint_names_an_apex_run(tmp_path):
    path = run_checkpoint(tmp_path, "apex")
    assert one_error_line(inspect(tmp_path)) == (
        f"error: {path} is an Ape-X checkpoint (its config has actor_update_period); "
        "inspect_checkpoint.py reads IMPALA runs (a policy and a value); load an Ape-X one "
        "with agents.trained.load('apex', path)")


def test_inspect_checkpoint_names_a_damaged_checkpoint(tmp_path):
    path = run_checkpoint(tmp_path)
    with open(os.path.join(path, "learner.msgpack"), "r+b") as f:
        f.truncate(10)
    line = one_error_line(inspect(tmp_path))
    assert line.startswith(f"error: no complete checkpoint in {tmp_path}/checkpoints: "
                           f"checkpoint {os.path.basename(path)} is incomplete or corrupt: "
                           f"{path}: learner.msgpack has 10 bytes"), line
    assert os.path.isdir(path)  # looked at, not moved


# ------------------------------------------------------------------------ flags for CartPole

ATARI_VALUES = dict(episodic_life=False, fire_reset=True, reward_clip=False, noop_max=5,
                    repeat_action_probability=0.25, max_episode_frames=10_000)


@pytest.mark.parametrize("name", ATARI_ONLY)
def test_an_atari_only_setting_for_cartpole_is_refused(name, tmp_path):
    config = impala_config(tmp_path, **{name: ATARI_VALUES[name]})
    with pytest.raises(ValueError, match=f"^--{name}={ATARI_VALUES[name]}: Atari-only, and env "
                                         "CartPole-v1 is not an Atari game"):
        config.check_host()


def test_atari_settings_at_their_defaults_and_on_atari_are_accepted(tmp_path):
    impala_config(tmp_path).check_host()
    actor_env_settings(apex_config(tmp_path, env="Pong-v5", torso="nature", noop_max=5), 0)


@pytest.mark.parametrize("agent,torso", [("impala", "impala_shallow"), ("apex", "nature")])
def test_a_conv_torso_for_cartpole_names_the_flag(agent, torso, tmp_path):
    config = (impala_config if agent == "impala" else apex_config)(tmp_path, torso=torso)
    with pytest.raises(ValueError, match=f"^--torso={torso} does not fit this env: it gives "
                                         r"observations of shape \(4,\).*use --torso=mlp$"):
        config.check_host()


def test_an_mlp_torso_for_atari_names_the_flag(tmp_path):
    with pytest.raises(ValueError, match="--torso=mlp does not fit this env: it gives frame "
                                         "stacks"):
        apex_config(tmp_path, env="Pong-v5", torso="mlp").check_host()


# ------------------------------------------------------------------------------ run folders

def test_a_folder_that_is_not_a_run_is_refused_not_moved(tmp_path):
    (tmp_path / "config.json").write_text('{"someone": "else"}')
    (tmp_path / "notes.txt").write_text("mine")
    for resume in (False, True):
        with pytest.raises(UsageError, match=f"run_dir '{tmp_path}' holds a config.json but no "
                                             "config_history.jsonl or checkpoints/.*another "
                                             "--run_dir"):
            run_folder.prepare_run_folder(impala_config(tmp_path, resume=resume), print)
    assert sorted(os.listdir(tmp_path)) == ["config.json", "notes.txt"]
    assert json.loads((tmp_path / "config.json").read_text()) == {"someone": "else"}


def test_a_run_folder_of_these_agents_is_still_moved_aside(tmp_path):
    run_folder.prepare_run_folder(impala_config(tmp_path), print)
    run_folder.prepare_run_folder(impala_config(tmp_path), print)
    assert os.listdir(tmp_path / "previous")


# ----------------------------------------------------------------------------- launched runs

# The checks above as a user meets them (each check of the host takes the same path), and an
# unknown flag: exit 2, as README says (absl's own parser exits 1).
LAUNCHED = [
    ("apex", ["--torso=nature"], 1, "error: --torso=nature does not fit this env"),
    ("impala", ["--noop_maxx=3"], 2, "error: Unknown command line flag 'noop_maxx'. Did you "
                                     "mean: noop_max ?"),
]


@pytest.mark.parametrize("agent,flags,status,message", LAUNCHED,
                         ids=[" ".join(f) for _, f, _, _ in LAUNCHED])
def test_a_launched_mistake_is_one_line_and_its_status(agent, flags, status, message, tmp_path):
    line = one_error_line(launch(agent, *flags, f"--run_dir={tmp_path / 'run'}"), status)
    assert line.startswith(message), line
    assert not (tmp_path / "run").exists()


def test_a_checkpoints_file_stops_a_launched_run_before_it_starts(tmp_path):
    (tmp_path / "checkpoints").write_text("a file")
    line = one_error_line(launch("impala", f"--run_dir={tmp_path}"))
    assert line.startswith(f"error: refusing to write {tmp_path}/checkpoints: it is a file, "
                           "not a folder"), line
    assert sorted(os.listdir(tmp_path)) == ["checkpoints"]
