"""The JAX-native suites Anakin runs, and their env ids: `SUITE:TASK`.

An `env.id` of the form `SUITE:TASK` (`gymnax:CartPole-v1`, `xminigrid:MiniGrid-DoorKey-5x5`)
names a JAX env; every other id is an envpool task for the Sebulba pipeline. Each suite
is one module here exposing `PACKAGE` (what to import, also its pip name), `task_ids()`
(the tasks it offers, without the prefix) and `make(task) -> JaxEnv`. The suites are
optional dependencies (the `anakin` extra); a suite that is not installed is one line
naming the extra.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import importlib
import io
from types import ModuleType

from sebulba.anakin.env_api import BatchOfEnvs, JaxEnv, JointJaxEnv
from sebulba.environments.spaces import EnvSpec
from sebulba.environments.tasks import TaskLayout
from sebulba.errors import ConfigError
from sebulba.runtime.deferred_imports import defer_import

SUITES = {
    "gymnax": "sebulba.anakin.suites.gymnax",
    "xminigrid": "sebulba.anakin.suites.xminigrid",
    "jumanji": "sebulba.anakin.suites.jumanji",
    "brax": "sebulba.anakin.suites.brax",
    "pgx": "sebulba.anakin.suites.pgx",
}
EXTRA = "anakin"
INSTALL_HINT = f'pip install -e ".[{EXTRA}]"'
SEPARATOR = ":"
# Plotting modules that suites import when they are imported, only to render (gymnax's
# Pong: seaborn, pandas and pyplot, about a second), which a run never asks of them.
RENDER_ONLY_MODULES = ("seaborn", "matplotlib.pyplot")


def is_jax_env_id(env_id: str) -> bool:
    """Whether `env_id` names a JAX env (`SUITE:TASK` with a known suite)."""
    return (
        isinstance(env_id, str)
        and env_id.split(SEPARATOR, 1)[0] in SUITES
        and (SEPARATOR in env_id)
    )


def split_env_id(env_id: str) -> tuple[str, str]:
    """`"gymnax:CartPole-v1"` -> `("gymnax", "CartPole-v1")`."""
    suite, task = env_id.split(SEPARATOR, 1)
    return suite, task


def suite_module(suite: str, field: str = "env.id") -> ModuleType:
    """The adapter module of `suite`, with its package imported.

    Raises:
      ConfigError: the suite is unknown, or its package is not installed (naming the extra).
    """
    if suite not in SUITES:
        raise ConfigError(
            f"{field}: {suite!r} is not a JAX env suite: use one of {', '.join(SUITES)}"
        )
    module = importlib.import_module(SUITES[suite])
    for name in RENDER_ONLY_MODULES:
        defer_import(name)
    try:
        # Suites print at import (brax through MuJoCo's MJX: "Failed to import warp", an
        # optional GPU package); a run's output keeps its own lines only.
        with contextlib.redirect_stdout(io.StringIO()):
            importlib.import_module(module.PACKAGE)
    except ImportError as error:
        raise ConfigError(
            f"{field} needs the {suite} suite, which is not installed ({error}): {INSTALL_HINT}"
        ) from None
    return module


@functools.cache
def task_ids(suite: str) -> tuple[str, ...]:
    """The tasks of an installed suite, without the `SUITE:` prefix."""
    return tuple(suite_module(suite).task_ids())


def check_env_id(env_id: str, field: str = "env.id") -> None:
    """Raises ConfigError, naming `field` and close matches, unless the JAX env exists."""
    suite, task = split_env_id(env_id)
    module = suite_module(suite, field)
    tasks = task_ids(suite)
    if task in tasks:
        return
    close = difflib.get_close_matches(task, tasks, n=3, cutoff=0.6)
    advice = (
        f"did you mean {' or '.join(repr(f'{suite}{SEPARATOR}{c}') for c in close)}?"
        if close
        else f"`python -m sebulba.environments.env_catalog {suite}` lists its tasks"
    )
    del module
    raise ConfigError(f"{field} {env_id!r} is not a task of {suite}: {advice}")


@functools.cache
def make_env(env_id: str) -> JaxEnv:
    """The `JaxEnv` of a checked `SUITE:TASK` id (cached: its functions are pure)."""
    suite, task = split_env_id(env_id)
    return suite_module(suite).make(task)


def make_run_envs(task_layout: TaskLayout, env_spec: EnvSpec) -> BatchOfEnvs:
    """The envs an Anakin run steps: its one JAX env, or one per task of a joint run
    (`env.ids`), each over its block of the global envs.

    Every env gets the run's spec (`env.observation_indices` applied; the tasks share
    their spaces), so the observations it returns are the ones the policy trains on.
    """
    envs = tuple(
        dataclasses.replace(make_env(task_id), spec=env_spec) for task_id in task_layout.ids
    )
    if len(envs) == 1:
        return envs[0]
    sizes = tuple(len(task_layout.block(k)) for k in range(task_layout.num_tasks))
    return JointJaxEnv(tasks=envs, block_sizes=sizes, spec=env_spec)
