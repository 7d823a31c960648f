"""Config flags: every field is a documented flag, flagfiles parse, bad values are rejected."""

import dataclasses
import os

import pytest
from absl import flags

from agents.apex.config import ApexConfig
from agents.impala.config import ImpalaConfig
from agents.run.flags import config_from_flagfile, config_from_flags, define_flags

CONFIGS = os.path.join(os.path.dirname(__file__), "..", "..", "experiments", "configs")


@pytest.mark.parametrize("cls", [ApexConfig, ImpalaConfig])
def test_every_field_is_a_flag_with_its_docstring_help(cls):
    flag_values = flags.FlagValues()
    define_flags(cls, flag_values)
    for field in dataclasses.fields(cls):
        flag = flag_values[field.name]
        assert flag.help and flag.help != field.name, field.name
    assert config_from_flags(cls, flag_values) == cls()


def load(name):
    cls = ApexConfig if name.startswith("apex") else ImpalaConfig
    return config_from_flagfile(cls, os.path.join(CONFIGS, f"{name}.cfg"))


@pytest.mark.parametrize("name", sorted(f[:-4] for f in os.listdir(CONFIGS) if f.endswith(".cfg")))
def test_flagfiles_parse_into_valid_configs(name):
    config = load(name)
    expected = ("CartPole-v1" if "cartpole" in name else
                "LunarLander-v2" if "lunarlander" in name else "Pong-v5")
    assert config.env == expected
    if name == "apex_atari_ray":  # the paper's settings, from the flagfile it includes
        assert (config.backend, config.num_envs, config.replay_shards) == ("ray", 360, 4)
        assert (config.batch_size, config.replay_capacity) == (512, 2_000_000)


def test_the_group_norm_pong_config_differs_from_its_base_in_the_norm_only():
    base, group = load("impala_pong_cpu"), load("impala_pong_cpu_group_norm")
    assert (group.norm, group.num_groups) == ("group", 8) and base.norm == "none"
    assert dataclasses.replace(group, norm=base.norm, num_groups=base.num_groups,
                               run_dir=base.run_dir) == base


def test_paper_defaults():
    apex = ApexConfig()
    assert (apex.n_step, apex.priority_exponent, apex.importance_exponent, apex.batch_size,
            apex.target_update_period, apex.max_grad_norm) == (3, 0.6, 0.4, 512, 2500, 40.0)
    assert apex.learning_rate == pytest.approx(0.00025 / 4)
    impala = ImpalaConfig()
    assert (impala.unroll_length, impala.batch_size, impala.baseline_cost, impala.entropy_cost,
            impala.learning_rate, impala.rms_decay, impala.optimizer_epsilon) == (
        20, 32, 0.5, 0.01, 0.0006, 0.99, 0.01)


@pytest.mark.parametrize("cls,kwargs,match", [
    (ApexConfig, dict(batch_size=0), "batch_size"),
    (ApexConfig, dict(min_replay_size=10, replay_capacity=5), "min_replay_size"),
    (ApexConfig, dict(loss="l1"), "loss must be one of"),
    (ApexConfig, dict(backend="mpi"), r"backend must be one of \('threads', 'ray'\)"),
    (ApexConfig, dict(replay_shards=2), "replay_shards=2 needs backend=ray"),
    (ApexConfig, dict(backend="ray", num_actors=2, replay_shards=3), "replay_shards"),
    (ApexConfig, dict(backend="ray", ray_cpus_per_actor=0), "ray_cpus_per_actor"),
    (ApexConfig, dict(backend="ray", ray_samples_in_flight=0),
     "ray_samples_in_flight must be >= 1, got 0"),
    (ImpalaConfig, dict(c_bar=2.0), "c_bar"),
    (ImpalaConfig, dict(epsilon_correction=0.0), "epsilon_correction must be > 0, got 0.0"),
    (ImpalaConfig, dict(reduction="max"), "reduction"),
    (ImpalaConfig, dict(envs_per_actor=4, actor_batch_size=4), "actor_batch_size"),
    (ImpalaConfig, dict(repeat_action_probability=2.0), "repeat_action_probability"),
])
def test_invalid_values_raise_value_errors_naming_the_field(cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cls(**kwargs)
