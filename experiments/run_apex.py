"""Ape-X DQN on one host (Horgan et al. 2018, arXiv:1803.00933).

    python experiments/run_apex.py --flagfile=experiments/configs/apex_cartpole.cfg
    python experiments/run_apex.py --flagfile=experiments/configs/apex_atari.cfg --env=Pong-v5

Every field of agents.apex.config.ApexConfig is a flag. Invalid values stop the run before
anything starts; a failure in any thread stops it with that thread's traceback and exit code 1;
Ctrl-C stops it cleanly with a final checkpoint (resume with --resume).
"""

import signal
import sys

from absl import app, flags

from agents.apex.agent import ApexAgent
from agents.apex.config import ApexConfig
from agents.flags import config_from_flags, define_flags

define_flags(ApexConfig)


def _interrupt(signum, frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv):
    if len(argv) > 1:
        sys.exit(f"error: unexpected arguments {argv[1:]}")
    try:
        config = config_from_flags(ApexConfig)
    except ValueError as e:
        sys.exit(f"error: invalid flag value: {e}")
    # Ctrl-C and a scheduler's SIGTERM both stop the run cleanly with a final checkpoint, also
    # when the parent process started this one with SIGINT ignored.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    summary = ApexAgent(config).run()
    return 0 if not summary["interrupted"] else 130


if __name__ == "__main__":
    app.run(main)
