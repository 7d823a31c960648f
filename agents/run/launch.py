"""The command-line entry of every agent: flags from its config, clean signals, exit codes.

Every way a run can end is an exit status with a message, never an abort:
  0    the run ended (budget, solved line) with its final checkpoint;
  1    a usage error, printed alone before anything starts (an invalid flag value, an unknown
       env, a device that does not exist, an unusable run_dir, a resume whose checkpoint does
       not fit the config); or a failure in any thread, printed with that thread's traceback;
       or a final checkpoint that could not be written; or training that diverged (a loss
       or parameters no longer finite: one line, the newest finite checkpoint kept);
  2    unknown flags or stray arguments (`parse_flags`, given to `app.run` by the launchers);
  130  stopped by Ctrl-C or SIGTERM: with a final checkpoint once training started, before
       that with nothing to save; a signal after the final checkpoint changes nothing
       (`agents.run.interrupts`).
"""

import os
import sys
import threading
import traceback
from typing import Callable

from agents.run.checkpoint import CheckpointError, CheckpointMismatch
from absl import flags

from agents.run.config_groups import MultiProcessConfig
from agents.run.divergence import Diverged
from agents.run.files import UnsafePath
from agents.run.flags import config_from_flags, define_flags
from agents.run.interrupts import GUARD, LOADING, STARTING
from agents.run.logger import MetricsError
from agents.run.run_folder import UsageError
from agents.run.waits import ConnectTimeout

# What a user can cause and fix; anything else is a bug and keeps its traceback.
_USAGE_ERRORS = (UsageError, CheckpointError, CheckpointMismatch, ConnectTimeout, MetricsError,
                 UnsafePath, Diverged)


def _exit(code: int) -> None:
    """Leaves with `code`. If worker threads are still alive (a failure that left some stuck in
    envpool), skips interpreter finalization, which would abort the process under them."""
    sys.stdout.flush()
    sys.stderr.flush()
    if threading.active_count() > 1:
        os._exit(code)
    sys.exit(code)


def parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing (`app.run(main, flags_parser=parse_flags)`) with this module's exit
    statuses: an unknown flag is 2, a value absl cannot parse 1, each with one `error:` line
    (absl's own parser exits 1 for both, after a `FATAL` line)."""
    try:
        return flags.FLAGS(argv)
    except flags.UnrecognizedFlagError as e:
        message = " ".join(str(e).split())
        print(f"error: {message} (--helpfull lists the flags)", file=sys.stderr)
        sys.exit(2)
    except flags.Error as e:
        print(f"error: invalid flag value: {' '.join(str(e).split())}", file=sys.stderr)
        sys.exit(1)


def make_main(config_cls: type, agent_cls: type) -> Callable[[list[str]], int]:
    """Defines `config_cls`'s flags and returns an `absl.app.run` main that runs `agent_cls`."""
    define_flags(config_cls)

    def main(argv: list[str]) -> None:
        if not GUARD.installed:  # a script that did not install it before its imports
            GUARD.install()
        # The imports are done: from here a signal raises, and is kept until a run acts on it.
        GUARD.starting()
        if len(argv) > 1:
            print(f"error: unexpected arguments {argv[1:]}", file=sys.stderr)
            _exit(2)
        try:
            try:
                config = config_from_flags(config_cls)
            except ValueError as e:
                print(f"error: invalid flag value: {e}", file=sys.stderr)
                _exit(1)
            if isinstance(config, MultiProcessConfig):  # before anything else touches JAX
                config.initialize_processes()
            config.check_host()
            summary = agent_cls(config).run()
        except SystemExit:
            raise
        except BaseException as e:  # noqa: BLE001
            if GUARD.state in (STARTING, LOADING) and (GUARD.pending or isinstance(
                    e, KeyboardInterrupt)):
                # Also an ImportError or the like that a library made of the KeyboardInterrupt.
                print(f"interrupted ({GUARD.pending or 'SIGINT'}) before the run started; "
                      "nothing to save", file=sys.stderr)
                _exit(130)
            # A ValueError before the run is under way comes from a check of the host or of the
            # agent being built (an unknown env, a device that does not exist): a usage error;
            # an OSError then is the run folder's (a full disk at --resume): one line too.
            if isinstance(e, _USAGE_ERRORS) or (isinstance(e, (ValueError, OSError))
                                                and GUARD.state == STARTING):
                print(f"error: {e}", file=sys.stderr)
            else:  # a bug, or a thread's failure: with its traceback
                traceback.print_exc()
            _exit(1)
        # The final checkpoint is written: a signal from here on is ignored (`GUARD.idle`).
        if summary.get("checkpoint_failed"):
            _exit(1)
        if isinstance(config, MultiProcessConfig):
            config.shutdown_processes()
        _exit(130 if summary["interrupted"] else 0)

    return main
