"""experiments/evaluate.py: the shipped Pong checkpoint under the paper's protocol, and one-line
errors."""

import csv

from tests.experiment_scripts import PONG, run_script


def run(*flags):
    return run_script("evaluate.py", *flags)


def test_the_shipped_pong_agent_wins_a_whole_game(tmp_path):
    out = tmp_path / "returns.csv"
    done = run(f"--checkpoint={PONG}", "--episodes=1", f"--out={out}")
    assert done.returncode == 0, done.stderr[-2000:]
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1 and float(rows[0]["return"]) > 0
    steps = int(rows[0]["steps"])  # a won game of Pong: 21 points of at least ~50 steps each
    assert 1_000 < steps <= 27_000 and f"agent steps a game: mean {steps:,}" in done.stdout
    score = float(rows[0]["return"])
    # one episode: the bootstrap interval of the mean is the score itself
    interval = f"[95% CI {score:.2f}, {score:.2f}]"
    assert f"1 episodes (sample): mean {score:.2f} {interval}" in done.stdout
    assert "Pong-v5" in done.stdout


def test_bad_flags_and_checkpoints_are_one_error_line(tmp_path):
    for flags, message in [
            ([], "--checkpoint must name a checkpoint folder"),
            ([f"--checkpoint={tmp_path}"], "manifest.json is missing"),
            ([f"--checkpoint={PONG}", "--episodes=0"], "episodes must be an integer >= 1"),
            ([f"--checkpoint={PONG}", "--agent=dqn"], "agent must be one of"),
            ([f"--checkpoint={PONG}", "--bootstrap_reps=0"], "--bootstrap_reps must be")]:
        done = run(*flags, f"--out={tmp_path / 'x.csv'}")
        assert done.returncode == 1, (flags, done.stderr[-2000:])
        assert done.stderr.strip().splitlines()[-1].startswith("error: "), done.stderr[-500:]
        assert message in done.stderr, (flags, done.stderr[-500:])
        assert not (tmp_path / "x.csv").exists()
