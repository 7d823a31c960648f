"""Waiting on a peer or a service at the start of a run: bounded in time, ended by Ctrl-C.

The calls that join a Ray cluster or the other jax.distributed processes block in C++: Ray
retries an address where nothing listens without end, and jax.distributed waits for a missing
peer for minutes and then aborts the process with a C++ stack. Python runs a signal handler
only between bytecodes of the main thread, so a Ctrl-C during such a call did nothing either.

`connect_within` runs the call in a daemon thread and waits for it in short slices on the
main thread: a signal's `KeyboardInterrupt` lands there, and when `connect_timeout_s` has
passed the wait ends with `ConnectTimeout`, an error naming the flag. A call that never
returns is left behind in its daemon thread, which does not keep the process alive.
"""

import threading
import time
from typing import Any, Callable

FLAG = "connect_timeout_s"


class ConnectTimeout(TimeoutError):
    """A peer or service did not answer within `connect_timeout_s` (the launcher prints it as
    one line: the user fixes the address or starts the peer)."""


def connect_within(call: Callable[[], Any], timeout_s: float, what: str, hint: str = "",
                   undo: Callable[[Any], None] | None = None) -> Any:
    """Returns `call()` (or raises its error) if it finishes within `timeout_s` seconds.

    Args:
      call: the blocking connect.
      timeout_s: the run's `connect_timeout_s`.
      what: what is waited for, for the message ("the Ray cluster at 10.0.0.1:6379").
      hint: what to check, appended to the message.
      undo: called with the result of a call that finished after a Ctrl-C (e.g. stops a Ray
        cluster it started), before the `KeyboardInterrupt` goes on.

    Raises:
      ConnectTimeout: the call did not finish in time.
      KeyboardInterrupt: a signal came while waiting. With `undo`, the call is given the rest
        of the time to finish, so that `undo` can stop what it started; a second signal stops
        waiting.
    """
    done, box = threading.Event(), {}

    def target():
        try:
            box["result"] = call()
        except BaseException as e:  # noqa: BLE001  (raised again in the waiting thread)
            box["error"] = e
        finally:
            done.set()

    threading.Thread(target=target, name=f"connect: {what}", daemon=True).start()
    deadline, interrupted = time.monotonic() + timeout_s, None
    while True:
        try:  # the whole wait: a signal can land between any two bytecodes of it
            while not done.is_set() and time.monotonic() < deadline:
                done.wait(0.1)
            break
        except KeyboardInterrupt as e:
            if interrupted is not None or undo is None:
                interrupted = interrupted or e
                break  # nothing to undo, or a second signal: leave without waiting for the call
            interrupted = e
    if interrupted is not None:
        if done.is_set() and "result" in box and undo is not None:
            undo(box["result"])
        raise interrupted
    if not done.is_set():
        raise ConnectTimeout(f"{what} did not answer within {timeout_s:g} s (--{FLAG})"
                             + (f"; {hint}" if hint else ""))
    if "error" in box:
        raise box["error"]
    return box["result"]
