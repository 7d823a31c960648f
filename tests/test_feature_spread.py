"""experiments/feature_spread.py: the spread statistic by hand, the table on real Pong frames,
and one-line errors."""

import numpy as np

from experiments.feature_spread import spread
from tests.experiment_scripts import run_script

CONFIG = "--flagfile=experiments/configs/apex_pong_cpu_group_norm.cfg"


def test_spread_by_hand():
    # unit 0: 1, 3 -> std 1, rms sqrt(5); unit 1: 2, 2 -> std 0, rms 2; unit 2: always 0
    x = np.array([[1.0, 2.0, 0.0], [3.0, 2.0, 0.0]], np.float32)
    std, rms, share = spread(x)
    assert np.isclose(std, (1 + 0 + 0) / 3)
    assert np.isclose(rms, (np.sqrt(5) + 2 + 0) / 3)
    assert np.isclose(share, (1 / np.sqrt(5) + 0 + 0) / 3)


def test_a_table_row_per_norm_and_seed_on_pong_frames():
    done = run_script("feature_spread.py", CONFIG, "--random_steps=20", "--seeds=0,1",
                      "--norms=none,group")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Pong-v5: 16 frames of a random policy" in done.stdout
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines()
            if line.startswith("| none") or line.startswith("| group")]
    assert [(r[0].strip(), r[1].strip()) for r in rows] == [
        ("none", "0"), ("none", "1"), ("group", "0"), ("group", "1")]
    for row in rows:
        values = [float(c) for c in row[2:]]
        assert all(v >= 0 for v in values) and values[1] > 0 and values[4] > 0
        assert values[2] <= 1 and values[5] <= 1  # a unit's std never exceeds its RMS


def test_bad_flags_are_one_error_line():
    for flags, message in [(["--norms=batch"], "--norms must name norms from"),
                           (["--env=CartPole-v1"], "--torso=impala_shallow does not fit this env")]:
        done = run_script("feature_spread.py", CONFIG, *flags)
        assert done.returncode == 1, (flags, done.stderr[-2000:])
        assert done.stderr.strip().splitlines()[-1].startswith("error: "), done.stderr[-500:]
        assert message in done.stderr, (flags, done.stderr[-500:])
