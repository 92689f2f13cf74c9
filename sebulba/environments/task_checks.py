"""The tasks and `env.kwargs` no run can use, refused in one line before any env is made.

`check_env_id` accepts a task of a supported family and refuses, saying what is missing
(`refusal`), the few no run can train: games of two or more players (pgx's board and
card games, highway-env's multi-agent intersection), ViZDoom's multiplayer scenarios,
and Jumanji's Sudoku where envpool's puzzle files are not installed.

`env.kwargs` passes further envpool settings to every task's `envpool.make` (e.g.
Procgen's `num_levels` and `start_level`); `check_env_kwargs` checks them against the
task's envpool spec first and refuses the settings sebulba makes itself
(`FAMILY_ENV_KWARGS`).
"""

from __future__ import annotations

import difflib
import functools
import os

import ml_collections
import numpy as np

from sebulba.environments.env_config import (
    SEBULBA_ENV_KWARGS,
    check_env_kwargs_form,
    env_kwargs,
)
from sebulba.environments.envpool_registry import (
    _ATARI_FAMILY,
    _VIZDOOM_FAMILY,
    SUPPORTED_FAMILIES,
    _family_name,
    envpool_families,
    import_envpool,
    is_jax_env,
    supported_env_ids,
)
from sebulba.environments.system_libraries import check_system_libraries
from sebulba.errors import ConfigError

# ViZDoom scenarios made for several players: envpool cannot make them alone (its
# process crashes unless game_args host a game), and there are no other players to meet.
_VIZDOOM_MULTIPLAYER = ("Cig-v1", "MultiDuel-v1")


# Jumanji tasks that read puzzles from a file of envpool's assets, by the file's path
# under the assets' root: envpool-assets 0.3.0 does not ship them.
_JUMANJI_ASSET_FILES = {
    "Sudoku-v0": "jumanji/assets/sudoku/10000_mixed_puzzles.npy",
    "Sudoku-very-easy-v0": "jumanji/assets/sudoku/1000_very_easy_puzzles.npy",
}


_PLAYERS = {2: "two-player", 3: "three-player", 4: "four-player"}


# envpool settings sebulba sets itself for a family's tasks, so `env.kwargs` may not: each
# with the config key to use instead, or None where the family's protocol fixes it.
# (`sebulba.environments.env_config.SEBULBA_ENV_KWARGS` holds those of every family.)
FAMILY_ENV_KWARGS = {
    _ATARI_FAMILY: {
        "reward_clip": "env.clip_rewards",
        "repeat_action_probability": "env.repeat_action_probability",
        "full_action_space": "env.full_action_space",
        "max_episode_steps": "env.max_episode_frames",
        "use_fire_reset": "env.use_fire_reset",
        "frame_skip": None,
        "stack_num": "env.frame_stack",
        "img_height": None,
        "img_width": None,
        "gray_scale": None,
    },
    # ViZDoom's raw actions are a Box of button values with bounds [DBL_MIN, DBL_MAX]
    # that no distribution samples usefully; the combined actions are one Discrete.
    _VIZDOOM_FAMILY: {
        "use_combined_action": None,
        "stack_num": "env.frame_stack",
    },
    # The task id names the game and its distribution mode (StarpilotEasy-v0): the
    # run's env_id, eval.json and the logs keep saying which game and mode were played.
    "envpool.procgen": {
        "env_name": "env.id (a task per game and mode, e.g. StarpilotHard-v0)",
        "distribution_mode": "env.id (a task per game and mode, e.g. StarpilotHard-v0)",
    },
}


# envpool settings with a smallest value its C++ code needs: Atari draws its no-op count
# uniformly from [0, noop_max - 1].
_KWARG_MINIMUM = {"noop_max": 1}


def check_env_id(env_id: str, field: str = "env.id") -> None:
    """Raises ConfigError, naming `field` and close matches, unless the task is supported.

    A task of a supported family that no run can train is refused with the reason
    (`refusal`), e.g. "env.id 'Cig-v1' is a multiplayer ViZDoom scenario: ...".

    Args:
      env_id: an envpool task id.
      field: the config field that named it, e.g. "env.id" or "env.ids[1]".
    """
    if is_jax_env(env_id):
        # Upward (environments -> the Anakin runner's package), lazily: a JAX env id is
        # checked by its suite's adapter; suites imports nothing of this module.
        from sebulba.anakin import suites

        suites.check_env_id(env_id, field)
        return
    family = envpool_families().get(env_id)
    if family in SUPPORTED_FAMILIES:
        check_system_libraries(env_id, field)
        reason = refusal(env_id)
        if reason is not None:
            raise ConfigError(f"{field} {env_id!r} {reason}")
        return
    if family is not None:
        raise ConfigError(
            f"{field} {env_id!r} belongs to envpool's {family} family, which is not supported: "
            f"use a task of {', '.join(SUPPORTED_FAMILIES.values())}"
        )
    if ":" in env_id:  # No envpool id has one: a JAX env id with a misspelt suite.
        from sebulba.anakin import suites  # Upward, lazily: as above, the suites' names.

        suite, task = env_id.split(":", 1)
        close = difflib.get_close_matches(suite, list(suites.SUITES), n=1, cutoff=0.6)
        advice = (
            f"did you mean '{close[0]}:{task}'?"
            if close
            else f"a JAX env id is SUITE:TASK with SUITE one of {', '.join(suites.SUITES)}"
        )
        raise ConfigError(f"{field} {env_id!r}: {suite!r} is not a JAX env suite; {advice}")
    close = difflib.get_close_matches(env_id, supported_env_ids(), n=3, cutoff=0.6)
    advice = (
        f"did you mean {' or '.join(map(repr, close))}?"
        if close
        else "python -m sebulba.environments.env_catalog lists every family's tasks"
    )
    raise ConfigError(f"{field} {env_id!r} is not an envpool task: {advice}")


@functools.cache
def refusal(env_id: str) -> str | None:
    """Why no run can train a task of a supported family, in one clause; None if one can.

    The clause follows the task id in `check_env_id`'s message ("env.id 'Go9x9-v1' is a
    two-player game: needs self-play, which sebulba does not do"). Read from envpool's
    registry and settings, without creating an env.
    """
    family = envpool_families().get(env_id)
    players = int(_envpool_defaults(env_id).get("max_num_players", 1))
    if players > 1 and family == "envpool.highway":
        return (
            f"drives {players} vehicles per env, each with its own observation and reward: "
            "needs multi-agent training, which sebulba does not do"
        )
    if players == 2:
        return (
            "is a two-player game: needs self-play, which sebulba runs on Pgx's JAX games "
            "only (agent.name 'alphazero', env.id 'pgx:GAME')"
        )
    if players > 2:
        kind = _PLAYERS.get(players, f"{players}-player")
        return f"is a {kind} game: needs self-play, which sebulba does not do"
    if env_id in _VIZDOOM_MULTIPLAYER:
        return (
            "is a multiplayer ViZDoom scenario: needs other players in a hosted game, "
            "which sebulba does not run"
        )
    asset = _JUMANJI_ASSET_FILES.get(env_id.removeprefix("Jumanji/"))
    if family == "envpool.jumanji" and asset is not None:
        root = _envpool_defaults(env_id)["base_path"]
        if not os.path.exists(os.path.join(root, asset)):
            return (
                f"needs envpool's puzzle file {asset}, which the installed envpool-assets "
                f"does not ship (looked under {root})"
            )
    return None


def check_env_kwargs(env_config: ml_collections.ConfigDict) -> dict:
    """`env.kwargs` checked against the task's envpool spec; returns them as a dict.

    Every key must be one of the task's envpool settings (`envpool.make_spec(task).config`),
    not one sebulba sets itself (`sebulba.environments.env_config.SEBULBA_ENV_KWARGS`,
    `FAMILY_ENV_KWARGS`), with a value of the type of envpool's default.

    Raises:
      ConfigError: one line naming `env.kwargs.<key>` and, for an unknown key, close
        matches among the task's settings.
    """
    check_env_kwargs_form(env_config)
    kwargs = env_kwargs(env_config)
    env_id = env_config.id
    if not kwargs:
        return {}
    if is_jax_env(env_id):
        raise ConfigError(
            f"env.kwargs ({', '.join(kwargs)}) sets envpool settings, but {env_id!r} is a "
            "JAX env: leave env.kwargs empty"
        )
    family = envpool_families()[env_id]
    owned = FAMILY_ENV_KWARGS.get(family, {})
    defaults = _envpool_defaults(env_id)
    for key, value in kwargs.items():
        if key in owned:
            instead = owned[key]
            advice = (
                f"use {instead} instead"
                if instead
                else f"sebulba's {_family_name(env_id)} protocol fixes it "
                "(sebulba.environments.envpool_pools)"
            )
            raise ConfigError(
                f"env.kwargs.{key} is set by sebulba for {_family_name(env_id)} tasks: {advice}"
            )
        if key not in defaults:
            accepted = [k for k in defaults if k not in SEBULBA_ENV_KWARGS and k not in owned]
            close = difflib.get_close_matches(key, accepted, n=3, cutoff=0.6)
            hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
            raise ConfigError(
                f"env.kwargs.{key} is not an envpool setting of {env_id}: {hint}"
                f"its settings are {', '.join(accepted)}"
            )
        _check_kwarg_type(key, value, defaults[key], env_id)
    return kwargs


def _envpool_defaults(env_id: str) -> dict:
    """A task's envpool settings with their values for it (no env is created)."""
    import importlib

    import_envpool()
    from envpool.registration import registry

    check_system_libraries(env_id)
    import_path, spec_class, registered = registry.specs[env_id]
    spec_class = getattr(importlib.import_module(import_path), spec_class)
    return {**spec_class.gen_config()._asdict(), **registered}


def _check_kwarg_type(key: str, value, default, env_id: str) -> None:
    """Refuses a value envpool's C++ spec would reject with a traceback (e.g. "200")."""
    if isinstance(default, bool):
        fits, kind = isinstance(value, bool | np.bool_), "True or False"
    elif isinstance(default, int):
        fits = isinstance(value, int | np.integer) and not isinstance(value, bool)
        kind = "an integer"
    elif isinstance(default, float):
        fits = isinstance(value, int | float | np.number) and not isinstance(value, bool)
        kind = "a number"
    elif isinstance(default, str):
        fits, kind = isinstance(value, str), "a string"
    elif isinstance(default, list | tuple):
        fits, kind = isinstance(value, list | tuple), "a list"
    else:
        fits, kind = True, ""
    if not fits:
        raise ConfigError(
            f"env.kwargs.{key} must be {kind} (envpool's default for {env_id}: "
            f"{default!r}), got {value!r}"
        )
    minimum = _KWARG_MINIMUM.get(key)
    if minimum is not None and value < minimum:
        raise ConfigError(
            f"env.kwargs.{key} must be >= {minimum} (envpool's default for {env_id}: "
            f"{default!r}), got {value!r}"
        )
    # A count or an index (levels, steps, threads) whose default is not negative: envpool
    # would take a negative one silently, or fail far inside its C++ code.
    if kind in ("an integer", "a number") and default >= 0 and value < 0:
        raise ConfigError(
            f"env.kwargs.{key} must be >= 0 (envpool's default for {env_id}: {default!r}), "
            f"got {value!r}"
        )
