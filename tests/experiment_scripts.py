"""Running a script of `experiments/` as a user does, for the tests of its command line."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The IMPALA Pong checkpoint shipped with the results (30-game protocol score +19.0).
PONG = "docs/results/impala_pong_cpu_group_norm_batch8/step_000000031248"


def run_script(script: str, *flags: str) -> subprocess.CompletedProcess:
    """`python experiments/<script> <flags>` from the repository root, its output captured."""
    return subprocess.run([sys.executable, os.path.join(ROOT, "experiments", script), *flags],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
