"""Actor-critic networks shared by the agents (flax linen).

* "mlp": separate 2x64 tanh actor and critic, as in openai/baselines for classic control.
  Takes a flat feature vector [D].
* "nature_cnn": the DQN torso of Mnih et al. (2015). Takes uint8 frames [C, H, W].
* "impala_resnet": the 15-layer ResNet of Espeholt et al. (2018), as used by Cleanba.
  Takes uint8 frames [C, H, W].

Dense layers follow openai/baselines (Huang et al. 2022, "The 37 Implementation Details
of PPO"): orthogonal weights with gain sqrt(2) for hidden layers, 0.01 for the policy
head and 1 for the value head; zero biases. Cleanba does the same for its dense layers.
Convolutions are initialised as `conv_init` (`agent.conv_init`) says: "orthogonal"
(gain sqrt(2), baselines' Nature CNN) or "lecun_normal" (flax's default, a truncated
normal of variance 1 / fan_in, which Cleanba's IMPALA ResNet keeps). Biases are zero.
Each network declares the observations it accepts (`ObservationKind`), and
`check_network_fits` refuses a network that does not fit the env before any work.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from sebulba.agents.api import EnvSpec
from sebulba.errors import ConfigError
from sebulba.validation import check_choice

_HIDDEN_GAIN = float(np.sqrt(2))
_POLICY_GAIN = 0.01
_VALUE_GAIN = 1.0

CONV_INITS = {
    "orthogonal": nn.initializers.orthogonal(_HIDDEN_GAIN),
    "lecun_normal": nn.initializers.lecun_normal(),
}


@dataclasses.dataclass(frozen=True)
class ObservationKind:
    """The observations a network accepts: their rank and, if it matters, their dtype."""

    description: str
    rank: int
    dtype: str | None = None

    def accepts(self, shape: tuple[int, ...], dtype: str) -> bool:
        return len(shape) == self.rank and self.dtype in (None, dtype)


FEATURE_VECTOR = ObservationKind("a flat feature vector [D]", rank=1)
# Channels first, as envpool stacks them; the torso scales uint8 pixels to [0, 1].
FRAMES = ObservationKind("uint8 frames [C, H, W]", rank=3, dtype="uint8")


def _dense(features: int, gain: float) -> nn.Dense:
    return nn.Dense(
        features, kernel_init=nn.initializers.orthogonal(gain), bias_init=nn.initializers.zeros
    )


def _conv(init: str, features: int, kernel: int, stride: int = 1, padding="VALID") -> nn.Conv:
    return nn.Conv(
        features,
        (kernel, kernel),
        (stride, stride),
        padding=padding,
        kernel_init=CONV_INITS[init],
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

    observation: ClassVar[ObservationKind] = FEATURE_VECTOR
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

    observation: ClassVar[ObservationKind] = FRAMES
    num_actions: int
    conv_init: str = "orthogonal"

    @nn.compact
    def __call__(self, obs):
        x = _frames_to_nhwc(obs)
        x = nn.relu(_conv(self.conv_init, 32, 8, 4)(x))
        x = nn.relu(_conv(self.conv_init, 64, 4, 2)(x))
        x = nn.relu(_conv(self.conv_init, 64, 3, 1)(x))
        x = x.reshape(x.shape[0], -1)
        x = nn.relu(_dense(512, _HIDDEN_GAIN)(x))
        return _Heads(self.num_actions)(x)


class _ResidualBlock(nn.Module):
    channels: int
    conv_init: str

    @nn.compact
    def __call__(self, x):
        y = _conv(self.conv_init, self.channels, 3, padding="SAME")(nn.relu(x))
        y = _conv(self.conv_init, self.channels, 3, padding="SAME")(nn.relu(y))
        return x + y


class ImpalaResNet(nn.Module):
    """Espeholt et al. (2018): uint8 [B, 4, 84, 84] -> (logits [B, A], value [B])."""

    observation: ClassVar[ObservationKind] = FRAMES
    num_actions: int
    channels: Sequence[int] = (16, 32, 32)
    conv_init: str = "orthogonal"

    @nn.compact
    def __call__(self, obs):
        x = _frames_to_nhwc(obs)
        for channels in self.channels:
            x = _conv(self.conv_init, channels, 3, padding="SAME")(x)
            x = nn.max_pool(x, (3, 3), (2, 2), padding="SAME")
            x = _ResidualBlock(channels, self.conv_init)(x)
            x = _ResidualBlock(channels, self.conv_init)(x)
        x = nn.relu(x).reshape(x.shape[0], -1)
        x = nn.relu(_dense(256, _HIDDEN_GAIN)(x))
        return _Heads(self.num_actions)(x)


NETWORKS = {"mlp": MLP, "nature_cnn": NatureCNN, "impala_resnet": ImpalaResNet}


def _check_name(name: str) -> type[nn.Module]:
    if name not in NETWORKS:
        raise ConfigError(
            f"agent.network {name!r} is unknown: use one of {', '.join(sorted(NETWORKS))}"
        )
    return NETWORKS[name]


def make_network(name: str, num_actions: int, conv_init: str = "orthogonal") -> nn.Module:
    """Returns the actor-critic network `agent.network` names.

    Args:
      name: a key of `NETWORKS`.
      num_actions: size of the discrete action space (A).
      conv_init: a key of `CONV_INITS`; networks without convolutions ignore it.
    """
    network_class = _check_name(name)
    check_choice(conv_init, "agent.conv_init", tuple(CONV_INITS))
    has_convs = "conv_init" in {field.name for field in dataclasses.fields(network_class)}
    return network_class(num_actions=num_actions, **({"conv_init": conv_init} if has_convs else {}))


def check_network_fits(name: str, env_spec: EnvSpec) -> None:
    """Raises ConfigError, naming both, unless network `name` accepts the env's observations.

    Pixels fed to an MLP, or a feature vector fed to a CNN, would otherwise compile and
    train (or fail deep inside XLA) without saying what is wrong.
    """
    accepted = _check_name(name).observation
    if accepted.accepts(env_spec.obs_shape, env_spec.obs_dtype):
        return
    fitting = [
        other
        for other, network_class in NETWORKS.items()
        if network_class.observation.accepts(env_spec.obs_shape, env_spec.obs_dtype)
    ]
    advice = f"use agent.network={' or '.join(fitting)}" if fitting else "no built-in network fits"
    shape = ", ".join(map(str, env_spec.obs_shape))
    raise ConfigError(
        f"agent.network {name!r} takes {accepted.description}, but env.id "
        f"{env_spec.env_id!r} observes {env_spec.obs_dtype} [{shape}]: {advice}"
    )
