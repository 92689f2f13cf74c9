"""Test set-up: 8 virtual CPU devices, set before JAX is imported anywhere."""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Tests (and the command lines they start) leave the user's compilation cache alone; a
# test of the cache names its own directory.
os.environ["SEBULBA_COMPILATION_CACHE_DIR"] = ""

# Test modules import envpool themselves; it must load after the system's libEGL for the
# rendering tests, as sebulba loads it.
from sebulba.envs import import_envpool  # noqa: E402

import_envpool()
