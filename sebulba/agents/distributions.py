"""Action distributions and the policy heads that parameterise them, one per action space.

An agent asks `for_action_spec(env_spec.action)` once and then writes its act and loss
code against the returned object only, so that code is the same for every action space:

* `Categorical` (Discrete n): `rlax.softmax` over n logits.
* `DiagonalGaussian` (Box): `rlax.gaussian_diagonal` with a state-dependent mean and a
  state-independent log-std parameter (Schulman et al. 2017; openai/baselines), its
  components independent, so log-probabilities and entropies are sums over them.
* `ProductCategorical` (MultiDiscrete nvec): one softmax per component, independent:
  log-probabilities and entropies are sums over the components.
* `JointCategorical` (MultiDiscrete nvec with a joint action mask, see below): one
  softmax over the prod(nvec) combinations of the components, chosen together.

Invalid action masking (Huang et al. 2022's detail; Huang and Ontanon 2020): where the
env spec names an action mask (`EnvSpec.action_mask`), `mask_logits` replaces the logits
of illegal actions by `MASKED_LOGIT` in the actors and in the learner's recomputation
alike, so a masked action is never sampled, its probability is exactly 0 (entropies and
KL divergences are over the legal actions only) and its logit gets exactly zero gradient.

Every method takes distribution parameters with any leading batch axes [..., ] (as the
head returns them) except `sample`, which takes one key per row of a [B, ...] batch.
Heads follow openai/baselines' initialisation: orthogonal with gain 0.01, zero biases,
and a zero initial log-std (standard deviation 1).
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from sebulba.environments.spaces import ActionSpec, Box, Discrete, EnvSpec, MultiDiscrete

_POLICY_GAIN = 0.01

# The logit of an illegal action. Its softmax probability underflows to exactly 0 in
# float32, yet it stays finite: with -inf, p log p would be 0 * -inf = NaN.
MASKED_LOGIT = -1e9

with warnings.catch_warnings():
    # rlax points to distrax, which it wraps; the rlax interface is the one used here.
    warnings.simplefilter("ignore", PendingDeprecationWarning)
    import rlax

    _SOFTMAX = rlax.softmax()
    _GAUSSIAN = rlax.gaussian_diagonal()


def _policy_dense(features: int) -> nn.Dense:
    return nn.Dense(
        features,
        kernel_init=nn.initializers.orthogonal(_POLICY_GAIN),
        bias_init=nn.initializers.zeros,
    )


class _LogitsHead(nn.Module):
    """embedding [B, E] -> logits [B, num_logits]."""

    num_logits: int

    @nn.compact
    def __call__(self, x):
        return _policy_dense(self.num_logits)(x)


class _GaussianHead(nn.Module):
    """embedding [B, E] -> {"mean": [B, A], "log_std": [B, A]} (log_std shared by all)."""

    size: int

    @nn.compact
    def __call__(self, x):
        mean = _policy_dense(self.size)(x)
        log_std = self.param("log_std", nn.initializers.zeros, (self.size,))
        return {"mean": mean, "log_std": jnp.broadcast_to(log_std, mean.shape)}


@dataclasses.dataclass(frozen=True)
class Categorical:
    """A softmax over the `num_actions` actions of a Discrete space; actions int32 []."""

    num_actions: int

    def head(self) -> nn.Module:
        return _LogitsHead(self.num_actions)

    def sample(self, params: jax.Array, keys: jax.Array) -> jax.Array:
        """logits [B, n], keys [B] -> actions [B] int32."""
        return jax.vmap(_SOFTMAX.sample)(keys, params).astype(jnp.int32)

    def logprob(self, params: jax.Array, actions: jax.Array) -> jax.Array:
        """logits [..., n], actions [...] -> [...]."""
        return _SOFTMAX.logprob(actions, params)

    def entropy(self, params: jax.Array) -> jax.Array:
        """logits [..., n] -> [...]."""
        return _SOFTMAX.entropy(params)

    def mode(self, params: jax.Array) -> jax.Array:
        """logits [..., n] -> the most likely actions [...] int32."""
        return jnp.argmax(params, axis=-1).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class DiagonalGaussian:
    """Independent Gaussian components for a Box of `shape`; actions float32 [*shape]."""

    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def head(self) -> nn.Module:
        return _GaussianHead(self.size)

    def _flat(self, actions: jax.Array) -> jax.Array:
        return actions.reshape(*actions.shape[: actions.ndim - len(self.shape)], self.size)

    def sample(self, params: dict[str, jax.Array], keys: jax.Array) -> jax.Array:
        """{"mean", "log_std": [B, A]}, keys [B] -> actions [B, *shape] float32."""
        flat = jax.vmap(_GAUSSIAN.sample)(keys, params["mean"], jnp.exp(params["log_std"]))
        return flat.reshape(-1, *self.shape).astype(jnp.float32)

    def logprob(self, params: dict[str, jax.Array], actions: jax.Array) -> jax.Array:
        """{"mean", "log_std": [..., A]}, actions [..., *shape] -> [...] (summed over A)."""
        return _GAUSSIAN.logprob(self._flat(actions), params["mean"], jnp.exp(params["log_std"]))

    def entropy(self, params: dict[str, jax.Array]) -> jax.Array:
        """{"mean", "log_std": [..., A]} -> [...] (summed over A)."""
        return _GAUSSIAN.entropy(params["mean"], jnp.exp(params["log_std"]))

    def mode(self, params: dict[str, jax.Array]) -> jax.Array:
        """The means [..., *shape]."""
        mean = params["mean"]
        return mean.reshape(*mean.shape[:-1], *self.shape)


@dataclasses.dataclass(frozen=True)
class ProductCategorical:
    """Independent softmaxes, component k over nvec[k] actions; actions int32 [K]."""

    nvec: tuple[int, ...]

    def head(self) -> nn.Module:
        return _LogitsHead(sum(self.nvec))

    def _components(self, params: jax.Array) -> list[jax.Array]:
        """Concatenated logits [..., sum(nvec)] -> K logits [..., nvec[k]]."""
        return jnp.split(params, np.cumsum(self.nvec)[:-1].tolist(), axis=-1)

    def sample(self, params: jax.Array, keys: jax.Array) -> jax.Array:
        """logits [B, sum(nvec)], keys [B] -> actions [B, K] int32."""
        components = self._components(params)
        samples = [
            jax.vmap(_SOFTMAX.sample)(jax.vmap(jax.random.fold_in, (0, None))(keys, k), logits)
            for k, logits in enumerate(components)
        ]
        return jnp.stack(samples, axis=-1).astype(jnp.int32)

    def logprob(self, params: jax.Array, actions: jax.Array) -> jax.Array:
        """logits [..., sum(nvec)], actions [..., K] -> [...] (summed over K)."""
        components = self._components(params)
        return sum(_SOFTMAX.logprob(actions[..., k], logits) for k, logits in enumerate(components))

    def entropy(self, params: jax.Array) -> jax.Array:
        """logits [..., sum(nvec)] -> [...] (summed over K)."""
        return sum(_SOFTMAX.entropy(logits) for logits in self._components(params))

    def mode(self, params: jax.Array) -> jax.Array:
        """The most likely action of each component [..., K] int32."""
        modes = [jnp.argmax(logits, axis=-1) for logits in self._components(params)]
        return jnp.stack(modes, axis=-1).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class JointCategorical:
    """One softmax over every combination of K components of nvec[k] choices each, for
    a joint action mask; actions int32 [K], combination index in row-major order."""

    nvec: tuple[int, ...]

    def head(self) -> nn.Module:
        return _LogitsHead(math.prod(self.nvec))

    def _combination(self, actions: jax.Array) -> jax.Array:
        """actions [..., K] -> their row-major combination index [...]."""
        components = [actions[..., k] for k in range(len(self.nvec))]
        return jnp.ravel_multi_index(components, self.nvec, mode="clip")

    def _components(self, combination: jax.Array) -> jax.Array:
        """combination index [...] -> actions [..., K] int32."""
        return jnp.stack(jnp.unravel_index(combination, self.nvec), axis=-1).astype(jnp.int32)

    def sample(self, params: jax.Array, keys: jax.Array) -> jax.Array:
        """logits [B, prod(nvec)], keys [B] -> actions [B, K] int32."""
        return self._components(jax.vmap(_SOFTMAX.sample)(keys, params))

    def logprob(self, params: jax.Array, actions: jax.Array) -> jax.Array:
        """logits [..., prod(nvec)], actions [..., K] -> [...]."""
        return _SOFTMAX.logprob(self._combination(actions), params)

    def entropy(self, params: jax.Array) -> jax.Array:
        """logits [..., prod(nvec)] -> [...]."""
        return _SOFTMAX.entropy(params)

    def mode(self, params: jax.Array) -> jax.Array:
        """The most likely combination [..., K] int32."""
        return self._components(jnp.argmax(params, axis=-1))


ActionDistribution = Categorical | DiagonalGaussian | ProductCategorical | JointCategorical


def for_action_spec(action: ActionSpec, joint: bool = False) -> ActionDistribution:
    """The policy distribution of an action space (the only place that asks its kind).

    `joint` (a MultiDiscrete with a joint action mask) chooses the components together.
    """
    if isinstance(action, Discrete):
        return Categorical(action.num_actions)
    if isinstance(action, Box):
        return DiagonalGaussian(action.shape)
    if isinstance(action, MultiDiscrete):
        return JointCategorical(action.nvec) if joint else ProductCategorical(action.nvec)
    raise TypeError(f"no action distribution for {action}")


def for_env_spec(env_spec: EnvSpec, mask_actions: bool = True) -> ActionDistribution:
    """The policy distribution of an env: joint over a MultiDiscrete's components when the
    env's action mask is joint and `mask_actions` (`agent.mask_actions`) applies it."""
    joint = mask_actions and env_spec.action_mask_layout == "joint"
    return for_action_spec(env_spec.action, joint=joint)


def mask_logits(logits: jax.Array, legal: jax.Array) -> jax.Array:
    """logits [..., L] with the illegal ones `MASKED_LOGIT`.

    `legal` [..., *mask shape] (bool) holds the same number of flags per row as there
    are logits (`spaces.action_mask_layout`), in the logits' order. `jnp.where` passes
    no gradient to the logits it replaces. A row with no legal action keeps every logit
    equal (uniform), never NaN.
    """
    legal = legal.reshape(logits.shape).astype(bool)
    return jnp.where(legal, logits, jnp.asarray(MASKED_LOGIT, logits.dtype))
