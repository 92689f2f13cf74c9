"""Building blocks that the agents' learner updates share.

PPO and IMPALA differ in their losses, not in the machinery around them: both cut traces
at episode ends, average only over valid samples (envpool's auto-reset steps carry no
weight), anneal the step size linearly to zero once per update (openai/baselines,
Cleanba) and take one optimizer step per minibatch along a leading minibatch axis.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

from sebulba.errors import ConfigError

MINIBATCH_LOOPS = ("auto", "scan", "unrolled")


def masked_mean(x: jax.Array, weight: jax.Array) -> jax.Array:
    """Mean of `x` over the samples of weight 1 (0 when there are none)."""
    return jnp.sum(x * weight) / jnp.maximum(jnp.sum(weight), 1.0)


def masked_var(x: jax.Array, weight: jax.Array) -> jax.Array:
    """Variance of `x` over the samples of weight 1."""
    return masked_mean((x - masked_mean(x, weight)) ** 2, weight)


def explained_variance(targets: jax.Array, predictions: jax.Array, weight: jax.Array) -> jax.Array:
    """1 - Var[targets - predictions] / Var[targets] over valid samples (1 is perfect)."""
    residual = masked_var(targets - predictions, weight)
    return 1.0 - residual / jnp.maximum(masked_var(targets, weight), 1e-8)


def episode_discounts(terminations, truncations, gamma: float, trace_lambda: float):
    """Per-step discounts and trace coefficients for [T, B] episode flags.

    Returns:
      discount_t [T, B]: 0 after a termination (nothing to bootstrap), else `gamma`.
      lambda_t [T, B]: 0 after a termination or a truncation, else `trace_lambda`: the
        trace never crosses into the next episode, while a truncated step still
        bootstraps from the value of the real observation that follows it.
    """
    discount_t = gamma * (1.0 - terminations.astype(jnp.float32))
    episode_end = jnp.logical_or(terminations, truncations)
    lambda_t = trace_lambda * (1.0 - episode_end.astype(jnp.float32))
    return discount_t, lambda_t


def annealed_learning_rate(
    learning_rate: float, anneal: bool, num_updates: int, steps_per_update: int
) -> Callable[[jax.Array], jax.Array]:
    """Step size per optimizer step: constant within an update, linear to 0 over updates."""

    def schedule(optimizer_step):
        if not anneal:
            return jnp.asarray(learning_rate, jnp.float32)
        update_index = optimizer_step // steps_per_update
        return jnp.asarray(learning_rate * (1.0 - update_index / num_updates), jnp.float32)

    return schedule


def unrolls_minibatch_loop(minibatch_loop: str) -> bool:
    """Resolves `agent.minibatch_loop`; True where the loop over minibatches is unrolled.

    "auto" unrolls on CPU learners, where XLA runs convolution gradients inside a rolled
    `lax.scan` about 8x slower, and keeps the rolled scan elsewhere (smaller programs,
    faster compiles).

    Raises:
      ConfigError: for a value other than auto, scan or unrolled.
    """
    if minibatch_loop not in MINIBATCH_LOOPS:
        raise ConfigError(
            f"agent.minibatch_loop {minibatch_loop!r} must be one of {', '.join(MINIBATCH_LOOPS)}"
        )
    return minibatch_loop == "unrolled" or (
        minibatch_loop == "auto" and jax.default_backend() == "cpu"
    )


def minibatch_steps(
    loss_fn: Callable,
    optimizer: optax.GradientTransformation,
    params,
    opt_state,
    batches,
    unroll: bool,
):
    """One optimizer step per minibatch, in order.

    Args:
      loss_fn: `loss_fn(params, batch) -> (loss, stats)`, stats a dict of scalars.
      optimizer: the optax transformation (its schedule counts these steps).
      params / opt_state: where to start.
      batches: pytree of [N, ...] arrays; `[j]` is minibatch j.
      unroll: unroll the N steps instead of a rolled `lax.scan`.

    Returns:
      (params, opt_state, stats averaged over the N minibatches).
    """
    num_steps = jax.tree.leaves(batches)[0].shape[0]

    def step(carry, batch):
        params, opt_state = carry
        grads, stats = jax.grad(loss_fn, has_aux=True)(params, batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), stats

    (params, opt_state), stats = jax.lax.scan(
        step, (params, opt_state), batches, unroll=num_steps if unroll else 1
    )
    return params, opt_state, jax.tree.map(jnp.mean, stats)
