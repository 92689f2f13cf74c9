"""Test set-up: jemalloc for the processes the tests run in; 8 virtual CPU devices and fast
compilation, set before JAX is imported anywhere; one compilation cache for the whole test
run; a cyclic garbage collector that runs less often."""

import ctypes.util
import gc
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

# Compiling, lowering and tracing allocate and free millions of small blocks: glibc's
# allocator took 13% of a test process's CPU (perf, tests/test_pipeline.py). With jemalloc
# the compile-heavy test files take 14% less CPU (docs/architecture.md, "The test suite's
# cost"); the allocator changes no result. The workers and every process a test starts load it where
# the system has it (`.ci/run` installs libjemalloc2; README.md's set-up names it), as
# they inherit this process's environment; this process, already started, keeps glibc's
# (with `-n 0` it runs the tests itself). SEBULBA_TEST_JEMALLOC=0 leaves the allocator alone.
_PRELOAD = os.environ.get("LD_PRELOAD", "")
if os.environ.get("SEBULBA_TEST_JEMALLOC", "1") != "0" and "jemalloc" not in _PRELOAD:
    _JEMALLOC = ctypes.util.find_library("jemalloc")
    if _JEMALLOC:
        os.environ["LD_PRELOAD"] = " ".join(filter(None, [_JEMALLOC, _PRELOAD]))

# Tests check what programs compute, not how fast: XLA:CPU compiles them without LLVM's
# optimizations and with its classic loop emitters, in 0.6x the time (tests/test_ppo.py:
# 107 s against 173 s on 2 cores; most of a test's time is compilation). The records and
# the tests marked `xla_default_compilation` (below) compile with XLA's defaults, as a
# user's run is compiled; so do the two documented commands for which that costs less
# (tests/test_readme.py). An XLA that does not know the
# flags aborts at start, so they are tried once, in a subprocess, by the process that
# starts the workers (which inherit the answer); `helpers.process_env` gives them to the
# processes tests start.
_FAST_COMPILE_FLAGS = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"
_FLAGS_VARIABLE = "SEBULBA_TEST_XLA_FLAGS"
_USER_FLAGS_VARIABLE = "SEBULBA_TEST_USER_XLA_FLAGS"
os.environ.setdefault(_USER_FLAGS_VARIABLE, os.environ.get("XLA_FLAGS", ""))
if _FLAGS_VARIABLE not in os.environ:
    _tried = subprocess.run(
        [sys.executable, "-c", "import jax; jax.devices('cpu')"],
        env={**os.environ, "XLA_FLAGS": _FAST_COMPILE_FLAGS, "JAX_PLATFORMS": "cpu"},
        capture_output=True,
    )
    os.environ[_FLAGS_VARIABLE] = _FAST_COMPILE_FLAGS if _tried.returncode == 0 else ""
os.environ["XLA_FLAGS"] = " ".join(
    [os.environ[_USER_FLAGS_VARIABLE], os.environ[_FLAGS_VARIABLE]]
    + ["--xla_force_host_platform_device_count=8"]
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

# Tracing allocates millions of short-lived objects, and a worker's heap (JAX's caches, the
# modules it imported) grows over hundreds of tests: with Python's default thresholds the
# cyclic collector ran 7,323 times over three test files in one process and took 16.1 of
# its 285 s of CPU. Collecting the youngest generation every 50,000 allocations instead of
# 700 leaves the same garbage to the same collector, collected less often (tests/test_ppo.py:
# 3.0 s instead of 6.1 s of collection).
gc.set_threshold(50_000, 20, 10)

import jax  # noqa: E402

import sebulba  # noqa: E402, F401  # Before JAX: quiet where its CUDA plugin is installed.

jax.config.update("jax_compilation_cache_dir", TEST_COMPILATION_CACHE)

# Test modules import envpool themselves; it must load after the system's libEGL for the
# rendering tests, as sebulba loads it.
from sebulba.environments.envpool_registry import import_envpool  # noqa: E402

import_envpool()


def pytest_pyfunc_call(pyfuncitem):
    """A test marked `xla_default_compilation` runs in a pytest process of its own that
    compiles with XLA's defaults: it compares programs of different structure bit for
    bit (several updates per call against one, a fused update against the threaded
    pieces), which XLA's defaults compute alike and the tests' fast compilation does
    not always (the last bit of a few floats), or it trains long enough that the
    optimised program's speed outweighs its compile time (docs/architecture.md)."""
    if pyfuncitem.get_closest_marker("xla_default_compilation") is None:
        return None
    if not os.environ[_FLAGS_VARIABLE]:  # This process compiles with the defaults.
        return None
    env = {**os.environ, _FLAGS_VARIABLE: "", "XLA_FLAGS": os.environ[_USER_FLAGS_VARIABLE]}
    # Forked from a process that has imported JAX, envpool and the agents (tests/zygote.py).
    from tests import zygote

    result = zygote.run(
        ["-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", pyfuncitem.nodeid],
        cwd=str(pyfuncitem.config.rootpath),
        env=env,
    )
    if result.returncode != 0:
        pytest.fail(
            "in a process compiling with XLA's defaults:\n" + result.stdout[-6000:],
            pytrace=False,
        )
    return True


def pytest_unconfigure(config):
    del config
    if _OWNS_CACHE:
        shutil.rmtree(TEST_COMPILATION_CACHE, ignore_errors=True)
