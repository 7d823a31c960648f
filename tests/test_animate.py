"""experiments/animate.py: a GIF of the shipped Pong checkpoint playing, and one-line errors."""

import os
import subprocess
import sys

from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "experiments", "animate.py")
PONG = "docs/results/impala_pong_cpu_group_norm_batch8/step_000000031248"


def animate(*flags):
    return subprocess.run([sys.executable, SCRIPT, *flags], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_the_gif_shows_every_nth_step_scaled_up(tmp_path):
    out = tmp_path / "pong.gif"
    done = animate(f"--checkpoint={PONG}", f"--out={out}", "--max_steps=40", "--every=4",
                   "--scale=2")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "10 images" in done.stdout and "first 40 steps of the game" in done.stdout
    gif = Image.open(out)
    assert gif.n_frames == 10 and gif.size == (168, 168)
    assert gif.info["duration"] == 270  # 4 steps x 4 frames at 60 Hz: real time, to 10 ms


def test_bad_flags_and_checkpoints_are_one_error_line(tmp_path):
    for flags, message in [
            (["--every=0"], "--every must be an integer >= 1, got 0"),
            ([], "--checkpoint must name a checkpoint folder"),
            ([f"--checkpoint={tmp_path}"], "manifest.json is missing"),
            (["--agent=dqn", f"--checkpoint={PONG}"], "agent must be one of")]:
        if flags and flags[0].startswith("--every"):
            flags = flags + [f"--checkpoint={PONG}"]
        done = animate(*flags, f"--out={tmp_path / 'x.gif'}")
        assert done.returncode == 1, (flags, done.stderr[-2000:])
        assert done.stderr.strip().splitlines()[-1].startswith("error: "), done.stderr[-500:]
        assert message in done.stderr, (flags, done.stderr[-500:])
        assert not (tmp_path / "x.gif").exists()
