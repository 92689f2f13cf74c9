"""Actor-critic networks shared by the agents (flax linen).

* "mlp": separate 2x64 tanh actor and critic, as in openai/baselines for classic control.
* "nature_cnn": the DQN torso of Mnih et al. (2015).
* "impala_resnet": the 15-layer ResNet of Espeholt et al. (2018), as used by Cleanba.

Initialisation follows openai/baselines (Huang et al. 2022, "The 37 Implementation
Details of PPO"): orthogonal weights with gain sqrt(2) for hidden layers, 0.01 for the
policy head and 1 for the value head; zero biases.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from sebulba.errors import ConfigError

_HIDDEN_GAIN = float(np.sqrt(2))
_POLICY_GAIN = 0.01
_VALUE_GAIN = 1.0


def _dense(features: int, gain: float) -> nn.Dense:
    return nn.Dense(
        features, kernel_init=nn.initializers.orthogonal(gain), bias_init=nn.initializers.zeros
    )


def _conv(features: int, kernel: int, stride: int = 1, padding="VALID") -> nn.Conv:
    return nn.Conv(
        features,
        (kernel, kernel),
        (stride, stride),
        padding=padding,
        kernel_init=nn.initializers.orthogonal(_HIDDEN_GAIN),
        bias_init=nn.initializers.zeros,
    )


def _frames_to_nhwc(obs: jax.Array) -> jax.Array:
    """uint8 [B, C, H, W] frames (envpool layout) -> float32 [B, H, W, C] in [0, 1]."""
    return jnp.transpose(obs.astype(jnp.float32) / 255.0, (0, 2, 3, 1))


class _Heads(nn.Module):
    """Policy logits and value from a shared embedding."""

    num_actions: int

    @nn.compact
    def __call__(self, x):
        logits = _dense(self.num_actions, _POLICY_GAIN)(x)
        value = _dense(1, _VALUE_GAIN)(x)[..., 0]
        return logits, value


class MLP(nn.Module):
    """Separate actor and critic MLPs: obs [B, D] -> (logits [B, A], value [B])."""

    num_actions: int
    hidden: Sequence[int] = (64, 64)

    @nn.compact
    def __call__(self, obs):
        x = obs.reshape(obs.shape[0], -1).astype(jnp.float32)
        actor, critic = x, x
        for width in self.hidden:
            actor = nn.tanh(_dense(width, _HIDDEN_GAIN)(actor))
            critic = nn.tanh(_dense(width, _HIDDEN_GAIN)(critic))
        logits = _dense(self.num_actions, _POLICY_GAIN)(actor)
        value = _dense(1, _VALUE_GAIN)(critic)[..., 0]
        return logits, value


class NatureCNN(nn.Module):
    """Mnih et al. (2015): uint8 [B, 4, 84, 84] -> (logits [B, A], value [B])."""

    num_actions: int

    @nn.compact
    def __call__(self, obs):
        x = _frames_to_nhwc(obs)
        x = nn.relu(_conv(32, 8, 4)(x))
        x = nn.relu(_conv(64, 4, 2)(x))
        x = nn.relu(_conv(64, 3, 1)(x))
        x = x.reshape(x.shape[0], -1)
        x = nn.relu(_dense(512, _HIDDEN_GAIN)(x))
        return _Heads(self.num_actions)(x)


class _ResidualBlock(nn.Module):
    channels: int

    @nn.compact
    def __call__(self, x):
        y = _conv(self.channels, 3, padding="SAME")(nn.relu(x))
        y = _conv(self.channels, 3, padding="SAME")(nn.relu(y))
        return x + y


class ImpalaResNet(nn.Module):
    """Espeholt et al. (2018): uint8 [B, 4, 84, 84] -> (logits [B, A], value [B])."""

    num_actions: int
    channels: Sequence[int] = (16, 32, 32)

    @nn.compact
    def __call__(self, obs):
        x = _frames_to_nhwc(obs)
        for channels in self.channels:
            x = _conv(channels, 3, padding="SAME")(x)
            x = nn.max_pool(x, (3, 3), (2, 2), padding="SAME")
            x = _ResidualBlock(channels)(x)
            x = _ResidualBlock(channels)(x)
        x = nn.relu(x).reshape(x.shape[0], -1)
        x = nn.relu(_dense(256, _HIDDEN_GAIN)(x))
        return _Heads(self.num_actions)(x)


NETWORKS = {"mlp": MLP, "nature_cnn": NatureCNN, "impala_resnet": ImpalaResNet}


def make_network(name: str, num_actions: int) -> nn.Module:
    """Returns the actor-critic network `agent.network` names."""
    if name not in NETWORKS:
        raise ConfigError(
            f"agent.network {name!r} is unknown: use one of {', '.join(sorted(NETWORKS))}"
        )
    return NETWORKS[name](num_actions=num_actions)
