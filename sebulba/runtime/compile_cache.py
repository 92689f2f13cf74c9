"""JAX's persistent compilation cache for command-line runs.

A rerun, a resume after preemption or the next seed of a sweep compiles the same
programs again (the learner update, the actor step); with the cache on disk it loads
them instead. The command line (`python -m sebulba.main`) turns it on before anything
compiles; library users call `enable()` themselves (JAX reads the location only before
its first compilation).

Where the cache lives, first match wins:

  SEBULBA_COMPILATION_CACHE_DIR   a directory; empty ("") turns the cache off.
  JAX_COMPILATION_CACHE_DIR       JAX's own setting, left as it is.
  $XDG_CACHE_HOME/sebulba/jax     the default (~/.cache/sebulba/jax).

JAX caches a program only if compiling it took at least
`jax_persistent_cache_min_compile_time_secs` (default 1 s; set it with the environment
variable JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS). The cache is trusted code: keep it
in a directory only you can write.
"""

from __future__ import annotations

import os

ENV_VAR = "SEBULBA_COMPILATION_CACHE_DIR"
_JAX_ENV_VAR = "JAX_COMPILATION_CACHE_DIR"


def cache_dir() -> str | None:
    """The cache directory the environment asks for; None when the cache is off."""
    if ENV_VAR in os.environ:
        return os.environ[ENV_VAR] or None
    if os.environ.get(_JAX_ENV_VAR):
        return os.environ[_JAX_ENV_VAR]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "sebulba", "jax")


def enable(directory: str | None = None) -> str | None:
    """Turns JAX's persistent compilation cache on; returns its directory (None: off).

    Args:
      directory: where to cache; by default `cache_dir()`.
    """
    import jax

    directory = cache_dir() if directory is None else directory
    if directory:
        jax.config.update("jax_compilation_cache_dir", directory)
    return directory
