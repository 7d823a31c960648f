"""Connecting a run to Ray: a loopback-only local cluster, or a running cluster.

`connect("local")` starts a cluster on this host whose services listen on 127.0.0.1 only, with
Ray's token authentication on (Ray's default for a local cluster, `RAY_AUTH_MODE=token`) and a
random token kept in this process's environment (`RAY_AUTH_TOKEN`, inherited by the cluster's
processes) unless the user provides one, so nothing is written to the home folder.
Any other address joins a cluster started with `ray start` (see the README); that cluster's
`RAY_AUTH_MODE` and token are the user's.
"""

import logging
import os
import secrets
import threading
from typing import Callable

import ray
from ray._private import ray_constants

from agents.run.waits import connect_within

# ray.init replaces SIGTERM's handler when called on the main thread; it runs on another one
# here (`connect_within`), so this process's handler (`agents.run.interrupts`) stays, and Ray's
# warning that it did not set its own is not news.
logging.getLogger("ray._private.worker").addFilter(
    lambda record: not record.getMessage().startswith("SIGTERM handler is not set"))

LOCAL = "local"
LOOPBACK = "127.0.0.1"


def connect(address: str, object_store_mb: int = 0, temp_dir: str = "",
            num_cpus: int | None = None, timeout_s: float = 60.0) -> bool:
    """Connects to Ray at `address` ("local" starts a cluster here).

    Args:
      address: "local", "auto" or a cluster's host:port.
      object_store_mb: the local cluster's object store in MiB (0: Ray's default).
      temp_dir: the local cluster's session folder ("" : Ray's default).
      num_cpus: the local cluster's CPUs (None: this host's).
      timeout_s: how long to wait for the cluster (`connect_timeout_s`); Ctrl-C during the
        wait stops a cluster this call started.

    Returns:
      True if this call connected (the caller disconnects), False if Ray was already up in
      this process (a notebook's or a test's cluster, left to its owner).
    """
    if ray.is_initialized():
        return False
    if address != LOCAL:
        # Ray names the address it rewrote (127.0.0.1 becomes this host's interface address)
        # in its own log lines; the message names the one the user gave.
        connect_within(lambda: ray.init(address=address, log_to_driver=True), timeout_s,
                       f"the Ray cluster at ray_address={address}",
                       "is a cluster running there (`ray start --head`) and reachable?")
        return True
    if not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")):
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    # With Ray's multi-host support off, this node's IP is the loopback address, so the GCS,
    # raylet, object manager and workers listen there only (Ray reads it at import time, and
    # at call time from this attribute). `disconnect` turns it back on.
    os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    connect_within(_start_local(
        num_cpus=num_cpus, include_dashboard=False, log_to_driver=True,
        object_store_memory=object_store_mb * 2**20 or None, _temp_dir=temp_dir or None),
        timeout_s, "the local Ray cluster (ray_address=local)",
        "is this host short of memory or CPU?", undo=lambda _: disconnect())
    node_ip, auth = ray.util.get_node_ip_address(), os.environ.get("RAY_AUTH_MODE")
    if node_ip != LOOPBACK or auth != "token":
        disconnect()
        raise RuntimeError(f"the local Ray cluster came up on {node_ip} with RAY_AUTH_MODE="
                           f"{auth}; it must be {LOOPBACK} with token (leave RAY_AUTH_MODE "
                           "unset or set it to token before Python starts)")
    return True


# Ray starts a local cluster's processes to die with the thread that started them (Linux's
# PR_SET_PDEATHSIG follows the parent thread, not the process), so that thread must live as
# long as the cluster: it waits on this event, which `disconnect` sets.
_local_keeper = threading.Event()


def _start_local(**init_kwargs) -> Callable[[], None]:
    """A call for `connect_within` that starts the local cluster in a thread of its own, kept
    alive until `disconnect`, and returns once `ray.init` has (raising what it raised)."""
    started, box = threading.Event(), {}
    _local_keeper.clear()

    def keeper():
        try:
            ray.init(**init_kwargs)
        except BaseException as e:  # noqa: BLE001  (raised again by the waiting call)
            box["error"] = e
        finally:
            started.set()
        _local_keeper.wait()

    threading.Thread(target=keeper, name="ray local cluster", daemon=True).start()

    def wait_started():
        started.wait()
        if "error" in box:
            raise box["error"]

    return wait_started


def disconnect() -> None:
    """Disconnects; a local cluster's processes all exit."""
    ray.shutdown()
    _local_keeper.set()
    if os.environ.get(ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR) == "0":
        del os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR]
        ray_constants.ENABLE_RAY_CLUSTER = not ray_constants.IS_WINDOWS_OR_OSX
