"""Connecting a run to Ray: a loopback-only local cluster, or a running cluster.

`connect("local")` starts a cluster on this host whose services listen on 127.0.0.1 only, with
Ray's token authentication on (Ray's default for a local cluster, `RAY_AUTH_MODE=token`) and a
random token kept in this process's environment (`RAY_AUTH_TOKEN`, inherited by the cluster's
processes) unless the user provides one, so nothing is written to the home folder.
Any other address joins a cluster started with `ray start` (see the README); that cluster's
`RAY_AUTH_MODE` and token are the user's.
"""

import os
import secrets

import ray
from ray._private import ray_constants

LOCAL = "local"
LOOPBACK = "127.0.0.1"


def connect(address: str, object_store_mb: int = 0, temp_dir: str = "",
            num_cpus: int | None = None) -> bool:
    """Connects to Ray at `address` ("local" starts a cluster here).

    Args:
      address: "local", "auto" or a cluster's host:port.
      object_store_mb: the local cluster's object store in MiB (0: Ray's default).
      temp_dir: the local cluster's session folder ("" : Ray's default).
      num_cpus: the local cluster's CPUs (None: this host's).

    Returns:
      True if this call connected (the caller disconnects), False if Ray was already up in
      this process (a notebook's or a test's cluster, left to its owner).
    """
    if ray.is_initialized():
        return False
    if address != LOCAL:
        ray.init(address=address, log_to_driver=True)
        return True
    if not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")):
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    # With Ray's multi-host support off, this node's IP is the loopback address, so the GCS,
    # raylet, object manager and workers listen there only (Ray reads it at import time, and
    # at call time from this attribute). `disconnect` turns it back on.
    os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=True,
             object_store_memory=object_store_mb * 2**20 or None, _temp_dir=temp_dir or None)
    node_ip, auth = ray.util.get_node_ip_address(), os.environ.get("RAY_AUTH_MODE")
    if node_ip != LOOPBACK or auth != "token":
        disconnect()
        raise RuntimeError(f"the local Ray cluster came up on {node_ip} with RAY_AUTH_MODE="
                           f"{auth}; it must be {LOOPBACK} with token (leave RAY_AUTH_MODE "
                           "unset or set it to token before Python starts)")
    return True


def disconnect() -> None:
    """Disconnects; a local cluster's processes all exit."""
    ray.shutdown()
    if os.environ.get(ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR) == "0":
        del os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR]
        ray_constants.ENABLE_RAY_CLUSTER = not ray_constants.IS_WINDOWS_OR_OSX
