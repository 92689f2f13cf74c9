"""An update's optimizer steps as pieces: micro-batch u of minibatch m, one at a time.

The agents' learner updates take one optimizer step per minibatch, each minibatch's
gradient computed in k micro-batches (`agent.gradient_accumulation_steps`). Written as
pieces, piece (m, u) computes micro-batch u's gradient of minibatch m and adds it to the
running total; its first piece first folds the minibatch into the state the loss reads
(`before_step`, PopArt's statistics), its last piece applies the optimizer step. Run in
order, (0, 0) .. (0, k - 1), (1, 0) .. (N - 1, k - 1), they compute what one loop over
minibatches computes, number for number: `MinibatchPieces.run` is that loop, and the
agents' `update` runs it. The fused step (`sebulba.fused`) runs the same pieces one
between each env step's send and receive, so a device computes the update while the
host's CPUs step the envs (`sebulba.agents.api.UpdatePlan`).

Early stopping between epochs (PPO's `target_kl`): a jitted program cannot leave its
loop, so every piece stays in it and a flag, raised after an epoch whose last
minibatch's stats satisfy `stop_after_epoch`, makes the later pieces keep the carry
(parameters, optimizer state with its step count, PopArt state). Rolled, a `lax.cond`
skips their work. Unrolled, the pieces are computed and their results dropped by a
select: unrolling exists for XLA:CPU's convolution gradients, which run tens of times
slower inside any nested computation, a conditional's branches included.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from sebulba.agents.api import UpdatePlan


@dataclasses.dataclass(frozen=True)
class MinibatchPieces:
    """The N x k pieces of one update's minibatch loop.

    Attributes:
      num_steps: N, optimizer steps (minibatches over all epochs).
      pieces_per_step: k, micro-batches per minibatch.
      unroll: whether the loop over minibatches is unrolled (`learner.unrolls_minibatch_loop`).
      carry: the pieces' carry before the first one.
      piece: `piece(carry, m, u) -> carry`, `m` an int32 scalar (traced or not), `u` a
        Python int.
      result: `result(carry) -> (params, opt_state, stats, state)` after the last piece;
        stats averaged over the steps (and micro-batches) as `learner.minibatch_steps` says.
    """

    num_steps: int
    pieces_per_step: int
    unroll: bool
    carry: Any
    piece: Callable[[Any, jax.Array, int], Any]
    result: Callable[[Any], tuple]

    def plan(self, finish: Callable[..., tuple]) -> UpdatePlan:
        """The update these pieces are the optimizer steps of: `finish(params, opt_state,
        stats, state) -> (learner_state, metrics)` does what follows the loop."""
        return UpdatePlan(
            num_steps=self.num_steps,
            pieces_per_step=self.pieces_per_step,
            unroll=self.unroll,
            carry=self.carry,
            piece=self.piece,
            finish=lambda carry: finish(*self.result(carry)),
        )

    def run(self) -> tuple:
        """Every piece in order: -> (params, opt_state, stats, state)."""
        return self.plan(lambda *result: result).run()


def stateless_minibatch_pieces(
    loss_fn: Callable,
    optimizer: optax.GradientTransformation,
    params,
    opt_state,
    batches,
    unroll: bool,
    **options,
) -> MinibatchPieces:
    """The pieces of `learner.minibatch_steps`: a loss `loss_fn(params, batch)` that reads
    no state (its `state` is `()`)."""
    return minibatch_pieces(
        lambda params, batch, _: loss_fn(params, batch),
        optimizer,
        params,
        opt_state,
        (),
        batches,
        unroll,
        before_step=lambda params, batch, state: (params, state),
        **options,
    )


def minibatch_pieces(
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
) -> MinibatchPieces:
    """The pieces of `learner.stateful_minibatch_steps` (which documents the arguments)."""
    num_steps = jax.tree.leaves(batches)[0].shape[0]
    k = accumulation_steps
    # Jitted and inlined, so that its stats' shapes (below) and every piece that computes
    # it reuse one trace: the program is the same as tracing each call, in less start-up.
    gradient = jax.jit(jax.grad(loss_fn, has_aux=True), inline=True)
    early_stopping = stop_after_epoch is not None
    if early_stopping and (not minibatches_per_epoch or num_steps % minibatches_per_epoch):
        raise ValueError(
            f"minibatches_per_epoch ({minibatches_per_epoch}) must divide the steps ({num_steps})"
        )

    def micro_batch(batch, u: int):
        if k == 1:
            return batch
        return jax.tree.map(lambda x: x[u], split(batch, k))

    first_batch = jax.tree.map(lambda x: x[0], batches)
    _, stats_spec = jax.eval_shape(gradient, params, micro_batch(first_batch, 0), state)

    def zeros(leading: int):
        return jax.tree.map(lambda s: jnp.zeros((leading, *s.shape), s.dtype), stats_spec)

    carry = {"params": params, "opt_state": opt_state, "state": state, "stats": zeros(num_steps)}
    if k > 1:
        carry["total"] = jax.tree.map(jnp.zeros_like, params)
        carry["micro_stats"] = zeros(k)
    if early_stopping:
        carry["stopped"] = jnp.zeros((), bool)
        carry["ran"] = jnp.zeros((num_steps,), bool)
    ends_epoch = None
    if early_stopping:
        steps = jnp.arange(num_steps)
        ends_epoch = steps % minibatches_per_epoch == minibatches_per_epoch - 1

    def work(carry, m, u: int):
        carry = dict(carry)
        batch = jax.tree.map(lambda x: x[m], batches)
        first = isinstance(u, int) and u == 0  # A traced u is a micro-batch in between.
        last = isinstance(u, int) and u == k - 1
        if first:
            carry["params"], carry["state"] = before_step(carry["params"], batch, carry["state"])
        grads, stats = gradient(carry["params"], micro_batch(batch, u), carry["state"])
        if k > 1:
            # From zeros, as one sum over the micro-batches adds them.
            total = jax.tree.map(jnp.zeros_like, grads) if first else carry["total"]
            carry["total"] = jax.tree.map(jnp.add, total, grads)
            carry["micro_stats"] = jax.tree.map(
                lambda buffer, s: buffer.at[u].set(s), carry["micro_stats"], stats
            )
            if not last:
                return carry
            grads = carry["total"]
            if combine == "mean":
                grads = jax.tree.map(lambda g: g / k, grads)
            stats = jax.tree.map(lambda s: jnp.mean(s, axis=0), carry["micro_stats"])
        updates, carry["opt_state"] = optimizer.update(grads, carry["opt_state"], carry["params"])
        carry["params"] = optax.apply_updates(carry["params"], updates)
        carry["stats"] = jax.tree.map(lambda buffer, s: buffer.at[m].set(s), carry["stats"], stats)
        return carry

    def piece(carry, m, u: int):
        if not early_stopping:
            return work(carry, m, u)
        stopped = carry["stopped"]
        if unroll:
            done = work(carry, m, u)
            carry = jax.tree.map(lambda old, new: jnp.where(stopped, old, new), carry, done)
        else:
            carry = jax.lax.cond(stopped, lambda c: dict(c), lambda c: work(c, m, u), carry)
        if not (isinstance(u, int) and u == k - 1):
            return carry
        carry = dict(carry)
        carry["ran"] = carry["ran"].at[m].set(jnp.logical_not(stopped))
        # The stats of a skipped step are zeros, as the flag is already raised. They are
        # global reductions over the minibatch (replicated on every learner device), so
        # every device takes the same decision whatever the layout.
        step_stats = jax.tree.map(lambda buffer: buffer[m], carry["stats"])
        stop_now = jnp.logical_and(ends_epoch[m], stop_after_epoch(step_stats))
        carry["stopped"] = jnp.logical_or(stopped, stop_now)
        return carry

    def result(carry):
        stats = carry["stats"]
        if not early_stopping:
            stats = jax.tree.map(jnp.mean, stats)
        else:
            ran = carry["ran"]
            weight = ran.astype(jnp.float32)
            steps_run = jnp.sum(weight)  # At least one epoch's: the first epoch always runs.
            # The steps that ran are a prefix: the last of them is the one that stopped it.
            last_ran = {name: stats[name][jnp.sum(ran) - 1] for name in last_step_stats}
            stats = jax.tree.map(lambda s: jnp.sum(s * weight) / steps_run, stats)
            stats.update(last_ran)
            stats["epochs_run"] = steps_run / minibatches_per_epoch
        return carry["params"], carry["opt_state"], stats, carry["state"]

    return MinibatchPieces(num_steps, k, unroll, carry, piece, result)
