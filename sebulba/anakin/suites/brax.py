"""Brax (Freeman et al. 2021): differentiable rigid-body physics, MuJoCo-style locomotion in JAX.

Reference: "Brax - A Differentiable Physics Engine for Large Scale Rigid Body Simulation"
(NeurIPS 2021 Datasets and Benchmarks), https://github.com/google/brax.

The bare env of `brax.envs.get_environment` (default backend, "generalized") is used,
without `brax.envs.create`'s wrappers: its `AutoResetWrapper` would replace the last
observation of an episode, and its `EpisodeWrapper` folds the time limit into `done`.
The time limit is kept here instead, as a step counter beside brax's state: an episode
is truncated after `EPISODE_LENGTH` steps, brax's (and Gymnasium MuJoCo's) usual 1000,
unless it terminated (`state.done`: the robot fell) on that step.
"""

from __future__ import annotations

import contextlib
import io

import jax
import jax.numpy as jnp

from sebulba.anakin.env_api import JaxEnv
from sebulba.environments.spaces import ArraySpec, Box, EnvSpec
from sebulba.errors import ConfigError

PACKAGE = "brax"
EPISODE_LENGTH = 1000


def _brax_envs():
    # mujoco's MJX prints "Failed to import warp" when the optional GPU package `warp` is
    # absent, which a CPU or a plain GPU run does not need: keep it out of the run's output
    # (`suites.suite_module` imports brax the same way).
    with contextlib.redirect_stdout(io.StringIO()):
        from brax import envs
    return envs


def task_ids() -> tuple[str, ...]:
    envs = _brax_envs()

    # brax's registry; `get_environment` reads it and there is no public listing.
    return tuple(envs._envs)


def make(task: str) -> JaxEnv:
    """The `JaxEnv` of one Brax task ("ant"); its state is (brax state, steps taken).

    Raises:
      ConfigError: the task observes something other than one float vector.
    """
    envs = _brax_envs()
    env_id = f"brax:{task}"
    env = envs.get_environment(task)
    # The observation's shape without running a reset (brax's `observation_size` runs one).
    obs = jax.eval_shape(env.reset, jax.random.key(0)).obs
    if not hasattr(obs, "shape") or len(obs.shape) != 1:
        raise ConfigError(f"env.id {env_id!r} observes {obs}, not one vector")
    size = int(env.action_size)
    spec = EnvSpec(
        env_id=env_id,
        observation=ArraySpec((int(obs.shape[0]),), "float32"),
        action=Box((size,), (-1.0,) * size, (1.0,) * size),
    )

    def reset(key: jax.Array):
        state = env.reset(key)
        return (state, jnp.zeros((), jnp.int32)), jnp.asarray(state.obs, jnp.float32)

    def step(state, action: jax.Array, key: jax.Array):
        del key  # Brax's dynamics are deterministic.
        brax_state, steps = state
        brax_state = env.step(brax_state, action)
        steps = steps + 1
        # Some envs give a Python float for a constant reward (inverted_pendulum's 1.0).
        terminated = jnp.asarray(brax_state.done) > 0.5
        truncated = jnp.logical_and(steps >= EPISODE_LENGTH, jnp.logical_not(terminated))
        obs = jnp.asarray(brax_state.obs, jnp.float32)
        reward = jnp.asarray(brax_state.reward, jnp.float32)
        return (brax_state, steps), obs, reward, terminated, truncated

    return JaxEnv(spec=spec, reset=reset, step=step, max_episode_steps=EPISODE_LENGTH)
