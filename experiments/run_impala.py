"""IMPALA on one host (Espeholt et al. 2018, arXiv:1802.01561).

    python experiments/run_impala.py --flagfile=experiments/configs/impala_cartpole.cfg
    python experiments/run_impala.py --flagfile=experiments/configs/impala_atari.cfg --norm=group

Every field of agents.impala.config.ImpalaConfig is a flag. Invalid values stop the run before
anything starts; a failure in any thread stops it with that thread's traceback and exit code 1;
Ctrl-C stops it cleanly with a final checkpoint (resume with --resume).
"""

if __name__ == "__main__":  # first: glibc reads its malloc settings when a process starts
    from agents.run.allocator import restart_keeping_freed_memory

    restart_keeping_freed_memory()

from agents.run.interrupts import GUARD

GUARD.install()  # first: a Ctrl-C while JAX and the agent load ends the process (exit 130)

from absl import app  # noqa: E402

from agents.impala.agent import ImpalaAgent  # noqa: E402
from agents.impala.config import ImpalaConfig  # noqa: E402
from agents.run.launch import make_main, parse_flags  # noqa: E402

main = make_main(ImpalaConfig, ImpalaAgent)

if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
