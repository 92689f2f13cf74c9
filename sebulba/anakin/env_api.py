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

A joint run (`env.ids`: several tasks, one policy) steps a `JointJaxEnv`: each task's
env runs the fixed block of global env indices `sebulba.environments.tasks.TaskLayout` gives it, its
state kept apart (the tasks' states are different pytrees), and its observations,
rewards and flags concatenated in env order, so the runner and the agents see one batch
of B envs whatever the tasks are. `JaxEnv` and `JointJaxEnv` offer the same three
batched operations (`batch_reset`, `batch_step`, `batch_select`), which is all
`reset_envs` and `step_envs` use.
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

from sebulba.environments.spaces import Box, EnvSpec, map_observation

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

    def batch_reset(self, keys: jax.Array) -> tuple[EnvState, Observation]:
        """keys [B] -> (states [B, ...], first observations as the spec says)."""
        state, obs = jax.vmap(self.reset)(keys)
        return state, _cast_observation(self.spec, obs)

    def batch_step(self, state: EnvState, actions: jax.Array, keys: jax.Array) -> tuple:
        """`step` over a batch: (states, obs as the spec says, reward float32, terminated
        bool, truncated bool), each [B, ...]."""
        state, obs, reward, terminated, truncated = jax.vmap(self.step)(state, actions, keys)
        return (
            state,
            _cast_observation(self.spec, obs),
            jnp.asarray(reward, jnp.float32),
            jnp.asarray(terminated, jnp.bool_),
            jnp.asarray(truncated, jnp.bool_),
        )

    def batch_select(self, flags: jax.Array, on_true: EnvState, on_false: EnvState) -> EnvState:
        """Per env, `on_true`'s state where flags [B] is True, else `on_false`'s."""
        return _select(flags, on_true, on_false)


@dataclasses.dataclass(frozen=True)
class JointJaxEnv:
    """Several JAX envs trained jointly: task k steps a fixed block of the batch.

    Attributes:
      tasks: one `JaxEnv` per task, in `env.ids` order, each with the run's spec (the
        tasks share their spaces: `sebulba.environments.tasks.check_compatible`).
      block_sizes: the envs of each task's block (`TaskLayout.block`), in env order.
      spec: the run's spec (the first task's).

    The batch's state is a tuple of the tasks' batched states ([B_k, ...] each); every
    other array (observations, rewards, flags) is concatenated to [B, ...].
    """

    tasks: tuple[JaxEnv, ...]
    block_sizes: tuple[int, ...]
    spec: EnvSpec
    max_episode_steps: int | None = None

    def _blocks(self) -> list[slice]:
        ends = np.cumsum(self.block_sizes)
        starts = ends - np.asarray(self.block_sizes)
        return [slice(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]

    def batch_reset(self, keys: jax.Array) -> tuple[tuple, Observation]:
        blocks = self._blocks()
        parts = [env.batch_reset(keys[b]) for env, b in zip(self.tasks, blocks, strict=True)]
        return tuple(state for state, _ in parts), _concatenate([obs for _, obs in parts])

    def batch_step(self, state: tuple, actions: jax.Array, keys: jax.Array) -> tuple:
        parts = [
            env.batch_step(task_state, actions[b], keys[b])
            for env, task_state, b in zip(self.tasks, state, self._blocks(), strict=True)
        ]
        states = tuple(part[0] for part in parts)
        return (states, *(_concatenate([part[i] for part in parts]) for i in range(1, 5)))

    def batch_select(self, flags: jax.Array, on_true: tuple, on_false: tuple) -> tuple:
        return tuple(
            env.batch_select(flags[b], a, c)
            for env, b, a, c in zip(self.tasks, self._blocks(), on_true, on_false, strict=True)
        )


def _concatenate(parts: list) -> Any:
    """Pytrees of [B_k, ...] leaves, one per task block -> one of [B, ...] leaves."""
    return jax.tree.map(lambda *leaves: jnp.concatenate(leaves, axis=0), *parts)


BatchOfEnvs = JaxEnv | JointJaxEnv


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


def reset_envs(env: BatchOfEnvs, keys: jax.Array) -> BatchedEnvs:
    """Starts one episode in each env: keys [B] -> `BatchedEnvs` of B envs."""
    state, obs = env.batch_reset(keys)
    batch = keys.shape[0]
    return BatchedEnvs(
        env=state,
        obs=obs,
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
    env: BatchOfEnvs, envs: BatchedEnvs, actions: jax.Array, keys: jax.Array
) -> tuple[BatchedEnvs, EnvStep]:
    """One step of every env with envpool's auto-reset convention (module docstring).

    Args:
      env: the suite's env, or a joint run's tasks (`JointJaxEnv`).
      envs: the batch before the step.
      actions: [B, *action.shape] sampled actions (clipped here for Box spaces).
      keys: [B] typed keys, one per env, for the step's (or the reset's) randomness.
    """
    actions = env_actions(env.spec, actions)
    stepped_state, stepped_obs, reward, terminated, truncated = env.batch_step(
        envs.env, actions, keys
    )
    reset_state, reset_obs = env.batch_reset(keys)
    resetting = envs.resetting
    valid = jnp.logical_not(resetting)
    reward = jnp.where(valid, reward, 0.0)
    terminated = jnp.logical_and(valid, terminated)
    # A terminal state wins over a time limit reached on the same step.
    truncated = jnp.logical_and(jnp.logical_and(valid, truncated), jnp.logical_not(terminated))
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
        env=env.batch_select(resetting, reset_state, stepped_state),
        obs=_select(resetting, reset_obs, stepped_obs),
        resetting=ended,
        episode_return=jnp.where(ended, 0.0, episode_return),
        episode_length=jnp.where(ended, 0, episode_length),
    )
    return after, step
