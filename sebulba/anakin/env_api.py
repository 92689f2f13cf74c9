"""The JAX env protocol, and envpool's auto-reset convention for a batch of JAX envs.

A suite adapter (`sebulba.anakin.suites`) describes one env of a JAX-native suite as a
`JaxEnv`: its `EnvSpec`, and pure `reset(key)` / `step(state, action, key)` functions
without auto-reset. `reset_envs` and `step_envs` run a batch of them (vmap) the way
envpool runs its pools, so that a JAX env's rollout is the same `Rollout` an envpool
rollout is and every agent learns from it unchanged:

* The step after an episode ended resets that env, ignoring the action: it earns no
  reward, ends nothing and is marked invalid (`Rollout.valid` False). The observation
  that step returns is the first of the next episode.
* The step that ends an episode returns the episode's real last observation, so a
  truncated episode (time limit) is bootstrapped from the state it stopped in, whatever
  the suite does with final observations in its own auto-reset wrappers.

This costs one env step per episode, as envpool does. Episode returns and lengths are
counted here, on the device, and reported on the step that ends the episode.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import chex
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from sebulba.spaces import Box, EnvSpec, map_observation

EnvState = Any  # A suite's state of one env (a pytree); batched [B, ...] by the runner.
Observation = Any  # A pytree shaped like `EnvSpec.observation`.


@dataclasses.dataclass(frozen=True)
class JaxEnv:
    """One env of a JAX-native suite, as pure functions (the runner vmaps them).

    Attributes:
      spec: observations and actions; `env_id` is the sebulba id ("gymnax:CartPole-v1").
      reset: `reset(key) -> (state, obs)`, the first observation of an episode.
      step: `step(state, action, key) -> (state, obs, reward, terminated, truncated)`
        with no auto-reset: `obs` is the observation of the state reached (the last of
        the episode when it ends), `reward` a float32 scalar, `terminated` True where
        the episode reached a terminal state, `truncated` True where it was cut by the
        suite's time limit without reaching one. `action` has the action spec's shape
        and dtype (Box actions already clipped to their bounds).
      max_episode_steps: the suite's time limit, or None if it has none.
    """

    spec: EnvSpec
    reset: Callable[[jax.Array], tuple[EnvState, Observation]]
    step: Callable[[EnvState, jax.Array, jax.Array], tuple]
    max_episode_steps: int | None = None


@flax.struct.dataclass
class BatchedEnvs:
    """A batch of JAX envs between two steps; every leaf is [B, ...].

    Attributes:
      env: the suite's state of each env.
      obs: the observation the policy acts on next.
      resetting: True where the previous step ended an episode, so the next step is the
        reset (envpool's convention).
      episode_return: the raw return of the running episode so far.
      episode_length: agent steps of the running episode so far.
    """

    env: EnvState
    obs: Observation
    resetting: chex.Array
    episode_return: chex.Array
    episode_length: chex.Array


@flax.struct.dataclass
class EnvStep:
    """What one batched step reports; every leaf is [B].

    Attributes:
      reward: the raw reward (0 on a reset step).
      terminated, truncated: the step ended the episode (never on a reset step).
      valid: False on a reset step, which must not be learned from.
      episode_return, episode_length: of the episode this step ended (0 elsewhere).
    """

    reward: chex.Array
    terminated: chex.Array
    truncated: chex.Array
    valid: chex.Array
    episode_return: chex.Array
    episode_length: chex.Array

    @property
    def ended(self) -> chex.Array:
        return jnp.logical_or(self.terminated, self.truncated)


def _cast_observation(spec: EnvSpec, obs: Observation) -> Observation:
    """The suite's observation as the spec says: its dtypes, its kept components."""

    def convert(array_spec, x):
        x = jnp.asarray(x, array_spec.dtype)
        return x if array_spec.components is None else x[..., list(array_spec.components)]

    return map_observation(convert, spec.observation, obs)


def reset_envs(env: JaxEnv, keys: jax.Array) -> BatchedEnvs:
    """Starts one episode in each env: keys [B] -> `BatchedEnvs` of B envs."""
    state, obs = jax.vmap(env.reset)(keys)
    batch = keys.shape[0]
    return BatchedEnvs(
        env=state,
        obs=_cast_observation(env.spec, obs),
        resetting=jnp.zeros((batch,), jnp.bool_),
        episode_return=jnp.zeros((batch,), jnp.float32),
        episode_length=jnp.zeros((batch,), jnp.int32),
    )


def env_actions(spec: EnvSpec, actions: jax.Array) -> jax.Array:
    """Sampled actions as the env steps with them: Box actions clipped to their bounds.

    The jnp twin of `ActionSpec.to_env`; the rollout keeps the unclipped sample.
    """
    action = spec.action
    if isinstance(action, Box):
        low = np.reshape(np.asarray(action.low, np.float32), action.shape)
        high = np.reshape(np.asarray(action.high, np.float32), action.shape)
        return jnp.clip(actions.astype(jnp.float32), low, high)
    return actions.astype(action.dtype)


def _select(flags: jax.Array, on_true: Any, on_false: Any) -> Any:
    def pick(a, b):
        return jnp.where(flags.reshape(flags.shape + (1,) * (a.ndim - 1)), a, b)

    return jax.tree.map(pick, on_true, on_false)


def step_envs(
    env: JaxEnv, envs: BatchedEnvs, actions: jax.Array, keys: jax.Array
) -> tuple[BatchedEnvs, EnvStep]:
    """One step of every env with envpool's auto-reset convention (module docstring).

    Args:
      env: the suite's env.
      envs: the batch before the step.
      actions: [B, *action.shape] sampled actions (clipped here for Box spaces).
      keys: [B] typed keys, one per env, for the step's (or the reset's) randomness.
    """
    actions = env_actions(env.spec, actions)
    stepped_state, stepped_obs, reward, terminated, truncated = jax.vmap(env.step)(
        envs.env, actions, keys
    )
    reset_state, reset_obs = jax.vmap(env.reset)(keys)
    resetting = envs.resetting
    valid = jnp.logical_not(resetting)
    reward = jnp.where(valid, jnp.asarray(reward, jnp.float32), 0.0)
    terminated = jnp.logical_and(valid, jnp.asarray(terminated, jnp.bool_))
    # A terminal state wins over a time limit reached on the same step.
    truncated = jnp.logical_and(
        jnp.logical_and(valid, jnp.asarray(truncated, jnp.bool_)), jnp.logical_not(terminated)
    )
    ended = jnp.logical_or(terminated, truncated)
    episode_return = envs.episode_return + reward
    episode_length = envs.episode_length + valid.astype(jnp.int32)
    step = EnvStep(
        reward=reward,
        terminated=terminated,
        truncated=truncated,
        valid=valid,
        episode_return=jnp.where(ended, episode_return, 0.0),
        episode_length=jnp.where(ended, episode_length, 0),
    )
    after = BatchedEnvs(
        env=_select(resetting, reset_state, stepped_state),
        obs=_select(
            resetting,
            _cast_observation(env.spec, reset_obs),
            _cast_observation(env.spec, stepped_obs),
        ),
        resetting=ended,
        episode_return=jnp.where(ended, 0.0, episode_return),
        episode_length=jnp.where(ended, 0, episode_length),
    )
    return after, step
