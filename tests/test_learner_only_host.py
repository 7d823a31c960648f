"""The learners and the GPU check import on a host with only the accelerator stack (no envpool,
TensorBoard writer, plotting, Ray or SciPy), as on the GPU machines' image."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ABSENT = ["envpool", "tensorboardX", "matplotlib", "ray", "scipy", "gymnasium"]


def test_learners_and_gpu_check_import_without_the_actor_side_packages():
    code = (f"import sys\nfor name in {ABSENT!r}:\n    sys.modules[name] = None\n"
            "sys.path.insert(0, 'benchmarks')\n"
            "import agents.apex.agent, agents.impala.agent, agents.registry, bench_gpu\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
