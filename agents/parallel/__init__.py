"""Spreading a job over devices and hosts: the data-parallel mesh, ZeRO, jax.distributed
across processes, and the Ray cluster."""
