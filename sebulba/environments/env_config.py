"""The `env` section of a run config: its keys and defaults, and `env.kwargs`' form.

`sebulba.config.base_config` puts this section in every run config, and
`sebulba.environments.envpool_pools` builds envpool pools from it; both import it,
neither imports the other (the checks of `env.kwargs` against each task's envpool spec,
which need envpool, are `sebulba.environments.task_checks`').
"""

from __future__ import annotations

import ml_collections

from sebulba.errors import ConfigError

# envpool settings sebulba sets itself for every task, so `env.kwargs` may not: each
# with what to configure instead. (Family-specific ones:
# `sebulba.environments.task_checks.FAMILY_ENV_KWARGS`.)
SEBULBA_ENV_KWARGS = {
    "num_envs": "env.num_envs",
    "batch_size": "env.num_envs (pools step synchronously: batch_size = num_envs)",
    "seed": "seed (env i of a run is seeded seed + i)",
    "env_seed": "seed (env i of a run is seeded seed + i)",
    "num_threads": "env.num_threads",
    "gym_reset_return_info": "nothing (sebulba reads the info that reset returns)",
}


def env_section() -> ml_collections.ConfigDict:
    """The `env` section of a run config, at its defaults."""
    env = ml_collections.ConfigDict()
    env.id = "CartPole-v1"  # envpool task id (families: docs/guide.md), e.g. Hopper-v4.
    # e.g. ("MiniGrid-Empty-5x5-v0", "MiniGrid-DoorKey-5x5-v0"); docs/multitask.md.
    env.ids = ()  # Tasks trained jointly by one policy (): the single task env.id).
    env.num_envs = 8  # Envs stepped by each actor thread (one envpool pool).
    env.num_threads = 0  # envpool workers per pool (0: this process's cores, shared by its pools).
    env.clip_rewards = False  # Learn from sign(reward) (Atari); returns stay raw.
    env.repeat_action_probability = 0.25  # Atari sticky actions (Machado et al.).
    env.full_action_space = True  # Atari: all 18 actions for every game.
    env.max_episode_frames = 108_000  # Atari episode cap in emulator frames.
    env.use_fire_reset = False  # Atari: press FIRE after reset (envpool's/Cleanba's way).
    env.frame_stack = 4  # Atari: frames stacked per observation (1 for recurrent agents).
    # e.g. (0, 2): CartPole's positions without their velocities, a memory task.
    env.observation_indices = ()  # Components of a vector observation to keep (): all).
    # e.g. Procgen's {'num_levels': 200, 'start_level': 0}, checked against each task's envpool
    # spec. A key the config file sets: --config.env.kwargs.num_levels=500; others only as a
    # whole dict, which replaces the file's: --config.env.kwargs="{'num_levels': 200}".
    env.kwargs = ml_collections.ConfigDict()  # Extra envpool.make settings (dict literal).
    return env


def env_kwargs(env_config: ml_collections.ConfigDict) -> dict:
    """`env.kwargs` as a plain dict ({} for a config written before the key existed)."""
    kwargs = env_config.get("kwargs")
    if kwargs is None:
        return {}
    return kwargs.to_dict() if isinstance(kwargs, ml_collections.ConfigDict) else dict(kwargs)


def check_env_kwargs_form(env_config: ml_collections.ConfigDict) -> None:
    """The checks of `env.kwargs` that need no envpool: a dict, no key sebulba sets itself.

    `sebulba.environments.task_checks.check_env_kwargs` checks the keys against each task's
    envpool spec.

    Raises:
      ConfigError: naming `env.kwargs.<key>` and the config key to use instead.
    """
    kwargs = env_config.get("kwargs")
    if kwargs is not None and not isinstance(kwargs, ml_collections.ConfigDict | dict):
        raise ConfigError(
            f"env.kwargs must be a dict of envpool settings, got {kwargs!r} "
            "(on the command line: --config.env.kwargs=\"{'num_levels': 200}\")"
        )
    for key in env_kwargs(env_config):
        if key in SEBULBA_ENV_KWARGS:
            raise ConfigError(
                f"env.kwargs.{key} is set by sebulba for every task: use "
                f"{SEBULBA_ENV_KWARGS[key]} instead"
            )
