"""Evaluation episodes of a JAX env: a loaded policy plays them in one jitted program.

`python -m sebulba.evaluate` plays a JAX-native env (`SUITE:TASK`) here instead of in
envpool envs, with the same contract: episode i runs in its own env, reset with the key
of (seed, 0, i) and stepped with the keys of (seed, t + 1, i) from the evaluation env
stream (`random_streams.evaluation_env_keys`, not the training envs' stream), and acts
with the policy's `act` (keys (policy seed, t, i)) or `act_greedy`, starting from the
initial carry. Each env counts its first complete episode only. Every return thus
depends only on the checkpoint, the seeds and i, not on how many episodes run side by
side.

The episodes of a batch are vmapped (`reset_envs`, `step_envs`) and stepped in a
`lax.while_loop` until every one has ended, or after `max_steps` agent steps (else the
env's own time limit); batches of `batch_size` episodes reuse one compiled program.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from sebulba import random_streams
from sebulba.anakin.env_api import JaxEnv, reset_envs, step_envs
from sebulba.policy import Policy, policy_actions


def play_episodes(
    policy: Policy,
    *,
    episodes: int,
    seed: int,
    batch_size: int,
    max_steps: int = 0,
    jax_env: JaxEnv | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Plays `episodes` complete episodes of `jax_env` (or `policy.jax_env`) with `policy`.

    Args:
      policy: a loaded policy of a run on a JAX env (`policy.jax_env` set).
      jax_env: the task to play (a joint run's other tasks); None: `policy.jax_env`.
      episodes: episodes to play.
      seed: seeds the env keys (the action keys come from `policy.seed`).
      batch_size: episodes played side by side (no effect on the results).
      max_steps: ends every episode after this many agent steps (as a truncation); 0:
        the env's `max_episode_steps`, or only the env ends them if it has none.

    Returns:
      returns [episodes] float64 (raw) and lengths [episodes] int64 (agent steps).
    """
    # The policy's spec applies `env.observation_indices`: the envs hand the policy the
    # observations it trained on.
    env = dataclasses.replace(jax_env or policy.jax_env, spec=policy.env_spec)
    limit = max_steps or env.max_episode_steps or 0
    act = functools.partial(policy_actions, policy.agent, policy.greedy, policy.seed)

    def play(params, ids):
        """Returns [b] and lengths [b] of the episodes `ids` [b] int32."""
        envs = reset_envs(env, random_streams.evaluation_env_keys(seed, jnp.int32(0), ids))
        running = jnp.ones(ids.shape, jnp.bool_)
        zeros = jnp.zeros(ids.shape, jnp.float32), jnp.zeros(ids.shape, jnp.int32)
        carry = policy.agent.new_carry(ids.shape[0])

        def going(loop):
            step, _, _, running, _, _ = loop
            return jnp.logical_and(running.any(), jnp.logical_or(limit == 0, step < limit))

        def one_step(loop):
            step, envs, carry, running, returns, lengths = loop
            # Every episode starts at step 0, from the initial carry (`reset_carry`).
            starts = jnp.full(ids.shape, step == 0)
            carry, actions = act(params, carry, envs.obs, starts, step, ids)
            keys = random_streams.evaluation_env_keys(seed, step + 1, ids)
            envs, stepped = step_envs(env, envs, actions, keys)
            # An env that has ended goes on (auto-reset); only its first episode counts.
            returns = returns + jnp.where(running, stepped.reward, 0.0)
            lengths = lengths + running.astype(jnp.int32)
            running = jnp.logical_and(running, jnp.logical_not(stepped.ended))
            return step + 1, envs, carry, running, returns, lengths

        loop = (jnp.int32(0), envs, carry, running, *zeros)
        _, _, _, _, returns, lengths = jax.lax.while_loop(going, one_step, loop)
        return returns, lengths

    play = jax.jit(play)
    # Every batch has `batch_size` rows (the last padded with episodes dropped after), so
    # one program plays them all.
    padded = -(-episodes // batch_size) * batch_size
    returns, lengths = [], []
    for first in range(0, padded, batch_size):
        ids = jax.device_put(np.arange(first, first + batch_size, dtype=np.int32), policy.device)
        batch_returns, batch_lengths = jax.device_get(play(policy.params, ids))
        returns.append(batch_returns)
        lengths.append(batch_lengths)
    returns = np.concatenate(returns)[:episodes].astype(np.float64)
    return returns, np.concatenate(lengths)[:episodes].astype(np.int64)
