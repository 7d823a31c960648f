"""The command-line entry of every agent: flags from its config, clean signals, exit codes.

Invalid or unknown flags stop before anything starts (exit status 1 with the message); a
failure in any thread stops the run with that thread's traceback (exit status 1); Ctrl-C or
SIGTERM stop it cleanly with a final checkpoint (exit status 130).
"""

import signal
import sys
from typing import Callable

from agents import distributed
from agents.flags import config_from_flags, define_flags


def _interrupt(signum, frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


def make_main(config_cls: type, agent_cls: type) -> Callable[[list[str]], int]:
    """Defines `config_cls`'s flags and returns an `absl.app.run` main that runs `agent_cls`."""
    define_flags(config_cls)

    def main(argv: list[str]) -> int:
        if len(argv) > 1:
            sys.exit(f"error: unexpected arguments {argv[1:]}")
        try:
            config = config_from_flags(config_cls)
        except ValueError as e:
            sys.exit(f"error: invalid flag value: {e}")
        if getattr(config, "num_processes", 1) > 1:  # before anything else touches JAX
            distributed.initialize(config.num_processes, config.process_id,
                                   config.coordinator_address)
        # Also when the parent started this process with SIGINT ignored (a background job).
        signal.signal(signal.SIGINT, _interrupt)
        signal.signal(signal.SIGTERM, _interrupt)
        summary = agent_cls(config).run()
        return 130 if summary["interrupted"] else 0

    return main
