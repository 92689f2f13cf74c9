"""Each env's own tree search with mctx, for the agents that act by planning (MuZero,
AlphaZero).

`search_each_env` runs one mctx search per env of a batch (a vmap of batch-1 searches),
each with its env's key, so that an env's search does not depend on the other envs of
its batch or on how envs are spread over devices. `agent.search` picks the algorithm:

* "gumbel": `mctx.gumbel_muzero_policy` (Danihelka et al. 2022): Gumbel-top-k sampling
  of `agent.max_num_considered_actions` root actions and sequential halving; the
  improved policy is the softmax of the prior logits plus the completed Q-values.
  Without exploration (`exploring` False) the Gumbel noise is 0 and the search is
  deterministic.
* "muzero": `mctx.muzero_policy`, pUCT with Dirichlet noise at the root (the paper's);
  the improved policy is the visit distribution. Without exploration, no noise and the
  most visited action.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import mctx
import ml_collections

SEARCHES = ("gumbel", "muzero")


def search_each_env(
    hp: ml_collections.ConfigDict,
    params: Any,
    keys: jax.Array,
    prior_logits: jax.Array,
    values: jax.Array,
    embeddings: Any,
    recurrent_fn: Callable,
    exploring: bool,
    invalid_actions: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One search per env: (actions [B] int32, improved policies [B, A], root values [B]).

    Args:
      hp: the `agent` section (`search`, `num_simulations`, `max_depth`, the Gumbel and
        Dirichlet settings).
      params: passed to `recurrent_fn`.
      keys: [B] one key per env.
      prior_logits, values: [B, A] and [B], the root's prediction.
      embeddings: the roots' embeddings, leaves [B, ...].
      recurrent_fn: mctx's `recurrent_fn(params, key, action [N], embedding [N, ...])`.
      exploring: the acting search (noise on) or the greedy one (no noise).
      invalid_actions: [B, A] bool, True where an action is illegal at the root; None:
        every action is legal.
    """

    def one_env(env_key, embedding, logits, value, invalid):
        root = mctx.RootFnOutput(
            prior_logits=logits[None],
            value=value[None],
            embedding=jax.tree.map(lambda x: x[None], embedding),
        )
        invalid = None if invalid is None else invalid[None]
        if hp.search == "gumbel":
            output = mctx.gumbel_muzero_policy(
                params,
                env_key,
                root,
                recurrent_fn,
                hp.num_simulations,
                invalid_actions=invalid,
                max_depth=hp.max_depth,
                max_num_considered_actions=hp.max_num_considered_actions,
                gumbel_scale=hp.gumbel_scale if exploring else 0.0,
            )
            action = output.action[0]
        else:
            output = mctx.muzero_policy(
                params,
                env_key,
                root,
                recurrent_fn,
                hp.num_simulations,
                invalid_actions=invalid,
                max_depth=hp.max_depth,
                dirichlet_fraction=hp.dirichlet_fraction if exploring else 0.0,
                dirichlet_alpha=hp.dirichlet_alpha,
            )
            # The greedy action is the most visited one.
            action = output.action[0] if exploring else jnp.argmax(output.action_weights[0])
        value = output.search_tree.summary().value[0]
        return action.astype(jnp.int32), output.action_weights[0], value

    return jax.vmap(one_env)(keys, embeddings, prior_logits, values, invalid_actions)


def acting_functions(search: Callable) -> tuple[Callable, Callable]:
    """A planning agent's `act` and greedy search, from its
    `search(params, obs, keys, exploring) -> (actions, policies, root values)`:

    * `act(params, obs, keys)`: the exploring search's actions, and its improved
      policies and root values as the rollout's `search_policy` and `search_value`;
    * `greedy_search(params, obs)`: the search without noise, which is deterministic, so
      one key serves every env.

    Both call `search` as one jitted function, made here once per agent: tracing the
    vmapped searches is most of a planning agent's tracing, and each program that calls
    them with shapes already traced (the actor's step, its rollout scan, the fused
    update) reuses that trace. XLA inlines the call: the programs compute as before, to
    the bit (tests/test_muzero.py's 26 tests took 58 s of tracing instead of 91).
    """
    search = jax.jit(search, static_argnames="exploring")

    def act(params, obs, keys: jax.Array):
        actions, policy, value = search(params, obs, keys, exploring=True)
        return actions, {"search_policy": policy, "search_value": value}

    def greedy_search(params, obs):
        batch = jax.tree.leaves(obs)[0].shape[0]
        keys = jnp.broadcast_to(jax.random.key(0), (batch,))
        return search(params, obs, keys, exploring=False)

    return act, greedy_search
