"""Building blocks that the agents' learner updates share.

PPO and IMPALA differ in their losses, not in the machinery around them: both cut traces
at episode ends, average only over valid samples (envpool's auto-reset steps carry no
weight), anneal the step size linearly to zero once per update (openai/baselines,
Cleanba) and take one optimizer step per minibatch along a leading minibatch axis.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax

from sebulba.agents import update_pieces
from sebulba.errors import ConfigError

MINIBATCH_LOOPS = ("auto", "scan", "unrolled")


@flax.struct.dataclass
class TrainState:
    """A learner state: parameters, optimizer state and the number of updates done."""

    params: Any
    opt_state: optax.OptState
    update_count: jax.Array  # int32 scalar; keys and the LR schedule derive from it.


@flax.struct.dataclass
class NormalizedTrainState(TrainState):
    """TrainState with the observation / reward statistics (`agent.normalize_*` on).

    A separate class, so that the state of runs without normalisation keeps its tree and
    their checkpoints stay loadable.
    """

    normalization: Any  # sebulba.agents.normalization.NormalizationState


@flax.struct.dataclass
class PopArtTrainState(NormalizedTrainState):
    """NormalizedTrainState with PopArt's value statistics (`agent.popart` on).

    `normalization` is None unless `agent.normalize_*` is on too. A separate class, for
    the same reason as NormalizedTrainState.
    """

    popart: Any  # rlax.PopArtState of [K] arrays, one entry per task.


def train_state(params, opt_state, update_count, stats, popart=None) -> TrainState:
    """The learner state holding what is on: a TrainState without statistics, a
    NormalizedTrainState with normalisation statistics (`stats` not None), a
    PopArtTrainState with PopArt statistics (`popart` not None)."""
    if popart is not None:
        return PopArtTrainState(params, opt_state, update_count, stats, popart)
    if stats is None:
        return TrainState(params, opt_state, update_count)
    return NormalizedTrainState(params, opt_state, update_count, stats)


def restart_envs(state: TrainState) -> TrainState:
    """The state for envs that all start new episodes (a resume re-creates every env).

    The reward scaler's per-env discounted returns go back to zero, as each env's return
    does at an episode's start (baselines' VecNormalize zeroes it on reset); every
    statistic, and everything else, is kept.
    """
    normalization = getattr(state, "normalization", None)
    if normalization is None or normalization.reward is None:
        return state
    reward = normalization.reward.replace(returns=jnp.zeros_like(normalization.reward.returns))
    return state.replace(normalization=normalization.replace(reward=reward))


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


def annealed_per_update(value: float, update_index, num_updates: int) -> jax.Array:
    """`value` times baselines ppo2's frac = 1 - (update - 1) / nupdates (update counted from 1).

    `update_index` counts from 0 (`TrainState.update_count`): the first update gets `value`,
    the last `value / num_updates`.
    """
    return jnp.asarray(value * (1.0 - update_index / num_updates), jnp.float32)


def annealed_learning_rate(
    learning_rate: float, anneal: bool, num_updates: int, steps_per_update: int
) -> Callable[[jax.Array], jax.Array]:
    """Step size per optimizer step: constant within an update, linear to 0 over updates."""

    def schedule(optimizer_step):
        if not anneal:
            return jnp.asarray(learning_rate, jnp.float32)
        return annealed_per_update(learning_rate, optimizer_step // steps_per_update, num_updates)

    return schedule


def unrolls_minibatch_loop(minibatch_loop: str, slow_convolutions: bool) -> bool:
    """Resolves `agent.minibatch_loop`; True where the loop over minibatches is unrolled.

    "auto" unrolls the loop only where the rolled one is slow: on CPU learners, for
    networks with convolutions whose gradients XLA:CPU runs many times slower inside a
    loop than in straight-line code (strided ones: the Nature CNN's, 9x slower per update).
    Everywhere else it keeps the rolled scan: a smaller program that compiles in seconds
    instead of minutes, and runs as fast. The networks' own convolution
    (`sebulba.agents.convolution`) makes that true of stride-1 convolutions on CPUs: the
    MinAtar network, the IMPALA ResNet and "multi_input" on small images (`python
    benchmarks/minibatch_loop.py`, docs/benchmarks.md). An unrolled loop keeps one
    minibatch's activations alive at a time only when compiled with
    `sebulba.preflight.memory.update_compiler_options` (the pipeline does).

    Args:
      minibatch_loop: the config value, auto | scan | unrolled.
      slow_convolutions: whether the agent's network has convolutions XLA:CPU runs slowly
        in a loop (`networks.has_convolutions_slow_in_a_loop`).

    Raises:
      ConfigError: for a value other than auto, scan or unrolled.
    """
    if minibatch_loop not in MINIBATCH_LOOPS:
        raise ConfigError(
            f"agent.minibatch_loop {minibatch_loop!r} must be one of {', '.join(MINIBATCH_LOOPS)}"
        )
    return minibatch_loop == "unrolled" or (
        minibatch_loop == "auto" and slow_convolutions and jax.default_backend() == "cpu"
    )


def minibatch_steps(
    loss_fn: Callable,
    optimizer: optax.GradientTransformation,
    params,
    opt_state,
    batches,
    unroll: bool,
    *,
    accumulation_steps: int = 1,
    split: Callable | None = None,
    combine: str = "mean",
    stop_after_epoch: Callable | None = None,
    minibatches_per_epoch: int | None = None,
    last_step_stats: tuple[str, ...] = (),
):
    """One optimizer step per minibatch, looped with `lax.scan` (rolled or unrolled).

    With `accumulation_steps` k > 1 each minibatch is cut into k micro-batches by
    `split`; their gradients are computed one after the other and averaged
    (`combine="mean"`, for losses that are means over samples, as optax.MultiSteps
    does) or summed (`"sum"`, for losses that are sums over samples, which then match the
    unsplit gradient exactly).

    Args:
      loss_fn: `loss_fn(params, batch) -> (loss, stats)`, stats a dict of scalars.
      optimizer: the optax transformation (its schedule counts these steps).
      params / opt_state: where to start.
      batches: pytree of [N, ...] arrays; `[j]` is minibatch j.
      unroll: unroll the N steps (and the k micro-batches) instead of a rolled `lax.scan`.
      accumulation_steps: k micro-batches per minibatch.
      split: `split(batch, k)` -> the batch as a pytree of [k, ...] micro-batches; needed
        when k > 1 (see `sebulba.agents.minibatches`).
      combine: "mean" or "sum" of the micro-batch gradients.
      stop_after_epoch: None (every step runs), or early stopping:
        `stop_after_epoch(stats) -> bool scalar` reads the stats of each epoch's last
        minibatch (taken before its step, as CleanRL's approx_kl is); once it is True
        the remaining epochs' steps leave params and opt_state (and the optimizer's step
        count) unchanged. Stats are then averaged over the steps that ran, and
        `epochs_run` is added to them.
      minibatches_per_epoch: steps per epoch (N is a multiple); needed with
        `stop_after_epoch`.
      last_step_stats: with `stop_after_epoch`, stats reported as the last step that ran
        computed them instead of averaged (CleanRL logs the approx_kl that stopped it).

    Returns:
      (params, opt_state, stats averaged over the N minibatches and their micro-batches).
    """

    params, opt_state, stats, _ = update_pieces.stateless_minibatch_pieces(
        loss_fn,
        optimizer,
        params,
        opt_state,
        batches,
        unroll,
        accumulation_steps=accumulation_steps,
        split=split,
        combine=combine,
        stop_after_epoch=stop_after_epoch,
        minibatches_per_epoch=minibatches_per_epoch,
        last_step_stats=last_step_stats,
    ).run()
    return params, opt_state, stats


def stateful_minibatch_steps(
    loss_fn: Callable,
    optimizer: optax.GradientTransformation,
    params,
    opt_state,
    state,
    batches,
    unroll: bool,
    *,
    before_step: Callable,
    accumulation_steps: int = 1,
    split: Callable | None = None,
    combine: str = "mean",
    stop_after_epoch: Callable | None = None,
    minibatches_per_epoch: int | None = None,
    last_step_stats: tuple[str, ...] = (),
):
    """`minibatch_steps` with a state that the loss reads and each minibatch updates first.

    Runs `sebulba.agents.update_pieces.minibatch_pieces`, the same steps as pieces (which
    an agent's `plan_update` hands to the fused step).

    For statistics learned from the minibatches themselves (PopArt's, from the value
    targets): before each minibatch's gradient, `before_step` folds the minibatch into the
    state (and may change the parameters, as PopArt's output-preserving rescaling does),
    so the loss sees statistics that have already seen its own targets, the order of
    Hessel et al.'s Algorithm 1 and of rlax's `popart_update`.

    Args:
      loss_fn: `loss_fn(params, batch, state) -> (loss, stats)`.
      state: the state before the first minibatch.
      before_step: `before_step(params, batch, state) -> (params, state)` on the whole
        minibatch, before its gradient (forward passes only; no gradient is taken).
      (the other arguments as in `minibatch_steps`)

    Returns:
      (params, opt_state, stats averaged as in `minibatch_steps`, state).
    """
    return update_pieces.minibatch_pieces(
        loss_fn,
        optimizer,
        params,
        opt_state,
        state,
        batches,
        unroll,
        before_step=before_step,
        accumulation_steps=accumulation_steps,
        split=split,
        combine=combine,
        stop_after_epoch=stop_after_epoch,
        minibatches_per_epoch=minibatches_per_epoch,
        last_step_stats=last_step_stats,
    ).run()
