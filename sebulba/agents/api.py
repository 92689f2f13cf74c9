"""The contract between the pipeline and an agent.

An agent is one module that provides `get_config()` (its hyperparameter defaults, the
`agent` section of a config) and `make(config, env_spec, sizes) -> Agent`, which checks
the agent's own value ranges and divisibility rules (raising `ConfigError`, see
`sebulba.validation`, whose checks are re-exported here). The pipeline only
ever calls the four pure functions of `Agent`; it never branches on the agent's name.
Evaluation and `sebulba.load_policy` also call the optional `act_greedy`.
See docs/agents.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import chex
import flax.struct
import jax
from jax.sharding import PartitionSpec

from sebulba.mesh import BATCH_AXIS

# The spaces an agent is written against, re-exported with the rest of the contract.
from sebulba.spaces import (  # noqa: F401
    ActionSpec,
    ArraySpec,
    Box,
    Discrete,
    EnvSpec,
    MultiDiscrete,
    observation_struct,
    zero_observation,
)

# The config checks agents use in `make`, re-exported with the rest of the contract.
from sebulba.validation import (  # noqa: F401
    NON_NEGATIVE,
    POSITIVE,
    POSITIVE_INT,
    UNIT_INTERVAL,
    Range,
    check_choice,
    check_range,
    check_ranges,
    require_divisible,
)

Params = Any
LearnerState = Any


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
    """

    obs: chex.ArrayTree
    actions: chex.Array
    rewards: chex.Array
    terminations: chex.Array
    truncations: chex.Array
    valid: chex.Array
    policy_outputs: Mapping[str, chex.ArrayTree]
    env_ids: chex.Array

    @property
    def num_steps(self) -> int:
        return self.actions.shape[0]

    @property
    def num_envs(self) -> int:
        return self.actions.shape[1]


def rollout_partition_specs(rollout: Rollout) -> Rollout:
    """PartitionSpecs that split every rollout leaf along its env axis.

    The env axis is axis 1 of every time-major [T (+ 1), B, ...] leaf and axis 0 of
    `env_ids` [B], whatever the spaces make of the trailing axes.
    """
    time_major = jax.tree.map(lambda _: PartitionSpec(None, BATCH_AXIS), rollout)
    return time_major.replace(env_ids=PartitionSpec(BATCH_AXIS))


@dataclasses.dataclass(frozen=True)
class Agent:
    """The four pure functions the pipeline calls, and an optional greedy policy.

    Attributes:
      init: `init(key) -> learner_state`. The pipeline jits it with every leaf
        replicated on the learner mesh.
      act: `act(params, obs, keys [B]) -> (actions [B, *action.shape], outputs)`, where
        `obs` has [B, ...] leaves shaped like `EnvSpec.observation`, actions have the
        action spec's dtype, and
        `outputs` is a dict of [B, ...] arrays stored in `Rollout.policy_outputs`. Runs
        on an actor device; `keys` holds one typed PRNG key per env.
      update: `update(learner_state, rollout) -> (learner_state, metrics)`, one whole
        learner step (all epochs and minibatches). The pipeline jits it with the state
        replicated and the rollout split along envs; `metrics` is a dict of scalars.
        Minibatches must only combine data held by one device.
      policy_params: `policy_params(learner_state) -> params` that `act` needs.
      act_greedy: `act_greedy(params, obs) -> actions [B, *action.shape]`, the policy's
        most likely action (the mode of the distribution `act` samples from). Only
        evaluation and `sebulba.load_policy(..., greedy=True)` call it; None: the agent
        can only sample.
    """

    init: Callable[[jax.Array], LearnerState]
    act: Callable[[Params, jax.Array, jax.Array], tuple[jax.Array, dict[str, jax.Array]]]
    update: Callable[[LearnerState, Rollout], tuple[LearnerState, dict[str, jax.Array]]]
    policy_params: Callable[[LearnerState], Params]
    act_greedy: Callable[[Params, jax.Array], jax.Array] | None = None
