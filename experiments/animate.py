"""A trained Atari agent playing, as an animated GIF made from one of its checkpoints.

The game is played as the papers evaluate (`agents.registry.paper_protocol`: up to 30 no-op
starts, a whole game, no FIRE pressed for the agent, the agent's own action rule), on the
protocol's first evaluation envs. The GIF shows what the agent sees: the newest 84x84 grayscale
frame of each observation, scaled up, one image per `--every` agent steps (4 emulator frames
each), played back in real time, with the score so far.

    python experiments/animate.py --agent=impala \
        --checkpoint=docs/results/impala_pong_cpu_group_norm_batch8/step_000000031248 \
        --out=docs/results/impala_pong_cpu_group_norm_batch8/pong.gif --max_steps=900
"""

import numpy as np
from absl import app, flags
from PIL import Image, ImageDraw

from agents import registry, trained
from agents.run import checkpoint
from agents.run.envs import make_env
from agents.run.evaluation import FRAME_SKIP, select_actions
from agents.run.protocol_play import protocol_envs

flags.DEFINE_string("agent", "impala", f"the checkpoint's agent: one of {registry.names()}")
flags.DEFINE_string("checkpoint", None, "a checkpoint folder (runs/<run>/checkpoints/step_N)")
flags.DEFINE_string("out", "agent.gif", "the GIF to write")
flags.DEFINE_integer("max_steps", 900, "agent steps shown at most (900: a minute of play)")
flags.DEFINE_integer("every", 2, "one image per this many agent steps")
flags.DEFINE_integer("scale", 3, "each 84x84 frame is scaled up this many times")
FLAGS = flags.FLAGS

EMULATOR_HZ = 60  # Atari frames per second


def check_flags() -> None:
    if not FLAGS.checkpoint:
        raise ValueError("--checkpoint must name a checkpoint folder (runs/<run>/checkpoints/"
                         "step_N)")
    for name in ("max_steps", "every", "scale"):
        if FLAGS[name].value < 1:
            raise ValueError(f"--{name} must be an integer >= 1, got {FLAGS[name].value}")


def play(agent: trained.TrainedAgent, max_steps: int, every: int
         ) -> tuple[list[np.ndarray], list[float], float, bool]:
    """Frames `[84, 84]` uint8 every `every` agent steps, the score at each, the final score
    and whether the game ended within `max_steps`."""
    protocol = registry.paper_protocol(agent.agent, episodes=1)
    settings, rng = protocol_envs(agent.config, protocol)
    env = make_env(settings)
    frames, scores, score, ended = [], [], 0.0, False
    try:
        obs, _ = env.reset()
        for step in range(max_steps):
            actions = select_actions(agent.scores(obs), protocol.action_rule, protocol.epsilon,
                                     rng)
            obs, reward, terminated, truncated, _ = env.step(actions)
            score += float(reward[0])
            if step % every == 0:
                frames.append(obs[0, -1].copy())  # the newest frame of the stack
                scores.append(score)
            if terminated[0] or truncated[0]:
                ended = True
                break
    finally:
        env.close()
    return frames, scores, score, ended


def to_images(frames: list[np.ndarray], scores: list[float], scale: int) -> list[Image.Image]:
    images = []
    for frame, score in zip(frames, scores):
        image = Image.fromarray(frame).resize((frame.shape[1] * scale, frame.shape[0] * scale),
                                              Image.NEAREST).convert("RGB")
        ImageDraw.Draw(image).text((4, 2), f"score {score:+.0f}", fill=(255, 64, 64))
        images.append(image)
    return images


def load() -> trained.TrainedAgent:
    """The checkpoint's agent; one `error:` line and exit status 1 for bad flags or a
    checkpoint that is missing, damaged, another agent's or not of an Atari game."""
    try:
        check_flags()
        agent = trained.load(FLAGS.agent, FLAGS.checkpoint)
        if not agent.info.is_atari:
            raise ValueError(f"--checkpoint: {FLAGS.checkpoint} is a run on {agent.config.env}; "
                             "the animation is of Atari games")
    except (checkpoint.CheckpointError, checkpoint.CheckpointMismatch, ValueError) as e:
        raise SystemExit(f"error: {e}") from None
    return agent


def main(argv):
    del argv
    agent = load()
    frames, scores, score, ended = play(agent, FLAGS.max_steps, FLAGS.every)
    images = to_images(frames, scores, FLAGS.scale)
    step_ms = int(round(1000 * FRAME_SKIP * FLAGS.every / EMULATOR_HZ, -1))  # GIFs count 10 ms
    images[0].save(FLAGS.out, save_all=True, append_images=images[1:], duration=step_ms,
                   loop=0, optimize=True)
    steps = len(frames) * FLAGS.every
    print(f"{FLAGS.out}: {len(images)} images, about {steps:,} agent steps of "
          f"{agent.config.env}, score {score:+.0f} "
          f"({'the whole game' if ended else f'first {FLAGS.max_steps:,} steps of the game'})")


if __name__ == "__main__":
    app.run(main)
