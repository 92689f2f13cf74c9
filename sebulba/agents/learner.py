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


def unrolls_minibatch_loop(minibatch_loop: str, convolutional: bool) -> bool:
    """Resolves `agent.minibatch_loop`; True where the loop over minibatches is unrolled.

    "auto" unrolls only convolutional networks on CPU learners: XLA:CPU runs convolution
    gradients inside a rolled `lax.scan` 20-30x slower than straight-line code (measured
    in docs/benchmarks.md), while an unrolled MLP update gains little and compiles for
    many times longer. Everything else keeps the rolled scan (smaller programs, faster
    compiles). An unrolled loop keeps one minibatch's activations alive at a time only
    when compiled with `sebulba.preflight.memory.update_compiler_options` (the pipeline does).

    Args:
      minibatch_loop: the config value, auto | scan | unrolled.
      convolutional: whether the agent's network has convolutions
        (`networks.has_convolutions`).

    Raises:
      ConfigError: for a value other than auto, scan or unrolled.
    """
    if minibatch_loop not in MINIBATCH_LOOPS:
        raise ConfigError(
            f"agent.minibatch_loop {minibatch_loop!r} must be one of {', '.join(MINIBATCH_LOOPS)}"
        )
    return minibatch_loop == "unrolled" or (
        minibatch_loop == "auto" and convolutional and jax.default_backend() == "cpu"
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

    params, opt_state, stats, _ = stateful_minibatch_steps(
        lambda params, batch, _: loss_fn(params, batch),
        optimizer,
        params,
        opt_state,
        (),
        batches,
        unroll,
        before_step=lambda params, batch, state: (params, state),
        accumulation_steps=accumulation_steps,
        split=split,
        combine=combine,
        stop_after_epoch=stop_after_epoch,
        minibatches_per_epoch=minibatches_per_epoch,
        last_step_stats=last_step_stats,
    )
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
    num_steps = jax.tree.leaves(batches)[0].shape[0]
    gradient = jax.grad(loss_fn, has_aux=True)

    def accumulated_gradient(params, batch, state):
        micro_batches = split(batch, accumulation_steps)

        def micro_step(total, micro_batch):
            grads, stats = gradient(params, micro_batch, state)
            return jax.tree.map(jnp.add, total, grads), stats

        zeros = jax.tree.map(jnp.zeros_like, params)
        if unroll:  # Straight-line code: no convolution inside a nested XLA computation.
            total, all_stats = zeros, []
            for i in range(accumulation_steps):
                total, stats = micro_step(total, jax.tree.map(lambda x, i=i: x[i], micro_batches))
                all_stats.append(stats)
            stats = jax.tree.map(lambda *xs: jnp.stack(xs), *all_stats)
        else:
            total, stats = jax.lax.scan(micro_step, zeros, micro_batches)
        if combine == "mean":
            total = jax.tree.map(lambda g: g / accumulation_steps, total)
        return total, jax.tree.map(jnp.mean, stats)

    def step(carry, batch):
        params, opt_state, state = carry
        params, state = before_step(params, batch, state)
        if accumulation_steps > 1:
            grads, stats = accumulated_gradient(params, batch, state)
        else:
            grads, stats = gradient(params, batch, state)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state, state), stats

    if stop_after_epoch is not None:
        (params, opt_state, state), stats = _early_stopping_steps(
            step,
            (params, opt_state, state),
            batches,
            unroll,
            stop_after_epoch,
            minibatches_per_epoch,
            last_step_stats,
        )
        return params, opt_state, stats, state
    (params, opt_state, state), stats = jax.lax.scan(
        step, (params, opt_state, state), batches, unroll=num_steps if unroll else 1
    )
    return params, opt_state, jax.tree.map(jnp.mean, stats), state


def _early_stopping_steps(
    step: Callable,
    carry,
    batches,
    unroll: bool,
    stop_after_epoch: Callable,
    minibatches_per_epoch,
    last_step_stats: tuple[str, ...] = (),
):
    """The steps of `stateful_minibatch_steps` with early stopping between epochs.

    A jitted program cannot leave its loop, so every step stays in it and a flag, raised
    after an epoch whose last minibatch's stats satisfy `stop_after_epoch`, makes the
    later steps keep the carry (params, optimizer state with its step count, PopArt
    state). In a rolled scan a `lax.cond` skips their work. Unrolled, the steps are
    computed and their results dropped by a select: unrolling exists for XLA:CPU's
    convolution gradients, which run tens of times slower inside any nested computation,
    a conditional's branches included.

    Returns:
      (carry, stats averaged over the steps that ran, with `epochs_run`; those named in
      `last_step_stats` as the last step that ran computed them).
    """
    num_steps = jax.tree.leaves(batches)[0].shape[0]
    if not minibatches_per_epoch or num_steps % minibatches_per_epoch:
        raise ValueError(
            f"minibatches_per_epoch ({minibatches_per_epoch}) must divide the steps ({num_steps})"
        )
    ends_epoch = jnp.arange(num_steps) % minibatches_per_epoch == minibatches_per_epoch - 1
    stats_spec = jax.eval_shape(step, carry, jax.tree.map(lambda x: x[0], batches))[1]

    def skipped(carry, batch):
        return carry, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), stats_spec)

    def step_unless_stopped(carry_and_stopped, batch_and_end):
        carry, stopped = carry_and_stopped
        batch, ends_an_epoch = batch_and_end
        if unroll:
            stepped, stats = step(carry, batch)
            carry = jax.tree.map(lambda old, new: jnp.where(stopped, old, new), carry, stepped)
        else:
            carry, stats = jax.lax.cond(stopped, skipped, step, carry, batch)
        ran = jnp.logical_not(stopped)
        # The stats are global reductions over the minibatch (replicated on every
        # learner device), so every device takes the same decision whatever the layout.
        stopped = jnp.logical_or(stopped, jnp.logical_and(ends_an_epoch, stop_after_epoch(stats)))
        return (carry, stopped), (stats, ran)

    (carry, _), (stats, ran) = jax.lax.scan(
        step_unless_stopped,
        (carry, jnp.zeros((), bool)),
        (batches, ends_epoch),
        unroll=num_steps if unroll else 1,
    )
    weight = ran.astype(jnp.float32)
    steps_run = jnp.sum(weight)  # At least one epoch's: the first epoch always runs.
    # The steps that ran are a prefix: the last of them is the one that stopped the loop.
    last_ran = {name: stats[name][jnp.sum(ran) - 1] for name in last_step_stats}
    stats = jax.tree.map(lambda s: jnp.sum(s * weight) / steps_run, stats)
    stats.update(last_ran)
    stats["epochs_run"] = steps_run / minibatches_per_epoch
    return carry, stats
