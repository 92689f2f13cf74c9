"""XLand-MiniGrid (Nikulin et al. 2024): MiniGrid's grid worlds, and XLand's meta-RL tasks, in JAX.

Reference: "XLand-MiniGrid: Scalable Meta-Reinforcement Learning Environments in JAX"
(NeurIPS 2024 Datasets and Benchmarks), https://github.com/dunnolab/xland-minigrid.

`Environment.step` does not auto-reset (only xminigrid's wrappers do), so it is used as
is. It folds the time limit (`params.max_steps`) into a LAST step: a LAST step with
discount 0 reached the goal (terminated), one with discount 1 ran out of time (truncated).
The observation is the agent's egocentric view, an int grid [V, V, 2] of (tile, colour).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from sebulba.anakin.env_api import JaxEnv
from sebulba.environments.spaces import ArraySpec, Discrete, EnvSpec
from sebulba.errors import ConfigError

PACKAGE = "xminigrid"
# XLand ids are meta-RL tasks: each episode plays a ruleset drawn from a benchmark that
# `xminigrid.load_benchmark` downloads; without one the env has an empty goal and never rewards.
_XLAND_PREFIX = "XLand-MiniGrid"
_LAST = 2  # xminigrid.types.StepType.LAST


def task_ids() -> tuple[str, ...]:
    import xminigrid

    return tuple(xminigrid.registered_environments())


def make(task: str) -> JaxEnv:
    """The `JaxEnv` of one xminigrid task ("MiniGrid-DoorKey-5x5").

    Raises:
      ConfigError: for XLand meta-RL tasks, which need a downloaded benchmark of rulesets.
    """
    import xminigrid

    env_id = f"xminigrid:{task}"
    if task.startswith(_XLAND_PREFIX):
        raise ConfigError(
            f"env.id {env_id!r} is an XLand meta-RL task: it needs a ruleset benchmark "
            "(xminigrid.load_benchmark downloads one) and a ruleset drawn per episode, which "
            "sebulba does not do; use a MiniGrid-* task"
        )
    env, params = xminigrid.make(task)
    shape = env.observation_shape(params)
    if not isinstance(shape, tuple):
        raise ConfigError(f"env.id {env_id!r} has an unsupported observation {shape}")
    spec = EnvSpec(
        env_id=env_id,
        # Categorical (tile, colour) codes; int32 rather than uint8 so no network mistakes
        # the grid for pixels to scale.
        observation=ArraySpec(tuple(int(n) for n in shape), "int32"),
        action=Discrete(int(env.num_actions(params))),
    )

    def reset(key: jax.Array):
        timestep = env.reset(params, key)
        # The TimeStep is the state: xminigrid steps from a TimeStep.
        return timestep, timestep.observation.astype(jnp.int32)

    def step(timestep, action: jax.Array, key: jax.Array):
        del key  # xminigrid's step is deterministic given the state (which holds its own key).
        timestep = env.step(params, timestep, action)
        last = timestep.step_type == _LAST
        terminated = jnp.logical_and(last, timestep.discount == 0.0)
        truncated = jnp.logical_and(last, timestep.discount != 0.0)
        obs = timestep.observation.astype(jnp.int32)
        return timestep, obs, timestep.reward.astype(jnp.float32), terminated, truncated

    return JaxEnv(spec=spec, reset=reset, step=step, max_episode_steps=int(params.max_steps))
