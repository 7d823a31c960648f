"""experiments/animate.py: a GIF of the shipped Pong checkpoint playing, and one-line errors."""

from PIL import Image

from tests.experiment_scripts import PONG, run_script


def animate(*flags):
    return run_script("animate.py", *flags)


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
