"""Observation normalisation and reward scaling, as state beside the parameters.

Two of the continuous-control details of Huang et al. (2022, "The 37 Implementation
Details of Proximal Policy Optimization"), which openai/baselines' `VecNormalize` and gym's
`NormalizeObservation` / `NormalizeReward` wrappers (used by CleanRL's
`ppo_continuous_action`) implement on the env side:

* observations: `clip((x - mean) / sqrt(var + 1e-8), -clip, clip)` with the running mean and
  variance of every observation seen, per floating observation leaf (integer leaves, such
  as Atari frames or MiniGrid's uint8 image, pass through unchanged);
* rewards: `clip(r_t / sqrt(var + 1e-8), -clip, clip)` with the running variance of each
  env's discounted return `R_t = r_t + gamma R_{t-1}`, reset when an episode ends.

Here the statistics live in the learner state, are updated by the learner update from the
rollout it consumes (Chan et al. 1979's parallel merge of moments, with a fixed reduction
order) and travel to the actors inside the policy parameters, so the statistics are
checkpointed, deterministic and layout-independent like the parameters themselves. The
differences from the wrappers (statistics frozen for a rollout, not updated per step) are
in docs/agents.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import chex
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from sebulba.environments.spaces import ArraySpec, map_observation

# Added to the variance before the square root, as gym and baselines do.
VARIANCE_EPSILON = 1e-8
# The initial count of a `RunningMeanStd`: the prior of mean 0 and variance 1 weighs this
# many samples (gym's and baselines' epsilon), so the first batch dominates it at once.
PRIOR_COUNT = 1e-4


@flax.struct.dataclass
class RunningMeanStd:
    """Running mean and (population) variance of samples shaped [...] (float32)."""

    mean: jax.Array
    var: jax.Array
    count: jax.Array  # float32 scalar: samples seen (plus PRIOR_COUNT).


def running_mean_std(shape: tuple[int, ...] = ()) -> RunningMeanStd:
    """The prior: mean 0, variance 1, weighing `PRIOR_COUNT` samples."""
    return RunningMeanStd(
        mean=jnp.zeros(shape, jnp.float32),
        var=jnp.ones(shape, jnp.float32),
        count=jnp.asarray(PRIOR_COUNT, jnp.float32),
    )


def merge_moments(
    stats: RunningMeanStd, batch_mean: jax.Array, batch_var: jax.Array, batch_count: jax.Array
) -> RunningMeanStd:
    """Chan et al.'s parallel update: the moments of the union of two sample sets.

    Args:
      stats: the running moments.
      batch_mean, batch_var: [...] mean and population variance of a batch.
      batch_count: scalar, the batch's number of samples (0 leaves `stats` unchanged).
    """
    delta = batch_mean - stats.mean
    total = stats.count + batch_count
    mean = stats.mean + delta * batch_count / total
    sum_squares = stats.var * stats.count + batch_var * batch_count
    sum_squares += jnp.square(delta) * stats.count * batch_count / total
    return RunningMeanStd(mean=mean, var=sum_squares / total, count=total)


def update_from_batch(
    stats: RunningMeanStd, x: jax.Array, weight: jax.Array | None = None
) -> RunningMeanStd:
    """Merges the samples of `x` [N..., *stats.mean.shape] (leading axes are samples).

    Args:
      stats: the running moments of samples shaped like `stats.mean`.
      x: the batch; every leading axis beyond the sample shape indexes samples.
      weight: optional [N...] 0/1 weights of the samples (0: not a sample).
    """
    sample_axes = tuple(range(x.ndim - stats.mean.ndim))
    x = x.astype(jnp.float32)
    if weight is None:
        weight = jnp.ones(x.shape[: len(sample_axes)], jnp.float32)
    weight = weight.astype(jnp.float32).reshape(weight.shape + (1,) * stats.mean.ndim)
    count = jnp.sum(weight)
    safe_count = jnp.maximum(count, 1.0)
    mean = jnp.sum(x * weight, axis=sample_axes) / safe_count
    var = jnp.sum(jnp.square(x - mean) * weight, axis=sample_axes) / safe_count
    return merge_moments(stats, mean, var, count)


def normalize(stats: RunningMeanStd, x: jax.Array, clip: float) -> jax.Array:
    """clip((x - mean) / sqrt(var + 1e-8), -clip, clip), as float32."""
    scaled = (x.astype(jnp.float32) - stats.mean) / jnp.sqrt(stats.var + VARIANCE_EPSILON)
    return jnp.clip(scaled, -clip, clip)


@flax.struct.dataclass
class RewardScaler:
    """Reward-scaling state: each env's discounted return and the returns' moments."""

    returns: jax.Array  # [num_envs] float32, indexed by global env id.
    stats: RunningMeanStd  # Of the returns, scalar moments.


def reward_scaler(num_envs: int) -> RewardScaler:
    """Zero returns for `num_envs` global envs and the prior moments."""
    return RewardScaler(returns=jnp.zeros((num_envs,), jnp.float32), stats=running_mean_std())


def scale_rewards(
    scaler: RewardScaler,
    rewards: jax.Array,
    episode_ends: jax.Array,
    valid: jax.Array,
    env_ids: jax.Array,
    *,
    gamma: float,
    clip: float,
) -> tuple[jax.Array, RewardScaler]:
    """Scales a rollout's rewards by the running std of the discounted return, step by step.

    For each step t, in order (gym's `NormalizeReward` with gym <= 0.23's reset):
      R <- gamma R + r_t on the valid envs (invalid steps, envpool's auto-resets, keep R);
      the moments of the returns merge those of the step's valid envs' R;
      scaled r_t = clip(r_t / sqrt(var + 1e-8), -clip, clip) with the merged variance;
      R <- 0 where step t ended its episode (termination or truncation).

    Args:
      scaler: the state before the rollout; `returns` indexed by global env id.
      rewards, episode_ends, valid: [T, B], as in `Rollout` (episode_ends is
        terminations | truncations).
      env_ids: [B] global env id of each column (columns are not in global order).

    Returns:
      (scaled rewards [T, B] float32, the state after the rollout).
    """
    chex.assert_equal_shape([rewards, episode_ends, valid])
    chex.assert_rank(env_ids, 1)

    def step(carry, inputs):
        returns, stats = carry
        reward_t, end_t, valid_t = inputs
        returns = jnp.where(valid_t, gamma * returns + reward_t, returns)
        stats = update_from_batch(stats, returns, valid_t)
        scaled = jnp.clip(reward_t / jnp.sqrt(stats.var + VARIANCE_EPSILON), -clip, clip)
        return (jnp.where(end_t, 0.0, returns), stats), scaled

    initial = (scaler.returns[env_ids], scaler.stats)
    (returns, stats), scaled = jax.lax.scan(
        step, initial, (rewards.astype(jnp.float32), episode_ends, valid)
    )
    return scaled, RewardScaler(returns=scaler.returns.at[env_ids].set(returns), stats=stats)


def _normalized_leaf(spec: ArraySpec) -> bool:
    """Only floating observations are normalised (integer ones are pixels or indices)."""
    return np.issubdtype(np.dtype(spec.dtype), np.floating)


@flax.struct.dataclass
class NormalizationState:
    """The learner state's normalisation statistics (None where switched off).

    Attributes:
      observation: a `RunningMeanStd` per floating observation leaf (None for integer
        leaves), shaped like the observation spec; None when observations are not
        normalised.
      reward: the `RewardScaler`, or None when rewards are not scaled.
    """

    observation: Any
    reward: RewardScaler | None


@dataclasses.dataclass(frozen=True)
class Normalizer:
    """An agent's observation and reward normalisation, bound to a run's settings.

    Attributes:
      observation_spec: `EnvSpec.observation`.
      num_envs: global number of envs (the reward scaler's returns).
      normalize_observations / normalize_rewards: which normalisations are on.
      observation_clip / reward_clip: the symmetric clipping bounds.
      gamma: the discount of the returns whose std scales the rewards.
    """

    observation_spec: Any
    num_envs: int
    normalize_observations: bool
    normalize_rewards: bool
    observation_clip: float
    reward_clip: float
    gamma: float

    @property
    def enabled(self) -> bool:
        return self.normalize_observations or self.normalize_rewards

    def init(self) -> NormalizationState | None:
        """The prior statistics of every normalisation that is on; None when both are off."""
        if not self.enabled:
            return None
        observation = None
        if self.normalize_observations:
            observation = map_observation(
                lambda s: running_mean_std(s.shape) if _normalized_leaf(s) else None,
                self.observation_spec,
            )
        reward = reward_scaler(self.num_envs) if self.normalize_rewards else None
        return NormalizationState(observation=observation, reward=reward)

    def policy_params(self, network_params: Any, state: NormalizationState | None) -> Any:
        """What the actors need: the network's parameters, with the observation statistics.

        Without observation normalisation this is `network_params` itself, so the policy
        parameters of runs without it keep their tree.
        """
        if not self.normalize_observations:
            return network_params
        return {"network": network_params, "observation_stats": state.observation}

    def network_inputs(self, policy_params: Any, obs: Any) -> tuple[Any, Any]:
        """(network parameters, normalised obs) from `policy_params` and raw obs [B, ...]."""
        if not self.normalize_observations:
            return policy_params, obs
        return policy_params["network"], self._normalized(policy_params["observation_stats"], obs)

    def observations(self, state: NormalizationState | None, obs: Any) -> Any:
        """obs [..., *leaf shape] normalised with the statistics of `state` (when on)."""
        if not self.normalize_observations:
            return obs
        return self._normalized(state.observation, obs)

    def _normalized(self, stats: Any, obs: Any) -> Any:
        """Normalises every floating leaf of `obs` with its `RunningMeanStd` in `stats`."""

        def leaf(spec: ArraySpec, leaf_stats: Any, x: jax.Array) -> jax.Array:
            if not _normalized_leaf(spec):
                return x
            return normalize(leaf_stats, x, self.observation_clip)

        # Mapped over the spec: each leaf's stats (a RunningMeanStd, or None) come whole.
        return map_observation(leaf, self.observation_spec, stats, obs)

    def observed(self, state: NormalizationState | None, obs: Any) -> NormalizationState | None:
        """Merges the moments of obs [T, B, ...] (every step of every env) into `state`."""
        if not self.normalize_observations:
            return state

        def leaf(spec: ArraySpec, leaf_stats: Any, x: jax.Array) -> Any:
            return update_from_batch(leaf_stats, x) if _normalized_leaf(spec) else None

        observation = map_observation(leaf, self.observation_spec, state.observation, obs)
        return state.replace(observation=observation)

    def rewards(
        self, state: NormalizationState | None, rollout: Any
    ) -> tuple[jax.Array, NormalizationState | None]:
        """The rollout's [T, B] rewards scaled (unchanged when off), and the new state."""
        if not self.normalize_rewards:
            return rollout.rewards, state
        scaled, reward = scale_rewards(
            state.reward,
            rollout.rewards,
            jnp.logical_or(rollout.terminations, rollout.truncations),
            rollout.valid,
            rollout.env_ids,
            gamma=self.gamma,
            clip=self.reward_clip,
        )
        return scaled, state.replace(reward=reward)


def normalizer_of(agent_config: Any, observation_spec: Any, num_envs: int) -> Normalizer:
    """The `Normalizer` an agent's config asks for.

    Reads `normalize_observations`, `normalize_rewards`, `observation_clip`,
    `reward_clip` and `gamma` of the `agent` section.
    """
    return Normalizer(
        observation_spec=observation_spec,
        num_envs=num_envs,
        normalize_observations=bool(agent_config.normalize_observations),
        normalize_rewards=bool(agent_config.normalize_rewards),
        observation_clip=_number(agent_config.observation_clip),
        reward_clip=_number(agent_config.reward_clip),
        gamma=_number(agent_config.gamma),
    )


def _number(value: Any):
    """`float(value)`, but a traced value (a population member's, docs/pbt.md) as it is."""
    return value if isinstance(value, jax.core.Tracer) else float(value)
