"""Minibatches that stay on their device and do not depend on the device layout.

Inside the learner's jitted update the rollout is split along its env axis over the
learner mesh. A flat shuffle of all samples (openai/baselines ppo2) would move data
between devices (an all-to-all) and would make each minibatch depend on the number of
devices. Both schemes here only permute *within* what one device holds, and key every
permutation by the global env id, so a minibatch contains the same samples on 1, 2 or
N learner devices, in any column order:

* `time_shuffled`: each env column permutes its own T steps; minibatch j takes time
  slots [j T/M, (j+1) T/M) of every column (every minibatch is stratified by env).
* `env_groups`: envs with global ids g*M ... g*M+M-1 form a group; a per-group
  permutation sends one of them to each of the M minibatches (whole trajectories, for
  V-trace). Requires each device's env count to be a multiple of M.

Gradient accumulation cuts each minibatch once more into k micro-batches, by the same
rules: `time_micro_batches` splits a time-shuffled minibatch along its (already
shuffled) time slots, so every micro-batch keeps every env column; `env_micro_batches`
takes every k-th env column of a whole-sequence minibatch, so each device keeps 1/k of
its own columns in every micro-batch (no data moves, whatever the number of devices).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _per_env_keys(key: jax.Array, ids: jax.Array) -> jax.Array:
    return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, ids)


def time_shuffled(tree, key: jax.Array, env_ids: jax.Array, num_minibatches: int):
    """Permutes every env column's time steps independently, then cuts M minibatches.

    Args:
      tree: pytree of [T, B, ...] arrays (sharded along B).
      key: key of this update and epoch.
      env_ids: [B] global env ids (sharded like B).
      num_minibatches: M; must divide T.

    Returns:
      The pytree with leaves [M, T // M, B, ...]; [j] is minibatch j.
    """
    num_steps = jax.tree.leaves(tree)[0].shape[0]
    # [B, T] permutations, one per env; the vmap keeps each column on its device.
    perms = jax.vmap(lambda k: jax.random.permutation(k, num_steps))(_per_env_keys(key, env_ids))

    def shuffle(x):
        gathered = jax.vmap(lambda column, p: column[p], in_axes=(1, 0), out_axes=1)(x, perms)
        return gathered.reshape(num_minibatches, num_steps // num_minibatches, *x.shape[1:])

    return jax.tree.map(shuffle, tree)


def time_shuffled_epochs(rollout, key: jax.Array, num_minibatches: int, epochs: int) -> jax.Array:
    """The time steps each minibatch of every epoch takes, for `take_time_steps`.

    Epoch e shuffles `arange(T)` in every env column with `time_shuffled` and the key
    `fold_in(key, e)`, so no shuffled copy of the rollout itself is materialised.

    Args:
      rollout: the `Rollout` of T steps of B envs (its `valid` [T, B] and `env_ids` [B]).
      key: key of this update.
      num_minibatches: M; must divide T.
      epochs: how many passes over the rollout.

    Returns:
      [epochs * M, T // M, B] int32: one leading axis to loop over.
    """
    shape = rollout.valid.shape
    time_index = jnp.broadcast_to(jnp.arange(shape[0])[:, None], shape)
    return jnp.concatenate(
        [
            time_shuffled(
                time_index, jax.random.fold_in(key, epoch), rollout.env_ids, num_minibatches
            )
            for epoch in range(epochs)
        ]
    )


def take_time_steps(tree, time_index: jax.Array):
    """Gathers, column by column, the time steps `time_index` names (device-local).

    Args:
      tree: pytree of [T, B, ...] arrays (sharded along B).
      time_index: [t, B] int32 time steps of each column, e.g. a `time_shuffled` minibatch
        of `arange(T)` indices.

    Returns:
      The pytree with leaves [t, B, ...].
    """

    def take(x):
        index = time_index.reshape(*time_index.shape, *([1] * (x.ndim - 2)))
        return jnp.take_along_axis(x, index, axis=0)

    return jax.tree.map(take, tree)


def env_groups(tree, key: jax.Array, env_ids: jax.Array, num_minibatches: int):
    """Sends the M envs of every group of consecutive global ids to M minibatches.

    Args:
      tree: pytree of [T, B, ...] arrays (sharded along B). Column order must keep the
        M envs of a group adjacent and in id order (true for rollouts the pipeline builds:
        every device slice starts at a multiple of M when its size is).
      key: key of this update and epoch.
      env_ids: [B] global env ids.
      num_minibatches: M; must divide the envs held by each device.

    Returns:
      The pytree with leaves [M, T, B // M, ...]; [j] is minibatch j.
    """
    num_envs = env_ids.shape[0]
    num_groups = num_envs // num_minibatches
    group_ids = env_ids.reshape(num_groups, num_minibatches)[:, 0] // num_minibatches
    # [G, M]: which member of each group goes to minibatch j.
    perms = jax.vmap(lambda k: jax.random.permutation(k, num_minibatches))(
        _per_env_keys(key, group_ids)
    )

    def split(x):
        grouped = x.reshape(x.shape[0], num_groups, num_minibatches, *x.shape[2:])
        index = perms.reshape(1, num_groups, num_minibatches, *([1] * (x.ndim - 2)))
        chosen = jnp.take_along_axis(grouped, index, axis=2)  # [T, G, M, ...]
        return jnp.moveaxis(chosen, 2, 0)  # [M, T, G, ...]

    return jax.tree.map(split, tree)


def time_micro_batches(tree, num_micro_batches: int):
    """Cuts a `time_shuffled` minibatch into k micro-batches along its time slots.

    Args:
      tree: pytree of [t, B, ...] arrays (sharded along B).
      num_micro_batches: k; must divide t.

    Returns:
      The pytree with leaves [k, t // k, B, ...]; [i] is micro-batch i.
    """
    return jax.tree.map(
        lambda x: x.reshape(num_micro_batches, x.shape[0] // num_micro_batches, *x.shape[1:]),
        tree,
    )


def env_micro_batches(tree, num_micro_batches: int):
    """Deals the env columns of an `env_groups` minibatch to k micro-batches, strided.

    Column c goes to micro-batch c mod k, so a device holding a contiguous block of
    columns whose size is a multiple of k keeps 1/k of its block in every micro-batch.

    Args:
      tree: pytree of [T, b, ...] arrays (sharded along b).
      num_micro_batches: k; must divide the columns each device holds.

    Returns:
      The pytree with leaves [k, T, b // k, ...]; [i] is micro-batch i.
    """
    k = num_micro_batches

    def deal(x):
        strided = x.reshape(x.shape[0], x.shape[1] // k, k, *x.shape[2:])
        return jnp.moveaxis(strided, 2, 0)

    return jax.tree.map(deal, tree)
