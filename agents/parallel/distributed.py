"""Several processes (hosts), one data-parallel learner: JAX's own multi-process runtime.

IMPALA's learners across hosts (Espeholt et al. 2018, Sec. 3.1) use `jax.distributed`: every
process runs its own actors and envpool, contributes its local learner devices to one global
mesh, and feeds its share of each batch; gradients are reduced across all processes inside the
jitted update. Process 0 is the chief: it evaluates, logs and checkpoints.
"""

import jax

from agents.run.waits import connect_within

# JAX's own wait ends by aborting the process; `connect_within` ends the wait this long before.
_ABORT_MARGIN_S = 30


def initialize(num_processes: int, process_id: int, coordinator_address: str,
               timeout_s: float = 60.0) -> None:
    """Joins the job's processes (before any other JAX call). A no-op for one process.

    Args:
      num_processes: processes in the job.
      process_id: this process's index, 0 .. num_processes - 1.
      coordinator_address: `host:port` of process 0's coordinator (loopback for one machine).
      timeout_s: how long to wait for every process to join (`connect_timeout_s`); then a
        `waits.ConnectTimeout` naming the flag. Ctrl-C ends the wait.
    """
    if num_processes <= 1:
        return
    if not coordinator_address:
        raise ValueError("coordinator_address (host:port of process 0) is required when "
                         f"num_processes={num_processes}")
    # CPU devices need a collectives backend to reduce across processes; GPUs bring NCCL.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    # The coordinator listens on the address the user named (JAX's default is every
    # interface): 127.0.0.1 keeps a one-machine job on loopback.
    connect_within(
        lambda: jax.distributed.initialize(
            coordinator_address=coordinator_address, num_processes=num_processes,
            process_id=process_id, coordinator_bind_address=coordinator_address,
            initialization_timeout=int(timeout_s) + _ABORT_MARGIN_S),
        timeout_s, f"the other {num_processes - 1} jax.distributed process(es) at "
        f"coordinator_address={coordinator_address}",
        f"start all num_processes={num_processes} processes (process_id 0 .. "
        f"{num_processes - 1}) with the same coordinator_address")


def shutdown(num_processes: int) -> None:
    """Leaves the job together with the other processes (a no-op for one process).

    Every process waits at the coordination service's shutdown barrier, so process 0, which
    hosts the service, stops it only after the others have left. Without this call each process
    leaves at interpreter exit on its own, and one still leaving when process 0's service is
    gone is aborted by JAX (SIGABRT) although its run ended well.
    """
    if num_processes > 1:
        jax.distributed.shutdown()


def global_learner_devices(local_indices: tuple[int, ...]) -> list:
    """Every process's learner devices (`local_indices` into each one's local devices, empty:
    all), ordered by process, for one global mesh."""
    by_process: dict[int, list] = {}
    for device in jax.devices():
        by_process.setdefault(device.process_index, []).append(device)
    chosen = []
    for process in sorted(by_process):
        local = sorted(by_process[process], key=lambda d: d.id)
        chosen += [local[i] for i in local_indices] if local_indices else local
    return chosen
