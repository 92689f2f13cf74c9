"""Test set-up: 8 virtual CPU devices, set before JAX is imported anywhere; one compilation
cache for the whole test run."""

import os
import shutil
import tempfile

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# Many tests compile the same programs (a config's update, in-process and in the command
# lines they start): the run's workers and commands share one JAX compilation cache in a
# directory of its own, made by the first process (the one that starts the workers, which
# inherit it) and removed when that process ends. The user's cache is left alone; a test
# of the cache names its own directory.
_CACHE_VARIABLE = "SEBULBA_TEST_COMPILATION_CACHE"
_OWNS_CACHE = _CACHE_VARIABLE not in os.environ
if _OWNS_CACHE:
    os.environ[_CACHE_VARIABLE] = tempfile.mkdtemp(prefix="sebulba-test-jax-cache-")
TEST_COMPILATION_CACHE = os.environ[_CACHE_VARIABLE]
os.environ["SEBULBA_COMPILATION_CACHE_DIR"] = TEST_COMPILATION_CACHE
# Programs that compile in a tenth of a second or more are cached (JAX's default, 1 s,
# leaves out most of a test's programs: three of the heaviest test files ran 13% faster
# with 0.1 s than without a cache, 4% faster with 1 s). A size limit makes JAX lock the
# directory around each read and write, so that no worker reads an entry another is still
# writing (the lock needs `filelock`).
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0.1"
try:
    import filelock  # noqa: F401

    os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"] = str(16 * 2**30)
except ImportError:
    pass

import jax  # noqa: E402

jax.config.update("jax_compilation_cache_dir", TEST_COMPILATION_CACHE)

# Test modules import envpool themselves; it must load after the system's libEGL for the
# rendering tests, as sebulba loads it.
from sebulba.environments.envpool_registry import import_envpool  # noqa: E402

import_envpool()


def pytest_unconfigure(config):
    del config
    if _OWNS_CACHE:
        shutil.rmtree(TEST_COMPILATION_CACHE, ignore_errors=True)
