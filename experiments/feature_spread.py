"""How much an Ape-X network's features and Q-values differ between frames, by torso norm.

    python experiments/feature_spread.py \
        --flagfile=experiments/configs/apex_pong_cpu_group_norm.cfg --norms=none,group

Plays `--random_steps` steps of a uniform random policy in 8 evaluation envs of the config's
game, keeps every 10th batch of frames, and passes them through the config's Q-network at
initialization (seeds `--seeds`) once per torso norm in `--norms`, all else equal. For the
torso's output features and for the Q-values it prints, averaged over units: the spread
between frames (each unit's standard deviation over the frames), the unit's size (its root mean
square over the frames) and the spread's share of that size.

Why it matters: Adam moves every weight by about the learning rate whatever its gradient's
scale, so a step of the head changes the Q-values of two frames apart by about how far their
features are apart. Features that barely differ between frames (a constant background passed
through the convs) make every state look alike to the head, and its steps move all Q-values
together. This measures that spread at the start of learning; it does not measure learning.
"""

import dataclasses

import jax
import numpy as np
from absl import app, flags

from agents.registry import APEX
from agents.apex.builder import make_network
from agents.run.envs import actor_env_settings, env_info, random_policy_frames
from agents.run.flags import config_from_flags, define_flags
from networks import NORMS


def define_script_flags() -> None:
    """The config's flags and the script's; defined when run, so that importing `spread` (the
    tests do) adds no flags beside other scripts'."""
    define_flags(APEX.config)
    flags.DEFINE_list("norms", ["none", "group"], "torso norms compared (none, group, layer)")
    flags.DEFINE_list("seeds", ["0", "1", "2"], "initialization seeds, each reported")
    flags.DEFINE_integer("random_steps", 400, "random-policy steps played to collect frames")


def spread(x: np.ndarray) -> tuple[float, float, float]:
    """(between-frame std, RMS, std / RMS) of each unit of `x` `[frames, units]`, each averaged
    over units; a unit that is 0 on every frame counts as having no spread."""
    x = np.asarray(x, np.float64)
    std, rms = x.std(0), np.sqrt((x**2).mean(0))
    share = np.divide(std, rms, out=np.zeros_like(std), where=rms > 0)
    return float(std.mean()), float(rms.mean()), float(share.mean())


def features_and_q(network, params, frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The torso's output `[N, F]` (flattened) and the Q-values `[N, A]` for `frames`."""
    q, state = network.apply(params, frames, capture_intermediates=True)
    torso = next(v for k, v in state["intermediates"].items() if k.endswith("Torso_0"))
    features = np.asarray(torso["__call__"][0])
    return features.reshape(len(frames), -1), np.asarray(q)


def rows(config, frames: np.ndarray, info, norms, seeds) -> list[list[object]]:
    """One row per (norm, seed): spread, RMS and share for the features, then for Q."""
    table = []
    for norm in norms:
        network = make_network(dataclasses.replace(config, norm=norm), info)
        for seed in seeds:
            params = network.init(jax.random.PRNGKey(seed), frames[:1])
            features, q = features_and_q(network, params, frames)
            table.append([norm, seed, *spread(features), *spread(q)])
    return table


def main(argv):
    del argv
    if bad := [n for n in flags.FLAGS.norms if n not in NORMS]:
        raise SystemExit(f"error: --norms must name norms from {NORMS}, got {bad}")
    try:
        config = config_from_flags(APEX.config)
        settings = actor_env_settings(config, 0)
        info = env_info(settings)
        config.check_torso_fits(info)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    frames = random_policy_frames(settings.for_evaluation(8), info.num_actions,
                                  flags.FLAGS.random_steps, 10)
    seeds = [int(s) for s in flags.FLAGS.seeds]
    print(f"{config.env}: {len(frames)} frames of a random policy; torso {config.torso}, "
          f"network at initialization")
    header = ["norm", "seed", "features: spread", "size", "share", "Q: spread", "size", "share"]
    cells = [[f"{c:.4g}" if isinstance(c, float) else str(c) for c in r]
             for r in rows(config, frames, info, flags.FLAGS.norms, seeds)]
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    print("\n".join("| " + " | ".join(r) + " |" for r in cells))


if __name__ == "__main__":
    define_script_flags()
    app.run(main)
