"""The contract between the pipeline and an agent.

An agent is one module that provides `get_config()` (its hyperparameter defaults, the
`agent` section of a config) and `make(config, env_spec, sizes) -> Agent`, which checks
the agent's own value ranges and divisibility rules (raising `ConfigError`, see
`sebulba.config.validation`, whose checks are re-exported here). The pipeline only
ever calls the four pure functions of `Agent`; it never branches on the agent's name.
Evaluation and `sebulba.load_policy` also call the optional `act_greedy`. A module that
sets `SELF_PLAY = True` plays two-player games against itself (`EnvSpec.game`): it reads
each step's reward as the mover's and the turn from the game's rules; the pipeline gives
such games to self-play agents only (`plays_self_play`).

A recurrent agent also declares `initial_carry`: its `act` then takes and returns a
carry (a pytree of [B, ...] arrays). `Agent.recurrent_act` gives every agent that form
(a feed-forward agent's carry is `()`), so the pipeline has one code path; `reset_carry`
and `episode_starts` are the one reset rule that the actors and a learner replaying a
sequence share. See docs/agents.md.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

import chex
import flax.struct
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from sebulba import program_order

# The config checks agents use in `make`, re-exported with the rest of the contract.
from sebulba.config.validation import (  # noqa: F401
    NON_NEGATIVE,
    POSITIVE,
    POSITIVE_INT,
    UNIT_INTERVAL,
    Range,
    check_choice,
    check_decays,
    check_range,
    check_ranges,
    require_divisible,
)

# The spaces an agent is written against, re-exported with the rest of the contract.
from sebulba.environments.spaces import (  # noqa: F401
    ActionSpec,
    ArraySpec,
    Box,
    Discrete,
    EnvSpec,
    MultiDiscrete,
    observation_struct,
    zero_observation,
)
from sebulba.mesh import BATCH_AXIS

Params = Any
LearnerState = Any
# A pytree of [B, ...] arrays that a recurrent policy carries from step to step; `()`
# for a feed-forward one.
Carry = Any


@flax.struct.dataclass
class Rollout:
    """One rollout of T steps from B envs, time-major.

    Transition t goes from `obs[t]` with `actions[t]` to `obs[t + 1]`, earning
    `rewards[t]`. envpool resets an env on the step *after* its episode ended, ignoring
    the action: such steps have `valid[t] == False` and must not be learned from.

    Attributes:
      obs: observations shaped like `EnvSpec.observation`, each leaf [T + 1, B, ...];
        obs[T] is only used to bootstrap.
      actions: [T, B, *action.shape] actions taken, as the agent sampled them: int32
        [T, B] for Discrete, float32 [T, B, A] for Box (unclipped), int32 [T, B, K] for
        MultiDiscrete.
      rewards: [T, B] float32 learning rewards (clipped when `env.clip_rewards`).
      terminations: [T, B] bool, step t ended its episode in a terminal state.
      truncations: [T, B] bool, step t ended its episode by the time limit
        (obs[t + 1] is then a real, non-terminal state worth bootstrapping from).
      valid: [T, B] bool, False on envpool's auto-reset steps.
      policy_outputs: dict of [T + 1, B, ...] arrays (or pytrees of them) that `act`
        returned at obs[t] with the behaviour parameters (e.g. log-probabilities,
        values, the behaviour distribution's parameters).
      env_ids: [B] int32 global env index of each column; random keys of the update
        are derived from it so that minibatches do not depend on the device layout.
      initial_carry: the carry (leaves [B, ...]) that `act` received with obs[0], already
        reset where obs[0] starts an episode; with `episode_starts(valid)` a learner
        replays the carries of obs[0 .. T] exactly. `()` for feed-forward agents.
    """

    obs: chex.ArrayTree
    actions: chex.Array
    rewards: chex.Array
    terminations: chex.Array
    truncations: chex.Array
    valid: chex.Array
    policy_outputs: Mapping[str, chex.ArrayTree]
    env_ids: chex.Array
    initial_carry: chex.ArrayTree = ()

    @property
    def num_steps(self) -> int:
        return self.actions.shape[0]

    @property
    def num_envs(self) -> int:
        return self.actions.shape[1]


def rollout_env_axes(rollout: Rollout) -> Rollout:
    """The env axis of every rollout leaf (a `Rollout` of ints).

    Axis 1 of every time-major [T (+ 1), B, ...] leaf and axis 0 of the per-env leaves,
    `env_ids` [B] and `initial_carry` [B, ...], whatever the spaces or the carry make of
    the trailing axes.
    """
    time_major = jax.tree.map(lambda _: 1, rollout)
    per_env = functools.partial(jax.tree.map, lambda _: 0)
    return time_major.replace(
        env_ids=per_env(rollout.env_ids), initial_carry=per_env(rollout.initial_carry)
    )


def rollout_partition_specs(rollout: Rollout) -> Rollout:
    """PartitionSpecs that split every rollout leaf along its env axis (`rollout_env_axes`)."""
    return jax.tree.map(
        lambda axis: PartitionSpec(*([None] * axis), BATCH_AXIS), rollout_env_axes(rollout)
    )


def reset_carry(carry: Carry, starts: jax.Array, initial: Carry) -> Carry:
    """The carry with the envs where an episode starts set back to the initial carry.

    Args:
      carry: leaves [B, ...].
      starts: [B] bool, True where the observation about to be processed is the first
        of an episode.
      initial: the initial carry, leaves [B, ...] (or broadcastable to them).
    """

    def reset(current, fresh):
        flags = starts.reshape(starts.shape + (1,) * (current.ndim - starts.ndim))
        return jnp.where(flags, fresh, current)

    return jax.tree.map(reset, carry, initial)


def episode_starts(valid: jax.Array) -> jax.Array:
    """[T, B] `Rollout.valid` -> [T + 1, B] bool, True where obs[t] starts an episode.

    envpool's auto-reset step t (`valid[t]` False) returns the first observation of the
    next episode as obs[t + 1]. obs[0] is never flagged: `Rollout.initial_carry` has
    already been reset for it.
    """
    return jnp.concatenate([jnp.zeros_like(valid[:1]), jnp.logical_not(valid)], axis=0)


def plays_self_play(agent_module) -> bool:
    """Whether an agent module plays two-player games against itself (`SELF_PLAY`)."""
    return bool(getattr(agent_module, "SELF_PLAY", False))


@dataclasses.dataclass(frozen=True)
class UpdatePlan:
    """One learner update cut into pieces, for the fused step to place between env steps.

    Running `piece(carry, m, u)` for m = 0 .. num_steps - 1 and, within each, u = 0 ..
    pieces_per_step - 1, in that order from `carry`, then `finish`, is the update: `run`
    does exactly that, and an agent whose `plan_update` gives plans has its `update` run
    them, so the two cannot differ. A piece is a few kernels of bounded size (for the
    agents here: one micro-batch's gradient, the first also folding the minibatch into
    the state, the last also applying the optimizer step), so that it fits beside one env
    step; everything before the first piece (advantages, targets, shuffles) is traced
    where the plan is made, and `finish` does what follows the last.

    Attributes:
      num_steps: N, the outer loop's length (optimizer steps).
      pieces_per_step: k, pieces per outer step (micro-batches per minibatch).
      unroll: whether the outer loop is unrolled (XLA:CPU runs JAX's gradients of strided
        convolutions many times slower inside a loop's body; see
        `learner.unrolls_minibatch_loop`).
      carry: the pytree the pieces thread, before the first one.
      piece: `piece(carry, m, u) -> carry`; `m` an int32 scalar, traced in a rolled loop,
        `u` a Python int.
      finish: `finish(carry) -> (learner_state, metrics)` after the last piece.
    """

    num_steps: int
    pieces_per_step: int
    unroll: bool
    carry: Any
    piece: Callable[[Any, jax.Array, int], Any]
    finish: Callable[[Any], tuple[LearnerState, dict[str, jax.Array]]]

    @classmethod
    def whole(cls, update: Callable, state: LearnerState, rollout: Rollout) -> UpdatePlan:
        """`update(state, rollout)` as a plan of one piece, for an agent whose update is
        not cut finer: fused, it runs whole between one env step's send and receive."""
        metrics = jax.eval_shape(update, state, rollout)[1]
        zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), metrics)
        return cls(
            num_steps=1,
            pieces_per_step=1,
            unroll=False,
            carry=(state, zeros),
            piece=lambda carry, m, u: update(carry[0], rollout),
            finish=lambda carry: carry,
        )

    def step(self, carry, m: jax.Array):
        """Outer step `m`: its pieces in order."""
        k = self.pieces_per_step
        if not self.unroll and k > 2:
            # Rolled, the pieces between the first and the last are a loop of their own
            # (a traced u), so one micro-batch's activations are alive at a time.
            carry = self.piece(carry, m, 0)

            def middle(carry, u):
                return self.piece(carry, m, u), None

            carry = jax.lax.scan(middle, carry, jnp.arange(1, k - 1, dtype=jnp.int32))[0]
            return self.piece(carry, m, k - 1)
        for u in range(self.pieces_per_step):
            carry = self.piece(carry, m, u)
            if self.unroll:
                # Each piece compiled apart from the next, as in the fused step, where
                # its results are read to order the env step's receive and pass an
                # ordering select on their way to the next piece: given other readers,
                # XLA fuses the piece's last kernels differently and rounds differently
                # (PPO with 2 micro-batches on CPU; tests/test_fused.py). A rolled loop's
                # body is compiled apart anyway.
                done = program_order.completion_flag(carry)
                carry = jax.lax.optimization_barrier(program_order.after(done, carry))
        return carry

    def steps(self, carry, first: jax.Array, count: int):
        """Outer steps `first` .. `first + count - 1` in order, a loop of `step` (unrolled
        where `unroll`): one body per step, so each compiles as in `run`."""

        def body(carry, m):
            return self.step(carry, m), None

        indices = first + jnp.arange(count, dtype=jnp.int32)
        return jax.lax.scan(body, carry, indices, unroll=count if self.unroll else 1)[0]

    def run(self) -> tuple[LearnerState, dict[str, jax.Array]]:
        """The update: every step in order, then `finish`."""
        return self.finish(self.steps(self.carry, jnp.int32(0), self.num_steps))


@dataclasses.dataclass(frozen=True)
class Agent:
    """The four pure functions the pipeline calls, and optional greedy and recurrent parts.

    Attributes:
      init: `init(key) -> learner_state`. The pipeline jits it with every leaf placed on
        the learner mesh as `partition_specs` says (replicated by default).
      act: `act(params, obs, keys [B]) -> (actions [B, *action.shape], outputs)`, where
        `obs` has [B, ...] leaves shaped like `EnvSpec.observation`, actions have the
        action spec's dtype, and
        `outputs` is a dict of [B, ...] arrays stored in `Rollout.policy_outputs`. Runs
        on an actor device; `keys` holds one typed PRNG key per env. A recurrent agent
        (one with `initial_carry`) takes and returns its carry:
        `act(params, carry, obs, keys) -> (carry, actions, outputs)`.
      update: `update(learner_state, rollout) -> (learner_state, metrics)`, one whole
        learner step (all epochs and minibatches). The pipeline jits it with the state
        placed as `partition_specs` says and the rollout split along envs; `metrics` is
        a dict of scalars. Minibatches must only combine data held by one device.
      policy_params: `policy_params(learner_state) -> params` that `act` needs.
      act_greedy: `act_greedy(params, obs) -> actions [B, *action.shape]`, the policy's
        most likely action (the mode of the distribution `act` samples from). Only
        evaluation and `sebulba.load_policy(..., greedy=True)` call it; None: the agent
        can only sample. Recurrent form: `act_greedy(params, carry, obs) -> (carry,
        actions)`.
      initial_carry: `initial_carry(num_envs) -> carry` with leaves [num_envs, ...], the
        carry of an env at the start of an episode; None: a feed-forward agent.
      restart_envs: `restart_envs(learner_state) -> learner_state` for envs that all start
        new episodes (a resumed run re-creates every env): state tied to the live envs'
        episodes, such as a reward scaler's running returns, starts again with them.
        None: the learner state holds nothing of the kind.
      state_partition_specs: `state_partition_specs(learner_state) -> pytree of
        PartitionSpec` over the learner mesh (axis `BATCH_AXIS`), one per state leaf;
        called on shapes only. A replay buffer of [C, B, ...] leaves, B the global env
        axis, is `PartitionSpec(None, BATCH_AXIS)`: each learner device keeps the
        transitions of the envs whose rollout columns it holds. None: every leaf
        replicated. Every place that places the learner state (init, update, restore,
        `sebulba.check`, the Anakin runner) goes through `Agent.partition_specs`.
      plan_update: `plan_update(learner_state, rollout) -> UpdatePlan`, the update cut
        into pieces (`update(s, r)` must equal `plan_update(s, r).run()`; build `update`
        with `Agent.update_from_plan`). The fused step (`pipeline.fused`) needs it; None:
        the agent's update cannot be cut, and such runs are not fused.
      simulations_per_step: the search simulations `act` runs for each env step (MuZero,
        AlphaZero). The metrics turn it into the search's throughput per acting device
        (`search_simulations_per_s`); 0: the agent does not search.
    """

    init: Callable[[jax.Array], LearnerState]
    act: Callable[..., tuple]
    update: Callable[[LearnerState, Rollout], tuple[LearnerState, dict[str, jax.Array]]]
    policy_params: Callable[[LearnerState], Params]
    act_greedy: Callable[..., Any] | None = None
    initial_carry: Callable[[int], Carry] | None = None
    restart_envs: Callable[[LearnerState], LearnerState] | None = None
    state_partition_specs: Callable[[LearnerState], Any] | None = None
    plan_update: Callable[[LearnerState, Rollout], UpdatePlan] | None = None
    simulations_per_step: int = 0

    @staticmethod
    def update_from_plan(plan_update: Callable[[LearnerState, Rollout], UpdatePlan]) -> Callable:
        """The `update` of an agent whose update is `plan_update`'s plans, run whole."""
        return lambda state, rollout: plan_update(state, rollout).run()

    def partition_specs(self, state: LearnerState) -> Any:
        """The learner state's PartitionSpecs (a pytree like `state`; default replicated)."""
        if self.state_partition_specs is None:
            return jax.tree.map(lambda _: PartitionSpec(), state)
        return self.state_partition_specs(state)

    def state_shardings(self, state: LearnerState, sharding: Callable[[PartitionSpec], Any]):
        """The learner state's shardings: `sharding` (`layout.sharding`) maps each spec to one."""
        return jax.tree.map(sharding, self.partition_specs(state))

    @classmethod
    def with_carry(
        cls,
        *,
        init: Callable[[jax.Array], LearnerState],
        act: Callable[..., tuple],
        update: Callable[[LearnerState, Rollout], tuple[LearnerState, dict[str, jax.Array]]],
        policy_params: Callable[[LearnerState], Params],
        act_greedy: Callable[..., Any] | None,
        initial_carry: Callable[[int], Carry],
        restart_envs: Callable[[LearnerState], LearnerState] | None = None,
        state_partition_specs: Callable[[LearnerState], Any] | None = None,
        plan_update: Callable[[LearnerState, Rollout], UpdatePlan] | None = None,
    ) -> Agent:
        """An agent from recurrent-form functions; an empty carry gives a feed-forward one.

        Lets an agent with an optional recurrent core write `act` once: with a carry of
        `()` the returned agent has the feed-forward `act(params, obs, keys)` form.
        """
        if jax.tree.leaves(jax.eval_shape(lambda: initial_carry(1))):
            return cls(
                init,
                act,
                update,
                policy_params,
                act_greedy,
                initial_carry,
                restart_envs,
                state_partition_specs,
                plan_update,
            )

        def feed_forward_act(params, obs, keys):
            _, actions, outputs = act(params, (), obs, keys)
            return actions, outputs

        def feed_forward_greedy(params, obs):
            return act_greedy(params, (), obs)[1]

        greedy = None if act_greedy is None else feed_forward_greedy
        return cls(
            init,
            feed_forward_act,
            update,
            policy_params,
            greedy,
            None,
            restart_envs,
            state_partition_specs,
            plan_update,
        )

    @property
    def is_recurrent(self) -> bool:
        """Whether `act` takes and returns a carry."""
        return self.initial_carry is not None

    def new_carry(self, num_envs: int) -> Carry:
        """The carry of `num_envs` envs at the start of their episodes (`()`: feed-forward)."""
        return () if self.initial_carry is None else self.initial_carry(num_envs)

    def recurrent_act(self, params: Params, carry: Carry, obs, keys: jax.Array) -> tuple:
        """`act` in the recurrent form, whatever the agent: `(carry, actions, outputs)`."""
        if self.initial_carry is None:
            return (), *self.act(params, obs, keys)
        return self.act(params, carry, obs, keys)

    def recurrent_act_greedy(self, params: Params, carry: Carry, obs) -> tuple:
        """`act_greedy` in the recurrent form, whatever the agent: `(carry, actions)`."""
        if self.initial_carry is None:
            return (), self.act_greedy(params, obs)
        return self.act_greedy(params, carry, obs)
