"""Test-wide JAX setup: 4 faked CPU devices and strict rank promotion.

XLA reads XLA_FLAGS once, when the backend starts, so this must run before anything imports
jax; pytest loads the root conftest.py first.
"""
import os
import re

_DEVICES_FLAG = "--xla_force_host_platform_device_count"
_flags = re.sub(rf"{_DEVICES_FLAG}=\d+", "", os.environ.get("XLA_FLAGS", ""))
os.environ["XLA_FLAGS"] = f"{_flags} {_DEVICES_FLAG}=4".strip()

import jax  # noqa: E402  (must follow the XLA_FLAGS edit)

jax.config.update("jax_numpy_rank_promotion", "raise")
