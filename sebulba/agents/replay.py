"""A replay buffer held on the learner devices, sharded along the env axis.

The buffer keeps every env's transitions in its own column of fixed-capacity ring storage,
time-major like a `Rollout`: leaves [C, B, ...] with B the *global* env axis, placed with
`PartitionSpec(None, BATCH_AXIS)` (`PARTITION_SPEC`). The learner mesh splits a rollout
along the same axis, so each learner device stores the transitions of the envs whose
rollout columns it holds: adding a rollout moves no data between devices. Sampling draws,
for every env column, positions keyed by `(learner key, update, gradient step, global env
id)` and gathers them within the column (device-local, as `minibatches.take_time_steps`):
a sample holds the same transitions on 1, 2 or N learner devices.

Why not flashbax's buffers: its flat and trajectory buffers sample uniformly over the
whole buffer, so a sample gathers rows from every device (an all-to-all) and its
composition follows the number of devices; their storage ([add_batch, time, ...]) and
`add` would shard, but sampling is the part that must stay per column. The ring here is
the few lines of that storage, with the write position shared by all envs (every rollout
adds T steps to every env), which keeps `add` a `dynamic_update_slice`.

Transition at position p of a column: obs[p], actions[p], rewards[p], terminations[p],
truncations[p], valid[p]; its next observation is obs[p + 1], written by the same rollout
or, for a rollout's last step, as the next rollout's obs[0]. So position p can start an
n-step sample once positions p .. p + n are written.
"""

from __future__ import annotations

import chex
import flax.struct
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from sebulba.agents.api import EnvSpec, Rollout, zero_observation
from sebulba.config.sizes import Sizes
from sebulba.mesh import BATCH_AXIS

# Every buffer leaf is [C, B, ...]: split along B, like the rollout's env axis.
PARTITION_SPEC = PartitionSpec(None, BATCH_AXIS)


@flax.struct.dataclass
class Replay:
    """Ring storage of C steps per env, leaves [C, B, ...] (see the module docstring)."""

    obs: chex.ArrayTree
    actions: chex.Array
    rewards: chex.Array
    terminations: chex.Array
    truncations: chex.Array
    valid: chex.Array


@flax.struct.dataclass
class Sample:
    """n-step transitions, leaves [S, B, ...] (S samples per env column).

    Attributes:
      obs: observations where the transitions start.
      actions: actions taken there.
      returns: discounted rewards of the steps taken, sum_j gamma^j r_j (at most n of
        them, stopped at an episode end).
      discounts: gamma^m for m steps taken, 0 after a termination.
      next_obs: observations to bootstrap from, m steps on.
      weights: 1.0, or 0.0 where the first step is envpool's auto-reset step.
    """

    obs: chex.ArrayTree
    actions: chex.Array
    returns: chex.Array
    discounts: chex.Array
    next_obs: chex.ArrayTree
    weights: chex.Array


def env_steps_after(update_count: jax.Array, steps_per_update: int) -> jax.Array:
    """Env steps once update `update_count + 1` has consumed its rollout, as float32.

    For schedules over env steps (epsilon): an int32 product would wrap beyond 2**31
    steps, and below 2**24 this float is exactly the integer (one correctly rounded
    product of exact factors, as converting the integer product would give).
    """
    return (update_count + 1).astype(jnp.float32) * jnp.float32(steps_per_update)


def empty_for(env_spec: EnvSpec, sizes: Sizes, capacity: int) -> Replay:
    """An empty buffer of `capacity` steps per env for this run's rollouts (shapes only
    are traced: no rollout is built)."""
    num_envs, num_steps = sizes.num_envs, sizes.num_steps
    action = env_spec.action

    def example():
        return Rollout(
            obs=jax.tree.map(
                lambda o: jnp.zeros((num_steps + 1, num_envs, *o.shape[1:]), o.dtype),
                zero_observation(env_spec.observation, 1),
            ),
            actions=jnp.zeros((num_steps, num_envs, *action.shape), action.dtype),
            rewards=jnp.zeros((num_steps, num_envs), jnp.float32),
            terminations=jnp.zeros((num_steps, num_envs), bool),
            truncations=jnp.zeros((num_steps, num_envs), bool),
            valid=jnp.zeros((num_steps, num_envs), bool),
            policy_outputs={},
            env_ids=jnp.zeros((num_envs,), jnp.int32),
        )

    return empty(jax.eval_shape(example), capacity)


def state_partition_specs(state):
    """A replay agent's learner state placed: its `buffer` split along envs
    (`PARTITION_SPEC`), every other leaf replicated (`Agent.state_partition_specs`)."""
    replicated = jax.tree.map(lambda _: PartitionSpec(), state)
    return replicated.replace(buffer=jax.tree.map(lambda _: PARTITION_SPEC, state.buffer))


def restart_envs(state):
    """A replay agent's `Agent.restart_envs`: its `buffer` with the last stored step invalid,
    since the restarted envs' first observations do not follow it (`invalidate_last`)."""
    return state.replace(buffer=invalidate_last(state.buffer, state.count))


def empty(rollout: Rollout, capacity: int) -> Replay:
    """An empty buffer of `capacity` steps per env for rollouts shaped like `rollout`."""

    def zeros(x, steps_axis_from=1):
        return jnp.zeros((capacity, *x.shape[steps_axis_from:]), x.dtype)

    return Replay(
        obs=jax.tree.map(zeros, rollout.obs),
        actions=zeros(rollout.actions),
        rewards=zeros(rollout.rewards),
        terminations=zeros(rollout.terminations),
        truncations=zeros(rollout.truncations),
        valid=zeros(rollout.valid),
    )


def write_steps(store, new, count: jax.Array):
    """Writes `new` (leaves [T, B, ...]) at positions count .. count + T - 1 of every
    column of ring storage `store` (a pytree of [C, B, ...] leaves, C a multiple of T).

    The ring's write for any per-step data an agent keeps beside its `Replay` (MuZero's
    search results), so that both stay position for position in step.
    """

    def write(ring, steps):
        index = (count % ring.shape[0],) + (0,) * (ring.ndim - 1)
        return jax.lax.dynamic_update_slice(ring, steps.astype(ring.dtype), index)

    return jax.tree.map(write, store, new)


def add(replay: Replay, rollout: Rollout, count: jax.Array) -> Replay:
    """Writes the rollout's T steps at positions count .. count + T - 1 of every column.

    Args:
      count: int32 scalar, steps per env written so far; the capacity C must be a
        multiple of T, so the T slots never wrap within one rollout.
    """
    steps = rollout.num_steps
    new = Replay(
        obs=jax.tree.map(lambda x: x[:steps], rollout.obs),
        actions=rollout.actions,
        rewards=rollout.rewards,
        terminations=rollout.terminations,
        truncations=rollout.truncations,
        valid=rollout.valid,
    )
    return write_steps(replay, new, count)


def sampleable(count: jax.Array, n_step: int) -> jax.Array:
    """Whether some position can start an n-step sample: count >= n + 1 (bool scalar)."""
    return count >= n_step + 1


def take(tree, positions: jax.Array, capacity: int):
    """Gathers positions [S, B] of every column (device-local), leaves [S, B, ...]."""
    slots = positions % capacity

    def take(x):
        index = slots.reshape(*slots.shape, *([1] * (x.ndim - 2)))
        return jnp.take_along_axis(x, index, axis=0)

    return jax.tree.map(take, tree)


def sample(
    replay: Replay,
    count: jax.Array,
    key: jax.Array,
    env_ids: jax.Array,
    samples_per_env: int,
    n_step: int,
    gamma: float,
) -> Sample:
    """Draws `samples_per_env` n-step transitions from every env column, uniformly.

    Args:
      count: int32 scalar, steps per env written so far (at least n + 1).
      key: this gradient step's key; column b draws with `fold_in(key, env_ids[b])`.
      env_ids: [B] global env ids, sharded like the buffer's B.

    Returns:
      A `Sample` with leaves [samples_per_env, B, ...].
    """
    capacity = replay.actions.shape[0]
    starts = sample_starts(count, capacity, key, env_ids, samples_per_env, n_step)  # [S, B]
    offsets = jnp.arange(n_step)[:, None, None]
    steps = starts[None] + offsets  # [n, S, B]
    flat = steps.reshape(n_step * samples_per_env, -1)
    gathered = take(
        (replay.rewards, replay.terminations, replay.truncations, replay.valid), flat, capacity
    )
    rewards, terminations, truncations, valid = (
        x.reshape(n_step, samples_per_env, -1) for x in gathered
    )
    # Step j is taken while no earlier step ended the episode and it is not an invalid
    # step (envpool's auto-reset step, or a step whose successor a resume lost).
    ended = jnp.logical_or(terminations, truncations)
    before_end = jnp.cumprod(
        jnp.concatenate([jnp.ones_like(ended[:1]), ~ended[:-1]], axis=0).astype(jnp.int32), axis=0
    )
    taken = before_end * jnp.cumprod(valid.astype(jnp.int32), axis=0)  # [n, S, B]
    num_taken = jnp.sum(taken, axis=0)  # [S, B], m
    powers = gamma ** jnp.arange(n_step, dtype=jnp.float32)[:, None, None]
    returns = jnp.sum(taken * powers * rewards, axis=0)
    last = jnp.maximum(num_taken - 1, 0)
    terminated = jnp.take_along_axis(terminations, last[None], axis=0)[0]
    discounts = jnp.where(terminated, 0.0, gamma ** num_taken.astype(jnp.float32))
    obs = take(replay.obs, starts, capacity)
    actions = take(replay.actions, starts, capacity)
    next_obs = take(replay.obs, starts + jnp.maximum(num_taken, 1), capacity)
    weights = (num_taken > 0).astype(jnp.float32)
    return Sample(obs, actions, returns, discounts, next_obs, weights)


def sample_starts(
    count: jax.Array,
    capacity: int,
    key: jax.Array,
    env_ids: jax.Array,
    samples_per_env: int,
    lookahead: int,
) -> jax.Array:
    """Positions [S, B] drawn uniformly per column among those whose next `lookahead`
    positions are written (count >= lookahead + 1); column b draws with
    `fold_in(key, env_ids[b])`, so a sample does not depend on the device layout."""
    low = jnp.maximum(count - capacity, 0)
    high = count - lookahead  # Exclusive: position p needs p + lookahead written.
    keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, env_ids)
    return jax.vmap(lambda k: jax.random.randint(k, (samples_per_env,), low, high), out_axes=1)(
        keys
    )


def sample_prioritised_starts(
    priorities: jax.Array,
    count: jax.Array,
    key: jax.Array,
    env_ids: jax.Array,
    samples_per_env: int,
    lookahead: int,
    exponent: float,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Positions [S, B] drawn per column with probability P proportional to
    priority ** `exponent` among the positions `sample_starts` would draw from; column b
    draws with `fold_in(key, env_ids[b])`, so a sample does not depend on the device layout.

    Args:
      priorities: [C, B] positive, one per stored step, in the ring's slots.

    Returns:
      (positions [S, B], their probabilities P [S, B], the number of positions each
      column drew from), for importance weights (N P) ** -beta.
    """
    capacity = priorities.shape[0]
    low = jnp.maximum(count - capacity, 0)
    high = count - lookahead
    # The position each slot holds (the latest written there, or a future one if empty).
    slot_positions = low + (jnp.arange(capacity) - low) % capacity
    startable = slot_positions < high
    logits = jnp.where(startable[:, None], exponent * jnp.log(priorities), -jnp.inf)
    keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, env_ids)

    def column(column_key, column_logits):
        slots = jax.random.categorical(column_key, column_logits, shape=(samples_per_env,))
        return slots, jax.nn.softmax(column_logits)[slots]

    slots, probabilities = jax.vmap(column, in_axes=(0, 1), out_axes=1)(keys, logits)
    return slot_positions[slots], probabilities, high - low


def write_at(ring: jax.Array, positions: jax.Array, values: jax.Array) -> jax.Array:
    """`ring` [C, B] with `values` [S, B] written at positions [S, B] of each column
    (device-local). Positions drawn twice in a column must carry the same value."""
    slots = positions % ring.shape[0]
    return jax.vmap(lambda r, i, v: r.at[i].set(v), in_axes=1, out_axes=1)(ring, slots, values)


def invalidate_last(replay: Replay, count: jax.Array) -> Replay:
    """Marks the last written step invalid: its successor will not be stored.

    A resumed Sebulba run restarts every env, so the next rollout's obs[0] does not follow
    the step at position count - 1; no sample may take that step.
    """
    capacity = replay.actions.shape[0]
    slot = (count - 1) % capacity
    row = jnp.where(count > 0, False, replay.valid[slot])
    return replay.replace(valid=replay.valid.at[slot].set(row))
