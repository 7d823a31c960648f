"""Test-wide JAX setup: 4 faked CPU devices, strict rank promotion and a compilation cache.

XLA reads XLA_FLAGS once, when the backend starts, so this must run before anything imports
jax; pytest loads the root conftest.py first.

Many tests build the same jitted update, network or loss again (a fresh closure per test, or a
fresh process for a launcher test), and on two cores compiling them is a large share of the
suite. JAX's persistent compilation cache, keyed by the lowered program, the compile options
and the JAX version, hands every later build of the same program the executable compiled
first; the environment variables reach the launcher processes the tests start too. The cache
lives in `.jax_cache/` (ignored by git); set JAX_COMPILATION_CACHE_DIR to move it.
"""
import os
import pathlib
import re

_DEVICES_FLAG = "--xla_force_host_platform_device_count"
_flags = re.sub(rf"{_DEVICES_FLAG}=\d+", "", os.environ.get("XLA_FLAGS", ""))
os.environ["XLA_FLAGS"] = f"{_flags} {_DEVICES_FLAG}=4".strip()

os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR", str(pathlib.Path(__file__).resolve().parent / ".jax_cache"))
# Programs that take 0.3 s or more to compile (JAX's default of 1 s left out more than half of
# those worth keeping). Caching everything measured slower: ops run eagerly (the float64
# gradient checks) compile one tiny program each, and writing those costs more than compiling.
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.3")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
# Least recently used entries go past 1 GiB (a whole suite writes a few tens of MB).
os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(1 << 30))

import jax  # noqa: E402  (must follow the XLA_FLAGS edit)

jax.config.update("jax_numpy_rank_promotion", "raise")
