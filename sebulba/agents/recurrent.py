"""Recurrent cores, and one interface for acting and replaying with or without one.

"lstm" (`agent.core`) puts an LSTM (Hochreiter & Schmidhuber 1997; flax
`nn.OptimizedLSTMCell`) between a network's torso and its heads, as CleanRL's
`ppo_atari_lstm` and the IMPALA paper (Espeholt et al. 2018) do. It follows the five LSTM
details of Huang et al. (2022, "The 37 Implementation Details of PPO"): orthogonal
weights (gain 1) and zero biases; a zero initial state; the state reset where an episode
starts, inside a sequence too, by the episode flags (`sebulba.agents.api.reset_carry`,
the rule the actors apply); whole env sequences per minibatch (the agents' choice); and
the states recomputed during training from each sequence's stored initial state
(`ActorCritic.sequence`).

`ActorCritic` wraps an actor-critic network of `networks.py` with its core, so an agent
writes one `act` (a step from a carry) and one loss (a replay of sequences) for both: a
feed-forward network's carry is `()` and its replay is one batched call.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from sebulba.agents import distributions
from sebulba.agents.api import Carry, reset_carry
from sebulba.environments.spaces import zero_observation
from sebulba.errors import ConfigError

CORES = ("none", "lstm")


class LSTMCore(nn.Module):
    """An LSTM over time-major features, reset where an episode starts.

    Attributes:
      hidden_size: units of the cell (CleanRL ppo_atari_lstm: 128).
    """

    hidden_size: int

    @nn.compact
    def __call__(self, carry: Carry, features: jax.Array, starts: jax.Array):
        """carry ((c, h), each [B, H]), features [S, B, F], starts [S, B] bool ->
        (carry after step S - 1, outputs [S, B, H])."""
        cell = nn.OptimizedLSTMCell(
            self.hidden_size,
            kernel_init=nn.initializers.orthogonal(1.0),
            recurrent_kernel_init=nn.initializers.orthogonal(1.0),
            bias_init=nn.initializers.zeros,
        )

        def step(cell, carry, inputs):
            x, start = inputs
            carry = reset_carry(carry, start, zero_lstm_carry(x.shape[0], self.hidden_size))
            return cell(carry, x)

        scan = nn.scan(step, variable_broadcast="params", split_rngs={"params": False})
        return scan(cell, carry, (features, starts))


def zero_lstm_carry(num_envs: int, hidden_size: int) -> Carry:
    """The zero initial state (c, h) of an `LSTMCore`, each [num_envs, hidden_size]."""
    zeros = jnp.zeros((num_envs, hidden_size), jnp.float32)
    return zeros, zeros


def check_core(core: str) -> None:
    """Raises ConfigError naming `agent.core` unless it is one of `CORES`."""
    if core not in CORES:
        raise ConfigError(f"agent.core {core!r} is unknown: use one of {', '.join(CORES)}")


def make_core(core: str, hidden_size: int) -> LSTMCore | None:
    """The core module `agent.core` names (None for "none")."""
    check_core(core)
    return LSTMCore(hidden_size) if core == "lstm" else None


@dataclasses.dataclass(frozen=True)
class ActorCritic:
    """An actor-critic network with an optional recurrent core, seen one way by agents.

    Attributes:
      network: a `networks.py` module, built with the core (`make_network(core=...)`).
      observation: the env's observation spec.
      hidden_size: the core's units (unused without a core).
      action_mask: the observation entry of the legal actions (`EnvSpec.action_mask`),
        or None: the illegal actions' logits are masked (`distributions.mask_logits`) in
        every output, so actors and learner see the same masked policy.
    """

    network: nn.Module
    observation: Any
    hidden_size: int = 0
    action_mask: str | None = None

    def _masked(self, policy, obs):
        if self.action_mask is None:
            return policy
        return distributions.mask_logits(policy, obs[self.action_mask])

    @property
    def is_recurrent(self) -> bool:
        return self.network.core is not None

    def initial_carry(self, num_envs: int) -> Carry:
        """The zero carry of `num_envs` envs; `()` without a core."""
        return zero_lstm_carry(num_envs, self.hidden_size) if self.is_recurrent else ()

    def init(self, key: jax.Array):
        """The network's parameters."""
        if not self.is_recurrent:
            return self.network.init(key, zero_observation(self.observation, 1))
        obs = zero_observation(self.observation, 1, 1)
        return self.network.init(key, obs, self.initial_carry(1), jnp.zeros((1, 1), bool))

    def step(self, params, carry: Carry, obs):
        """One step of B envs: obs [B, ...] -> (carry, policy parameters [B, ...], value [B]).

        The carry must already be reset where obs starts an episode (the pipeline does).
        """
        if not self.is_recurrent:
            policy, value = self.network.apply(params, obs)
            return (), self._masked(policy, obs), value
        num_envs = jax.tree.leaves(obs)[0].shape[0]
        sequence = jax.tree.map(lambda x: x[None], obs)
        carry, (policy, value) = self.network.apply(
            params, sequence, carry, jnp.zeros((1, num_envs), bool)
        )
        return carry, self._masked(jax.tree.map(lambda x: x[0], policy), obs), value[0]

    def sequence(self, params, initial_carry: Carry, obs, starts: jax.Array):
        """Replays S steps of B envs: obs [S, B, ...] -> policy parameters, value [S, B].

        Args:
          initial_carry: leaves [B, ...], the carry of obs[0] (`Rollout.initial_carry`).
          starts: [S, B] bool, where obs[s] starts an episode (`api.episode_starts`);
            the core is reset there, as the actors reset it.
        """
        if self.is_recurrent:
            _, (policy, values) = self.network.apply(params, obs, initial_carry, starts)
            return self._masked(policy, obs), values
        # Env-major flattening keeps the sharded env axis leading: no data moves between
        # devices (a time-major flatten would interleave the devices' shards).
        steps, envs = starts.shape
        flat_obs = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:]), obs)
        policy, values = self.network.apply(params, flat_obs)

        def time_major(x):
            return jnp.swapaxes(x.reshape(envs, steps, *x.shape[1:]), 0, 1)

        return self._masked(jax.tree.map(time_major, policy), obs), time_major(values)


def through_core(module: nn.Module, torso, heads, obs, carry=None, starts=None):
    """Runs a network's torso, its core (if any) and its heads.

    Without a core: obs [N, ...] -> (policy parameters, value [N]). With one: obs
    [S, B, ...], carry, starts [S, B] -> (carry, (policy parameters [S, B, ...],
    value [S, B])); the torso sees the S x B observations as one env-major batch, so no
    data moves between the devices that hold the env axis.
    """
    if module.core is None:
        return heads(torso(obs))
    steps, envs = starts.shape
    flat = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:]), obs)
    features = torso(flat)
    features = jnp.swapaxes(features.reshape(envs, steps, -1), 0, 1)
    carry, outputs = module.core(carry, features, starts)
    return carry, heads(outputs)
