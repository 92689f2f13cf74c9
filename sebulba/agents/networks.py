"""Actor-critic networks shared by the agents (flax linen).

* "mlp": separate 2x64 tanh (or ReLU) actor and critic, as in openai/baselines for
  classic control. Takes one array of any shape, flattened: a feature vector [D], or a
  grid such as MinAtar's [10, 10, C] (PureJaxRL's and gymnax-blines' MinAtar network),
  but no uint8 image (unscaled pixels saturate the dense layers; the CNNs scale and read
  them) and no discrete entry (which "multi_input" embeds).
* "nature_cnn": the DQN torso of Mnih et al. (2015). Takes uint8 images, Atari's frame
  stacks [C, H, W] or rendered images [H, W, C] (`image_layout` reads which from the
  spec), at least 36 pixels high and wide.
* "impala_resnet": the 15-layer ResNet of Espeholt et al. (2018), as used by Cleanba.
  Takes uint8 images [C, H, W] or [H, W, C] of any size.
* "multi_input": any observation pytree of arrays (dm_control's dicts of vectors,
  MiniGrid's image, direction and mission, highway-env's and Jumanji's grids): an
  encoder maps every entry to features (channels-last images [H, W, C] of C <= 4 through
  a small CNN, discrete entries through a learned embedding, every other array, scalars,
  vectors, tables and arrays of three or more axes alike, flattened) and concatenates
  them into one embedding, which feeds separate 2x64 tanh actor and critic MLPs as in
  "mlp". An array of three or more axes that is no such image ([2, 12, 12] occupancy
  grids, [4, 4, 31] planes) has a layout its shape does not tell, so flattening it, as
  an MLP would, is what the encoder can do without guessing.
* "minatar": the small CNN of pgx's MinAtar PPO example: one 2x2 convolution (32
  filters, SAME), 2x2 average pooling, a 64-unit dense layer, then separate 2x64 tanh
  actor and critic MLPs. Takes channels-last grids [H, W, C] of any channel count
  (MinAtar's [10, 10, C], C = 4 to 10; "multi_input" convolves images of C <= 4 only
  and flattens other grids).

Every network returns `(policy parameters, value [B])`; the policy parameters come from
the policy head of the action space's distribution (`sebulba.agents.distributions`):
logits for Discrete, a mean and log-std for Box.

Dense layers follow openai/baselines (Huang et al. 2022, "The 37 Implementation Details
of PPO"): orthogonal weights with gain sqrt(2) for hidden layers, 0.01 for the policy
head and 1 for the value head; zero biases. Cleanba does the same for its dense layers.
Convolutions are initialised as `conv_init` (`agent.conv_init`) says: "orthogonal"
(gain sqrt(2), baselines' Nature CNN) or "lecun_normal" (flax's default, a truncated
normal of variance 1 / fan_in, which Cleanba's IMPALA ResNet keeps). Biases are zero.
Each network declares the observations it accepts (its `observation`: a `FlatArray`,
`Pixels`, `ChannelsLastGrid` or `AnyObservation`, whose `accepts(spec)` says whether an
observation spec fits), and `check_network_fits` refuses a network that does not fit the
env before any work.

`norm="layer_norm"` puts a LayerNorm (Ba et al. 2016) after every hidden layer, dense or
convolutional, before its activation (in the ResNet after every convolution, inside the
residual blocks too): PQN's networks (Gallici et al. 2024). With `q_head` the network is
a Q-network instead: no value head, and `policy_head` is a linear Q head (one value per
discrete action) after one ReLU tower of `hidden` layers (the MLP's and the MinAtar
network's; the CNNs' torsos end in their dense layer already): obs -> Q-values [B, A].

`activation` (`agent.activation`: "tanh", baselines', or "relu", PureJaxRL's MinAtar
setting) is what follows the hidden layers of the separate actor and critic MLPs: the
whole of "mlp", and the actor-critic heads after the torsos of "minatar" and
"multi_input". The convolutional torsos, their dense layers and the Q tower stay ReLU,
as their papers have them; "nature_cnn" and "impala_resnet" have no hidden MLP to change.

Built with a recurrent `core` (`sebulba.agents.recurrent`, `agent.core`), a network runs
the core between its torso (everything up to the embedding) and its heads, and takes and
returns the core's carry (see `recurrent.through_core`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from sebulba.agents import convolution, distributions, popart, recurrent
from sebulba.agents.api import ActionSpec, ArraySpec, EnvSpec
from sebulba.agents.max_pool import max_pool as max_pool_by_slices
from sebulba.config.validation import check_choice
from sebulba.environments.spaces import is_array_spec, map_observation, zero_observation
from sebulba.errors import ConfigError
from sebulba.runtime import gpu_determinism

_HIDDEN_GAIN = float(np.sqrt(2))
_VALUE_GAIN = 1.0
_EMBEDDING_FEATURES = 16  # Per discrete observation entry ("multi_input").
_MAX_IMAGE_CHANNELS = 4  # Channels-last images have few channels; frame stacks do not.

# What follows each hidden layer of the actor-critic MLPs (`activation`).
ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu}

# What follows every hidden layer before its activation (`norm`): nothing, or a LayerNorm
# over the features (the channels of a convolution's output).
NORMS = ("none", "layer_norm")
# How the ResNet max-pools (`max_pool`): both compute the same values and, on a CPU,
# bitwise the same gradients; "slices" builds the gradient without a scatter
# (`sebulba.agents.max_pool`), "reduce_window" is flax's (XLA's select-and-scatter).
MAX_POOLS = {
    "slices": max_pool_by_slices,
    "reduce_window": lambda x, window, strides, padding: nn.max_pool(
        x, window, strides, padding=padding
    ),
}


def resolve_max_pool(max_pool: str) -> str:
    """`agent.max_pool` -> a key of `MAX_POOLS`. "auto" is "slices" where JAX computes on
    CPUs (faster there, and about half the learner's temporary memory) and on GPUs held to
    deterministic kernels (`debug.deterministic_gpu`, the default; read from this
    process's XLA_FLAGS by `gpu_determinism.deterministic_kernels`), whose
    select-and-scatter is a sorted scatter: PPO Atari's update took 0.56x the time with the
    slices on one H200. It is "reduce_window" on GPUs free to use atomic additions (flax's
    gradient was 1.14x faster there) and on TPUs, which pool natively
    (docs/architecture.md)."""
    check_choice(max_pool, "agent.max_pool", ("auto", *MAX_POOLS))
    if max_pool != "auto":
        return max_pool
    platform = jax.default_backend()
    if platform == "cpu" or (platform == "gpu" and gpu_determinism.deterministic_kernels()):
        return "slices"
    return "reduce_window"


@functools.cache
def _log_auto_max_pool(choice: str, platform: str) -> None:
    """Says once per process which max-pool "auto" took and why (agents build their
    networks several times); a run's `params_checksum` on a GPU depends on it."""
    if platform != "gpu":
        where = f"a {platform.upper()}"
    elif choice == "slices":
        where = "a GPU held to deterministic kernels"
    else:
        where = "a GPU free to pick its kernels"
    logging.info("ResNet max-pool: %s (agent.max_pool=auto on %s)", choice, where)


CONV_INITS = {
    "orthogonal": nn.initializers.orthogonal(_HIDDEN_GAIN),
    "lecun_normal": nn.initializers.lecun_normal(),
}


def _is_image(spec: ArraySpec) -> bool:
    return len(spec.shape) == 3 and spec.shape[-1] <= _MAX_IMAGE_CHANNELS


def image_layout(spec: Any) -> str | None:
    """ "CHW" or "HWC" for a rank-3 image spec, read from where its few channels are.

    envpool stacks Atari's grayscale frames first ([4, 84, 84]: channels first) and gives
    rendered colour images channels last (CarRacing's [96, 96, 3]). None when the spec is
    no such image, or when both ends could be channels (e.g. [3, 5, 4]).
    """
    if not isinstance(spec, ArraySpec) or len(spec.shape) != 3:
        return None
    first, last = (size <= _MAX_IMAGE_CHANNELS for size in (spec.shape[0], spec.shape[-1]))
    if first == last:
        return None
    return "CHW" if first else "HWC"


@dataclasses.dataclass(frozen=True)
class Pixels:
    """uint8 images of one layout or the other, at least `min_size` pixels high and wide."""

    min_size: int
    description: str = ""

    def accepts(self, observation: Any) -> bool:
        layout = image_layout(observation)
        if layout is None or observation.dtype != "uint8":
            return False
        height, width = observation.shape[1:] if layout == "CHW" else observation.shape[:2]
        return min(height, width) >= self.min_size


def _only_flattened(spec: ArraySpec) -> bool:
    """Whether "multi_input" can only flatten an entry: rank >= 3, neither discrete nor an
    image. Its layout cannot be read from its shape (which axes are space, which are
    channels), so a convolution would guess; flattening, as an MLP does, does not."""
    return spec.num_values is None and len(spec.shape) > 2 and not _is_image(spec)


@dataclasses.dataclass(frozen=True)
class AnyObservation:
    """Observation pytrees of arrays of any shape: "multi_input" encodes each entry.

    Discrete entries are embedded and channels-last images [H, W, C] (C <= 4) go through
    a small CNN; every other array is flattened, whatever its rank.
    """

    description: str = (
        "discrete entries, channels-last images [H, W, C] (C <= 4) and arrays of any "
        "other shape (flattened), alone or in a dict"
    )

    def accepts(self, observation: Any) -> bool:
        return bool(jax.tree.leaves(observation, is_leaf=is_array_spec))

    def only_flattens(self, observation: Any) -> bool:
        """Whether some entry is an array that "multi_input" can only flatten (rank >= 3
        and no image: Atari's frame stacks, MinAtar's grids, highway-env's occupancy
        grids); a network made for such arrays, where one fits, reads them better."""
        leaves = jax.tree.leaves(observation, is_leaf=is_array_spec)
        return any(_only_flattened(spec) for spec in leaves)


@dataclasses.dataclass(frozen=True)
class ChannelsLastGrid:
    """Arrays [H, W, C] of any dtype and channel count, H and W >= 2 (the pooling's window).

    Only a channels-first image (a few channels leading, e.g. Atari's [4, 84, 84]) is
    refused among rank-3 arrays: its layout is the one a shape can tell apart.
    """

    description: str = "channels-last grids [H, W, C] (any C, H and W >= 2)"

    def accepts(self, observation: Any) -> bool:
        return (
            isinstance(observation, ArraySpec)
            and len(observation.shape) == 3
            and min(observation.shape[:2]) >= 2
            and image_layout(observation) != "CHW"
        )


@dataclasses.dataclass(frozen=True)
class FlatArray:
    """One array of any shape, which an MLP flattens: [D], or a grid such as MinAtar's.

    uint8 images are refused: flattened unscaled, pixels of 0..255 saturate the first
    layer, and the CNNs scale and read them. Discrete entries are refused too: their
    values are indices, which "multi_input" embeds.
    """

    description: str = "one array of any shape, flattened (no uint8 image or discrete entry)"

    def accepts(self, observation: Any) -> bool:
        return (
            isinstance(observation, ArraySpec)
            and observation.num_values is None
            and not (observation.dtype == "uint8" and image_layout(observation) is not None)
        )


FLAT_ARRAY = FlatArray()
# Channels first (Atari's frame stacks) or last (rendered colour images), C <= 4; the
# torso scales uint8 pixels to [0, 1] and puts channels last. Nature CNN's three VALID
# convolutions (8/4, 4/2, 3/1) need 36 pixels or more; the ResNet's SAME ones any size.
NATURE_PIXELS = Pixels(36, "uint8 images [C, H, W] or [H, W, C] (C <= 4, H and W >= 36)")
RESNET_PIXELS = Pixels(1, "uint8 images [C, H, W] or [H, W, C] (C <= 4)")
ANY_OBSERVATION = AnyObservation()
GRID = ChannelsLastGrid()


def _dense(features: int, gain: float) -> nn.Dense:
    return nn.Dense(
        features, kernel_init=nn.initializers.orthogonal(gain), bias_init=nn.initializers.zeros
    )


def conv_general_dilated():
    """The convolution every Conv layer calls: on CPUs `convolution.conv_general_dilated`,
    whose gradients XLA:CPU runs as fast in a rolled loop as in straight-line code (and
    computes bitwise as JAX's own there); elsewhere JAX's, which GPUs and TPUs lay out
    themselves."""
    if jax.default_backend() == "cpu":
        return convolution.conv_general_dilated
    return jax.lax.conv_general_dilated


def _conv(init: str, features: int, kernel: int, stride: int = 1, padding="VALID") -> nn.Conv:
    return nn.Conv(
        features,
        (kernel, kernel),
        (stride, stride),
        padding=padding,
        kernel_init=CONV_INITS[init],
        bias_init=nn.initializers.zeros,
        conv_general_dilated=conv_general_dilated(),
    )


def _normalized(norm: str, x: jax.Array) -> jax.Array:
    """`x` through a LayerNorm over its last axis for norm "layer_norm"; unchanged for "none"."""
    return nn.LayerNorm()(x) if norm == "layer_norm" else x


def _pixels_to_nhwc(obs: jax.Array, channels_first: bool) -> jax.Array:
    """uint8 [B, C, H, W] (or [B, H, W, C]) -> float32 [B, H, W, C] in [0, 1]."""
    x = obs.astype(jnp.float32) / 255.0
    return jnp.transpose(x, (0, 2, 3, 1)) if channels_first else x


def _value(x: jax.Array, value_heads: int | None) -> jax.Array:
    """The value head: value [B] (None), or one value per task [B, K] (PopArt, K heads).

    PopArt rescales this layer by name (`popart.VALUE_HEAD`); the scalar head keeps
    flax's automatic name, so the parameters of runs without PopArt keep their tree.
    """
    if value_heads is None:
        return _dense(1, _VALUE_GAIN)(x)[..., 0]
    return nn.Dense(
        value_heads,
        kernel_init=nn.initializers.orthogonal(_VALUE_GAIN),
        bias_init=nn.initializers.zeros,
        name=popart.VALUE_HEAD,
    )(x)


class _Heads(nn.Module):
    """Policy parameters and value from a shared embedding."""

    policy_head: nn.Module
    value_heads: int | None = None

    @nn.compact
    def __call__(self, x):
        value = _value(x, self.value_heads)
        return self.policy_head(x), value


class _ActorCritic(nn.Module):
    """Separate actor and critic MLPs (tanh, or `activation`) on features [B, D]."""

    policy_head: nn.Module
    hidden: Sequence[int]
    value_heads: int | None = None
    norm: str = "none"
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x):
        activation = ACTIVATIONS[self.activation]
        actor, critic = x, x
        for width in self.hidden:
            actor = activation(_normalized(self.norm, _dense(width, _HIDDEN_GAIN)(actor)))
            critic = activation(_normalized(self.norm, _dense(width, _HIDDEN_GAIN)(critic)))
        value = _value(critic, self.value_heads)
        return self.policy_head(actor), value


class _QHead(nn.Module):
    """A ReLU tower of `hidden` layers, each normalised, then the Q head: [B, D] -> [B, A]."""

    q_head: nn.Module
    hidden: Sequence[int] = ()
    norm: str = "none"

    @nn.compact
    def __call__(self, x):
        for width in self.hidden:
            x = nn.relu(_normalized(self.norm, _dense(width, _HIDDEN_GAIN)(x)))
        return self.q_head(x)


def _heads(network: nn.Module, x, hidden: Sequence[int], actor_critic: bool):
    """A network's heads: Q-values [B, A] (`q_head`), else (policy parameters, value)."""
    if network.q_head:
        return _QHead(network.policy_head, hidden, network.norm)(x)
    if actor_critic:
        return _ActorCritic(
            network.policy_head, hidden, network.value_heads, network.norm, network.activation
        )(x)
    return _Heads(network.policy_head, network.value_heads)(x)


class MLP(nn.Module):
    """Separate actor and critic MLPs: obs [B, ...] flattened -> (policy parameters, value [B])."""

    observation: ClassVar[FlatArray] = FLAT_ARRAY
    policy_head: nn.Module
    hidden: Sequence[int] = (64, 64)
    core: nn.Module | None = None
    value_heads: int | None = None  # PopArt: one value per task [B, K].
    norm: str = "none"  # A key of NORMS: what follows every hidden layer.
    q_head: bool = False  # A Q-network: obs -> Q-values [B, A] (policy_head the Q head).
    activation: str = "tanh"  # A key of ACTIVATIONS: of the actor's and critic's layers.

    def torso(self, obs):
        return obs.reshape(obs.shape[0], -1).astype(jnp.float32)

    def heads(self, x):
        return _heads(self, x, self.hidden, actor_critic=True)

    @nn.compact
    def __call__(self, obs, carry=None, starts=None):
        return recurrent.through_core(self, self.torso, self.heads, obs, carry, starts)


class _ImageEncoder(nn.Module):
    """A small CNN for channels-last images [B, H, W, C] -> features [B, F]."""

    conv_init: str

    @nn.compact
    def __call__(self, image):
        # Small images (MiniGrid's 7x7 view) keep their resolution; larger ones shrink.
        stride = 1 if min(image.shape[1:3]) < 32 else 2
        x = image
        for features in (16, 32, 32):
            x = nn.relu(_conv(self.conv_init, features, 3, stride, padding="SAME")(x))
        return x.reshape(x.shape[0], -1)


class MultiInput(nn.Module):
    """Encoder of any observation pytree + actor-critic MLPs -> (policy params, value [B]).

    Attributes:
      entry_specs: the `ArraySpec` leaves of the env's observation spec, in tree-flatten
        order; they say which entries are discrete (`num_values`) and which are images.
    """

    observation: ClassVar[AnyObservation] = ANY_OBSERVATION
    policy_head: nn.Module
    entry_specs: tuple[ArraySpec, ...] = ()
    conv_init: str = "orthogonal"
    hidden: Sequence[int] = (64, 64)
    core: nn.Module | None = None
    value_heads: int | None = None  # PopArt: one value per task [B, K].
    activation: str = "tanh"  # A key of ACTIVATIONS: of the actor's and critic's layers.

    @nn.compact
    def __call__(self, obs, carry=None, starts=None):
        return recurrent.through_core(self, self.torso, self.heads, obs, carry, starts)

    def heads(self, x):
        return _ActorCritic(
            self.policy_head, self.hidden, self.value_heads, activation=self.activation
        )(x)

    def torso(self, obs):
        features = []
        for spec, x in zip(self.entry_specs, jax.tree.leaves(obs), strict=True):
            batch = x.shape[0]
            if spec.num_values is not None:
                x = nn.Embed(spec.num_values, _EMBEDDING_FEATURES)(x.astype(jnp.int32))
            else:
                # uint8 entries are pixels or bytes; scaled to [0, 1] like frames.
                scale = 1.0 / 255.0 if spec.dtype == "uint8" else 1.0
                x = x.astype(jnp.float32) * scale
                if _is_image(spec):
                    x = _ImageEncoder(self.conv_init)(x)
            # Every other array is flattened, of whatever rank: scalars, vectors, tables
            # and arrays whose layout the shape does not tell (`_only_flattened`).
            features.append(x.reshape(batch, -1))
        return jnp.concatenate(features, axis=-1)


class NatureCNN(nn.Module):
    """Mnih et al. (2015): uint8 [B, 4, 84, 84] -> (policy parameters, value [B]).

    `channels_first` False takes channels-last images [B, H, W, C] instead.
    """

    observation: ClassVar[Pixels] = NATURE_PIXELS
    policy_head: nn.Module
    conv_init: str = "orthogonal"
    channels_first: bool = True
    core: nn.Module | None = None
    value_heads: int | None = None  # PopArt: one value per task [B, K].
    norm: str = "none"  # A key of NORMS: what follows every hidden layer.
    q_head: bool = False  # A Q-network: obs -> Q-values [B, A] (policy_head the Q head).

    def torso(self, obs):
        x = _pixels_to_nhwc(obs, self.channels_first)
        x = nn.relu(_normalized(self.norm, _conv(self.conv_init, 32, 8, 4)(x)))
        x = nn.relu(_normalized(self.norm, _conv(self.conv_init, 64, 4, 2)(x)))
        x = nn.relu(_normalized(self.norm, _conv(self.conv_init, 64, 3, 1)(x)))
        x = x.reshape(x.shape[0], -1)
        return nn.relu(_normalized(self.norm, _dense(512, _HIDDEN_GAIN)(x)))

    def heads(self, x):
        return _heads(self, x, (), actor_critic=False)

    @nn.compact
    def __call__(self, obs, carry=None, starts=None):
        return recurrent.through_core(self, self.torso, self.heads, obs, carry, starts)


class _ResidualBlock(nn.Module):
    channels: int
    conv_init: str
    norm: str = "none"

    @nn.compact
    def __call__(self, x):
        y = _conv(self.conv_init, self.channels, 3, padding="SAME")(nn.relu(x))
        y = _normalized(self.norm, y)
        y = _conv(self.conv_init, self.channels, 3, padding="SAME")(nn.relu(y))
        return x + _normalized(self.norm, y)


class ImpalaResNet(nn.Module):
    """Espeholt et al. (2018): uint8 [B, 4, 84, 84] -> (policy parameters, value [B]).

    `channels_first` False takes channels-last images [B, H, W, C] instead.
    """

    observation: ClassVar[Pixels] = RESNET_PIXELS
    policy_head: nn.Module
    channels: Sequence[int] = (16, 32, 32)
    conv_init: str = "orthogonal"
    channels_first: bool = True
    core: nn.Module | None = None
    value_heads: int | None = None  # PopArt: one value per task [B, K].
    norm: str = "none"  # A key of NORMS: what follows every convolution and the dense layer.
    q_head: bool = False  # A Q-network: obs -> Q-values [B, A] (policy_head the Q head).
    max_pool: str = "reduce_window"  # A key of MAX_POOLS: the same values and gradients.

    @nn.compact
    def __call__(self, obs, carry=None, starts=None):
        return recurrent.through_core(self, self.torso, self.heads, obs, carry, starts)

    def heads(self, x):
        return _heads(self, x, (), actor_critic=False)

    def torso(self, obs):
        x = _pixels_to_nhwc(obs, self.channels_first)
        for channels in self.channels:
            x = _normalized(self.norm, _conv(self.conv_init, channels, 3, padding="SAME")(x))
            x = MAX_POOLS[self.max_pool](x, (3, 3), (2, 2), "SAME")
            x = _ResidualBlock(channels, self.conv_init, self.norm)(x)
            x = _ResidualBlock(channels, self.conv_init, self.norm)(x)
        x = nn.relu(x).reshape(x.shape[0], -1)
        return nn.relu(_normalized(self.norm, _dense(256, _HIDDEN_GAIN)(x)))


class MinAtarCNN(nn.Module):
    """pgx's MinAtar PPO network: grids [B, H, W, C] -> (policy parameters, value [B])."""

    observation: ClassVar[ChannelsLastGrid] = GRID
    policy_head: nn.Module
    conv_init: str = "orthogonal"
    hidden: Sequence[int] = (64, 64)
    core: nn.Module | None = None
    value_heads: int | None = None  # PopArt: one value per task [B, K].
    norm: str = "none"  # A key of NORMS: what follows every hidden layer.
    q_head: bool = False  # A Q-network: obs -> Q-values [B, A] (policy_head the Q head).
    activation: str = "tanh"  # A key of ACTIVATIONS: of the actor-critic heads' layers.

    @nn.compact
    def __call__(self, obs, carry=None, starts=None):
        return recurrent.through_core(self, self.torso, self.heads, obs, carry, starts)

    def heads(self, x):
        return _heads(self, x, self.hidden, actor_critic=True)

    def torso(self, obs):
        # MinAtar's grids are 0/1 already; uint8 ones would be pixels, scaled like frames.
        scale = 1.0 / 255.0 if obs.dtype == jnp.uint8 else 1.0
        x = obs.astype(jnp.float32) * scale
        x = nn.relu(_normalized(self.norm, _conv(self.conv_init, 32, 2, padding="SAME")(x)))
        x = nn.avg_pool(x, (2, 2), (2, 2), padding="VALID")
        x = x.reshape(x.shape[0], -1)
        return nn.relu(_normalized(self.norm, _dense(64, _HIDDEN_GAIN)(x)))


NETWORKS = {
    "mlp": MLP,
    "nature_cnn": NatureCNN,
    "impala_resnet": ImpalaResNet,
    "multi_input": MultiInput,
    "minatar": MinAtarCNN,
}


def _check_name(name: str) -> type[nn.Module]:
    if name not in NETWORKS:
        raise ConfigError(
            f"agent.network {name!r} is unknown: use one of {', '.join(sorted(NETWORKS))}"
        )
    return NETWORKS[name]


def make_network(
    name: str,
    action: ActionSpec,
    conv_init: str = "orthogonal",
    observation: Any = None,
    core: nn.Module | None = None,
    value_heads: int | None = None,
    policy: distributions.ActionDistribution | None = None,
    norm: str = "none",
    q_head: bool = False,
    hidden: Sequence[int] | None = None,
    activation: str = "tanh",
    hidden_default: Sequence[int] | None = None,
    max_pool: str = "auto",
) -> nn.Module:
    """Returns the actor-critic network `agent.network` names (or its Q-network).

    Args:
      name: a key of `NETWORKS`.
      action: the action spec; the network ends in its distribution's policy head.
      conv_init: a key of `CONV_INITS`; networks without convolutions ignore it.
      observation: the observation spec; only "multi_input" needs it.
      core: a recurrent core (`recurrent.make_core`) between the torso and the heads.
      value_heads: None for one value [B]; K for one value per task [B, K] (PopArt).
      policy: the action distribution whose head ends the network; by default the
        action space's (`distributions.for_action_spec`), `distributions.for_env_spec`
        for an env with an action mask.
      norm: a key of `NORMS`, what follows every hidden layer ("layer_norm": PQN's).
      q_head: a Q-network (a Discrete `action` only): no value head; the network ends in a
        linear Q head (orthogonal, gain 1, like the value head) and returns Q-values
        [B, num_actions]. Networks without the field ("multi_input") refuse it.
      hidden: the widths of the MLP layers after the torso (networks with `hidden`);
        None keeps the network's default.
      activation: a key of `ACTIVATIONS`, what follows the hidden layers of the actor and
        critic MLPs ("mlp", "minatar", "multi_input"; a Q-network's tower stays ReLU).
      hidden_default: the agent's default `agent.hidden_sizes`. A network without hidden
        layers to size refuses any other `hidden`, which it would otherwise ignore.
      max_pool: "auto" or a key of `MAX_POOLS`, how "impala_resnet" max-pools (others
        have no max-pool); see `resolve_max_pool`.
    """
    network_class = _check_name(name)
    check_choice(conv_init, "agent.conv_init", tuple(CONV_INITS))
    check_choice(norm, "agent.norm", NORMS)
    check_choice(activation, "agent.activation", tuple(ACTIVATIONS))
    fields = {field.name for field in dataclasses.fields(network_class)}
    requested_max_pool, max_pool = max_pool, resolve_max_pool(max_pool)
    if requested_max_pool == "auto" and "max_pool" in fields:
        _log_auto_max_pool(max_pool, jax.default_backend())
    if activation != "tanh" and ("activation" not in fields or q_head):
        with_mlp = sorted(n for n, c in NETWORKS.items() if "activation" in c.__dataclass_fields__)
        raise ConfigError(
            f"agent.activation {activation!r} needs actor and critic MLPs, which agent.network "
            f"{name!r}{' as a Q-network' if q_head else ''} lacks: use one of {', '.join(with_mlp)}"
        )
    if (q_head or norm != "none") and "q_head" not in fields:
        with_norm = sorted(n for n, c in NETWORKS.items() if "norm" in c.__dataclass_fields__)
        raise ConfigError(
            f"agent.network {name!r} has no Q head or norm option: use one of "
            f"{', '.join(with_norm)}"
        )
    unused_hidden = hidden is not None and "hidden" not in fields
    if unused_hidden and hidden_default is not None and tuple(hidden) != tuple(hidden_default):
        with_hidden = sorted(n for n, c in NETWORKS.items() if "hidden" in c.__dataclass_fields__)
        raise ConfigError(
            f"agent.hidden_sizes {tuple(hidden)!r} would be ignored: agent.network {name!r} has "
            f"no hidden layers to size; keep {tuple(hidden_default)!r} or use one of "
            f"{', '.join(with_hidden)}"
        )
    entry_specs = tuple(jax.tree.leaves(observation, is_leaf=is_array_spec))
    options = {
        "conv_init": conv_init,
        "entry_specs": entry_specs,
        # Read from the spec, so a CNN convolves over height and width whatever the layout.
        "channels_first": image_layout(observation) != "HWC",
    }
    if q_head:
        options.update(q_head=True, norm=norm)
        head = _dense(action.num_actions, _VALUE_GAIN)
    else:
        head = (policy or distributions.for_action_spec(action)).head()
        if norm != "none":
            options["norm"] = norm
    if hidden is not None:
        options["hidden"] = tuple(hidden)
    options["activation"] = activation
    options["max_pool"] = max_pool
    return network_class(
        policy_head=head,
        core=core,
        value_heads=value_heads,
        **{key: value for key, value in options.items() if key in fields},
    )


def has_convolutions_slow_in_a_loop(network: nn.Module, observation: Any) -> bool:
    """Whether `network`, on the observations `observation` describes, has a convolution
    whose gradient XLA:CPU runs many times slower in a rolled loop than unrolled.

    Those are the convolutions `convolution.conv_general_dilated` leaves to JAX's
    gradients: strided ones (the Nature CNN's). Decided from the traced forward pass
    (nothing runs), so it holds for every network, "multi_input" included, whose
    encoders depend on the observation spec.
    """
    dummy = zero_observation(observation, 1)
    jaxpr = jax.make_jaxpr(network.init)(jax.random.key(0), dummy)
    return any(
        not convolution.writes_gradients(eqn.invars[0].aval.ndim, **eqn.params)
        for eqn in _equations(jaxpr.jaxpr, "conv_general_dilated")
    )


def _equations(jaxpr, name: str):
    """Every equation of primitive `name` in `jaxpr` and the jaxprs nested in it."""

    def sub_jaxprs(value):
        if hasattr(value, "eqns"):  # A Jaxpr.
            yield value
        elif hasattr(value, "jaxpr") and hasattr(value.jaxpr, "eqns"):  # A ClosedJaxpr.
            yield value.jaxpr
        elif isinstance(value, tuple | list):
            for item in value:
                yield from sub_jaxprs(item)

    for eqn in jaxpr.eqns:
        if eqn.primitive.name == name:
            yield eqn
        for value in eqn.params.values():
            for sub in sub_jaxprs(value):
                yield from _equations(sub, name)


def describe_observation(observation: Any) -> str:
    """e.g. "float32 [4]" or "a dict (direction: int32 [] of 4 values, image: ...)"."""

    def describe(spec: ArraySpec) -> str:
        values = f" of {spec.num_values} values" if spec.num_values is not None else ""
        return f"{spec.dtype} [{', '.join(map(str, spec.shape))}]{values}"

    if isinstance(observation, ArraySpec):
        return describe(observation)
    described = map_observation(describe, observation)
    entries = ", ".join(f"{name}: {text}" for name, text in described.items())
    return f"a dict ({entries})"


def check_network_fits(name: str, env_spec: EnvSpec, among: Sequence[str] | None = None) -> None:
    """Raises ConfigError, naming both, unless network `name` accepts the env's observations.

    Pixels fed to an MLP, or a feature vector fed to a CNN, would otherwise compile and
    train (or fail deep inside XLA) without saying what is wrong. `among`: the networks
    the agent takes (default: all), the only ones the error suggests.
    """
    accepted = _check_name(name).observation
    if accepted.accepts(env_spec.observation):
        return
    fitting = [
        other
        for other, network_class in NETWORKS.items()
        if network_class.observation.accepts(env_spec.observation)
        and (among is None or other in among)
    ]
    # "multi_input" takes any array, but only flattens those it cannot read the layout of
    # (Atari's frame stacks, MinAtar's grids): named for them only where nothing else fits.
    if ANY_OBSERVATION.only_flattens(env_spec.observation) and set(fitting) - {"multi_input"}:
        fitting = [other for other in fitting if other != "multi_input"]
    advice = f"use agent.network={' or '.join(fitting)}" if fitting else "no built-in network fits"
    raise ConfigError(
        f"agent.network {name!r} takes {accepted.description}, but env.id "
        f"{env_spec.env_id!r} observes {describe_observation(env_spec.observation)}: {advice}"
    )
