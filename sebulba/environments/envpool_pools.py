"""envpool's pools, in synchronous mode (Weng et al. 2022): every family through one path.

Every task of a supported family (`envpool_registry.SUPPORTED_FAMILIES`) goes through one
generic path (envpool's defaults); Atari and ViZDoom get settings of their own
(`_family_kwargs`). `sebulba.environments.spaces` describes and converts whatever spaces a
task has, and refuses in one line the ones it cannot represent; the tasks and
`env.kwargs` no run can use are refused first (`sebulba.environments.task_checks`), and
so is a machine without the system libraries a family needs
(`sebulba.environments.system_libraries`).

ViZDoom steps with envpool's combined actions (one Discrete action per combination of
the scenario's buttons) and stacks `env.frame_stack` screens, channels first; the
scenario's own screen format decides grey (1 channel per screen) or colour (3).
`VizdoomCustom-v1` plays the scenario that `env.kwargs.cfg_path` (and `wad_path`) name.

Atari follows the evaluation protocol of Machado et al. (2018), as in the Cleanba paper:
sticky actions with probability 0.25, the full 18-action space, no life-loss signal, no
no-op starts, episodes capped at 108,000 frames, 84x84 grey frames (the max of the last
two of every 4 skipped frames), a 4-frame stack (`env.frame_stack`; 1 for recurrent agents,
as CleanRL's ppo_atari_lstm). Rewards are clipped to their sign for
learning while raw returns are reported. `env.use_fire_reset` presses FIRE after each
reset, as envpool does by default and Cleanba keeps (with the full action space that
means every game); Machado et al. do not, so the base config leaves it off.
CleanRL's ppo_atari_envpool protocol differs: `env.kwargs` takes envpool's
`episodic_life` (every lost life terminates, so values do not bootstrap through it) and
`noop_max` (up to that many minus one no-ops after each reset); CleanRL's settings are
`"{'episodic_life': True, 'noop_max': 30}"` with `env.use_fire_reset=True`,
`env.repeat_action_probability=0.0` and `env.full_action_space=False`. Returns and
lengths are still those of whole games (`game_overs`), in training metrics and in
evaluation.

`env.kwargs` passes further envpool settings to every task's `envpool.make` (e.g.
Procgen's `num_levels` and `start_level`), checked by `task_checks.check_env_kwargs`.
"""

from __future__ import annotations

import dataclasses

import ml_collections
import numpy as np

from sebulba.environments import spaces
from sebulba.environments.env_config import (
    env_kwargs,
    env_section,
)
from sebulba.environments.envpool_registry import (
    _ATARI_FAMILY,
    _VIZDOOM_FAMILY,
    envpool_families,
    family_name,
    import_envpool,
    is_atari,
    is_jax_env,
)
from sebulba.environments.system_libraries import (
    _EGL_FAMILIES,
    _check_drawn,
    _check_egl,
    check_system_libraries,
)
from sebulba.environments.task_checks import (
    _envpool_defaults,
    check_env_id,
    check_env_kwargs,
    refusal,
)
from sebulba.errors import ConfigError

_VIZDOOM_CUSTOM = "VizdoomCustom-v1"  # Plays the scenario env.kwargs.cfg_path names.
_VIZDOOM_TICS_PER_SECOND = 35  # Doom's game clock.
FRAMES_PER_AGENT_STEP = 4  # Atari frame skip.
ATARI_FRAMES_PER_SECOND = 60  # The console's (NTSC) frame rate.
# Simulated seconds per step of the classic-control tasks (their integration time step);
# animations of other non-Atari tasks play at `_DEFAULT_STEP_S`.
_CLASSIC_CONTROL_STEP_S = {"CartPole-v1": 0.02, "Acrobot-v1": 0.2}
_DEFAULT_STEP_S = 0.02


def task_spaces(env_id: str, env_kwargs: dict | None = None):
    """A task's (observation, action) gymnasium spaces under this module's settings.

    Read from envpool's spec, without creating an env (tens of milliseconds).

    Args:
      env_id: an envpool task id.
      env_kwargs: `env.kwargs`, checked as a run checks them (None: envpool's defaults).
    """
    spec = import_envpool().make_spec(env_id, **_spec_kwargs(env_id, env_kwargs))
    return spec.observation_space, spec.action_space


def envpool_config(env_id: str, env_kwargs: dict | None = None) -> dict:
    """Every envpool setting of a task as a run (or evaluation) makes it, by name.

    e.g. `envpool_config("BigfishEasy-v0", {"num_levels": 200})["num_levels"] == 200`.
    """
    return import_envpool().make_spec(env_id, **_spec_kwargs(env_id, env_kwargs)).config._asdict()


def _spec_kwargs(env_id: str, env_kwargs: dict | None) -> dict:
    """`envpool.make_spec`'s keywords for a task: the family's settings and `env_kwargs`."""
    env_config = env_section()  # The defaults make_envs uses.
    env_config.id = env_id
    env_config.kwargs = ml_collections.ConfigDict(dict(env_kwargs or {}))
    check_system_libraries(env_id)
    kwargs = _family_kwargs(env_config)
    kwargs.update(check_env_kwargs(env_config))
    return kwargs


def is_task_of(
    env_id: str,
    families,
    *,
    box_actions: bool = False,
    vector_observations: bool = False,
    image_observations: bool = False,
) -> bool:
    """Whether `env_id` is a task of one of `families` (names as README.md gives them).

    A task `check_env_id` refuses is no family's.

    Args:
      box_actions: also require continuous (Box) actions.
      vector_observations: also require one vector (a 1-D Box) as the observation.
      image_observations: also require one uint8 array [C, H, W] or [H, W, C] (screens).
    """
    if family_name(env_id) not in families or refusal(env_id) is not None:
        return False
    if not (box_actions or vector_observations or image_observations):
        return True
    observation, action = task_spaces(env_id)
    if box_actions and type(action).__name__ != "Box":
        return False
    is_box = type(observation).__name__ == "Box"
    if vector_observations and not (is_box and len(observation.shape) == 1):
        return False
    is_image = is_box and len(observation.shape) == 3 and observation.dtype == np.uint8
    return is_image or not image_observations


def make_envs(
    env_config: ml_collections.ConfigDict,
    num_envs: int,
    seed: int,
    *,
    render: bool = False,
    num_threads: int | None = None,
):
    """Creates one envpool pool of `num_envs` envs stepped together.

    Args:
      env_config: the `env` section of the config.
      num_envs: envs in this pool.
      seed: seed of the pool's first env; env i gets `seed + i`.
      render: enable `pool.render(env_ids)`, RGB screens [n, H, W, 3] uint8 (the Atari
        game screen at 210x160, a drawing for other tasks); the envs' dynamics and
        observations are the same either way.
      num_threads: envpool worker threads (default `env.num_threads`; 0: envpool's
        choice, min(num_envs, the machine's cores)). Speed only: in sync mode every env
        steps alike whatever the count.

    Returns:
      A gymnasium-style envpool pool in sync mode (batch_size == num_envs).
    """
    check_env_id(env_config.id)
    kwargs = dict(
        num_envs=num_envs,
        batch_size=num_envs,  # Sync mode: every step returns every env, in order.
        seed=seed,
        num_threads=env_config.num_threads if num_threads is None else num_threads,
    )
    if render:
        kwargs["render_mode"] = "rgb_array"
        _check_drawn(env_config.id)
        if envpool_families().get(env_config.id) in _EGL_FAMILIES:
            _check_egl(env_config.id)
    kwargs.update(_family_kwargs(env_config))
    # env.kwargs may change the family defaults above that FAMILY_ENV_KWARGS does not own
    # (Atari's episodic_life and noop_max); the owned ones it refuses.
    kwargs.update(check_env_kwargs(env_config))
    return import_envpool().make(env_config.id, env_type="gymnasium", **kwargs)


def _family_kwargs(env_config: ml_collections.ConfigDict) -> dict:
    """The envpool settings sebulba makes for the task's family (`FAMILY_ENV_KWARGS`)."""
    family = envpool_families().get(env_config.id)
    if family == _ATARI_FAMILY:
        return _atari_kwargs(env_config)
    if family == _VIZDOOM_FAMILY:
        return _vizdoom_kwargs(env_config)
    return {}


def _vizdoom_kwargs(env_config: ml_collections.ConfigDict) -> dict:
    """envpool's ViZDoom settings: combined (Discrete) actions, `env.frame_stack` screens.

    Raises:
      ConfigError: `VizdoomCustom-v1` without a scenario (`env.kwargs.cfg_path`).
    """
    if env_config.id == _VIZDOOM_CUSTOM and not env_kwargs(env_config).get("cfg_path"):
        raise ConfigError(
            f"env.id {_VIZDOOM_CUSTOM!r} plays a scenario of your own: set "
            "env.kwargs.cfg_path (and wad_path) to its ViZDoom .cfg (and .wad) file"
        )
    return dict(use_combined_action=True, stack_num=env_config.frame_stack)


def _atari_kwargs(env_config: ml_collections.ConfigDict) -> dict:
    """envpool's Atari settings for the protocol of Machado et al. (module docstring)."""
    if env_config.max_episode_frames % FRAMES_PER_AGENT_STEP:
        raise ConfigError(
            f"env.max_episode_frames ({env_config.max_episode_frames}) must be a "
            f"multiple of the frame skip ({FRAMES_PER_AGENT_STEP})"
        )
    return dict(
        # Machado et al.: no life-loss signal, no no-op starts (sticky actions make the
        # start stochastic). env.kwargs may ask for CleanRL's episodic_life / noop_max=30.
        episodic_life=False,
        reward_clip=False,  # Clipped by the actor, so raw returns can be reported.
        repeat_action_probability=env_config.repeat_action_probability,
        full_action_space=env_config.full_action_space,
        max_episode_steps=env_config.max_episode_frames // FRAMES_PER_AGENT_STEP,
        noop_max=1,
        use_fire_reset=env_config.use_fire_reset,
        frame_skip=FRAMES_PER_AGENT_STEP,
        stack_num=env_config.frame_stack,
        img_height=84,
        img_width=84,
        gray_scale=True,
    )


def task_env_specs(env_config: ml_collections.ConfigDict, ids) -> dict[str, spaces.EnvSpec]:
    """Each task's `EnvSpec`, read from a one-env pool of it (closed again)."""
    from sebulba.environments.tasks import task_env_config

    for task_id in ids:  # Every task's env.kwargs before any env is made.
        check_env_kwargs(task_env_config(env_config, task_id))
    specs = {}
    for task_id in ids:
        single = task_env_config(env_config, task_id)
        if is_jax_env(task_id):
            specs[task_id] = _jax_env_spec(single)
            continue
        # One env needs one worker (env.num_threads is checked with the run's pools).
        pool = make_envs(single, 1, seed=0, num_threads=1)
        try:
            specs[task_id] = env_spec_of(single, pool)
        finally:
            pool.close()
    return specs


def registry_env_spec(env_config: ml_collections.ConfigDict) -> spaces.EnvSpec:
    """A task's `EnvSpec` from envpool's spec alone, without creating an env (milliseconds).

    The spaces are those `make_envs` gives the task under the same settings (the
    family's, `env.kwargs`), and every refusal a run makes before its envs is made here
    too, so `python -m sebulba.environments.env_catalog` and tests/test_env_registry.py can
    walk the whole registry in seconds.

    Raises:
      ConfigError: in one line, as a run would, for a task no run can train.
    """
    if is_jax_env(env_config.id):
        return _jax_env_spec(env_config)
    check_env_id(env_config.id)
    kwargs = _family_kwargs(env_config)
    kwargs.update(check_env_kwargs(env_config))
    return env_spec_of(env_config, import_envpool().make_spec(env_config.id, **kwargs))


def _jax_env_spec(env_config: ml_collections.ConfigDict) -> spaces.EnvSpec:
    # Upward (environments -> the Anakin runner's package), lazily: a JAX env's spec is its
    # suite adapter's; suites imports nothing of this module.
    from sebulba.anakin import suites

    check_env_id(env_config.id)
    spec = suites.make_env(env_config.id).spec
    indices = tuple(env_config.observation_indices)
    observation = spaces.select_components(spec.observation, indices, env_config.id)
    return dataclasses.replace(spec, observation=observation)


def real_time_step_s(env_id: str) -> float:
    """Seconds of game or simulated time one agent step spans (plays animations at 1x)."""
    if is_atari(env_id):
        return FRAMES_PER_AGENT_STEP / ATARI_FRAMES_PER_SECOND
    if envpool_families().get(env_id) == _VIZDOOM_FAMILY:
        frame_skip = _envpool_defaults(env_id)["frame_skip"]
        return frame_skip / _VIZDOOM_TICS_PER_SECOND
    return _CLASSIC_CONTROL_STEP_S.get(env_id, _DEFAULT_STEP_S)


def env_spec_of(env_config: ml_collections.ConfigDict, envs) -> spaces.EnvSpec:
    """Describes a pool's observations and actions for the agent.

    `env.observation_indices` is applied here, so every consumer of the spec (actors,
    evaluation, `load_policy`) sees the same reduced observations.

    Raises:
      ConfigError: naming env.id and the space, if a space cannot be represented, or
        env.observation_indices if it does not fit the observation.
    """
    return spaces.env_spec_of(
        env_config.id,
        envs,
        is_atari=is_atari(env_config.id),
        observation_indices=tuple(env_config.observation_indices),
    )
