"""Observation normalisation and reward scaling (sebulba.agents.normalization)."""

import jax.numpy as jnp
import numpy as np
import pytest

from sebulba.agents import normalization
from sebulba.environments.spaces import ArraySpec


def test_chan_merge_equals_the_moments_of_the_concatenation():
    rng = np.random.default_rng(0)
    parts = [rng.normal(3.0, 2.0, size=(n, 3)).astype(np.float32) for n in (5, 17, 1, 40)]
    stats = normalization.running_mean_std((3,))
    for part in parts:
        stats = normalization.update_from_batch(stats, jnp.asarray(part))
    everything = np.concatenate(parts)
    # The prior (mean 0, var 1) weighs PRIOR_COUNT samples: negligible at this tolerance.
    np.testing.assert_allclose(stats.mean, everything.mean(0), rtol=1e-4)
    np.testing.assert_allclose(stats.var, everything.var(0), rtol=1e-4)
    np.testing.assert_allclose(stats.count, len(everything) + normalization.PRIOR_COUNT)


def test_weighted_update_ignores_samples_of_weight_zero():
    x = jnp.asarray([[1.0, 100.0], [3.0, -50.0]])  # [T=2, B=2]; column 1 masked.
    weight = jnp.asarray([[1, 0], [1, 0]])
    stats = normalization.update_from_batch(normalization.running_mean_std(), x, weight)
    np.testing.assert_allclose(stats.mean, 2.0, rtol=1e-4)
    np.testing.assert_allclose(stats.var, 1.0, rtol=1e-3)
    empty = normalization.update_from_batch(stats, x, jnp.zeros_like(weight))
    np.testing.assert_allclose(empty.mean, stats.mean)
    np.testing.assert_allclose(empty.var, stats.var)
    np.testing.assert_allclose(empty.count, stats.count)


def test_normalize_standardises_and_clips():
    stats = normalization.RunningMeanStd(
        mean=jnp.asarray([1.0, -2.0]), var=jnp.asarray([4.0, 0.25]), count=jnp.asarray(10.0)
    )
    x = jnp.asarray([[3.0, -2.5], [1.0, 100.0]])
    np.testing.assert_allclose(
        normalization.normalize(stats, x, clip=5.0), [[1.0, -1.0], [0.0, 5.0]], rtol=1e-5
    )


def _hand_scaled_rewards(rewards, ends, valid, gamma, initial_returns):
    """gym's NormalizeReward (gym 0.23 reset rule), written out with numpy in float64."""
    returns = np.array(initial_returns, np.float64)
    mean, var, count = 0.0, 1.0, normalization.PRIOR_COUNT
    scaled = np.zeros_like(rewards, dtype=np.float64)
    for t in range(rewards.shape[0]):
        returns = np.where(valid[t], gamma * returns + rewards[t], returns)
        batch = returns[valid[t]]
        if batch.size:
            delta, n = batch.mean() - mean, batch.size
            total = count + n
            var = (var * count + batch.var() * n + delta**2 * count * n / total) / total
            mean, count = mean + delta * n / total, total
        scaled[t] = np.clip(rewards[t] / np.sqrt(var + 1e-8), -10, 10)
        returns = np.where(ends[t], 0.0, returns)
    return scaled, returns, (mean, var, count)


def test_reward_scaler_on_a_hand_checked_sequence_with_an_episode_end():
    # 3 global envs; the rollout holds envs 2 and 0 (columns not in global order). Env 2's
    # episode ends at t=1 and t=2 is its auto-reset step (invalid).
    rewards = np.array([[1.0, 2.0], [1.0, -1.0], [0.0, 3.0], [2.0, 0.5]], np.float32)
    ends = np.array([[0, 0], [1, 0], [0, 0], [0, 0]], bool)
    valid = np.array([[1, 1], [1, 1], [0, 1], [1, 1]], bool)
    env_ids = np.array([2, 0], np.int32)
    scaler = normalization.reward_scaler(3)
    scaler = scaler.replace(returns=jnp.asarray([0.5, 7.0, -1.0]))
    scaled, after = normalization.scale_rewards(
        scaler,
        jnp.asarray(rewards),
        jnp.asarray(ends),
        jnp.asarray(valid),
        jnp.asarray(env_ids),
        gamma=0.9,
        clip=10.0,
    )
    expected, returns, (mean, var, count) = _hand_scaled_rewards(
        rewards, ends, valid, 0.9, [-1.0, 0.5]
    )
    np.testing.assert_allclose(scaled, expected, rtol=1e-5)
    # Env 2: reset at t=1, skipped t=2, then 2.0 at t=3; env 0: 0.5 -> 0.9 * ... ; env 1 kept.
    np.testing.assert_allclose(after.returns, [returns[1], 7.0, returns[0]], rtol=1e-6)
    assert returns[0] == pytest.approx(2.0)
    np.testing.assert_allclose(after.stats.mean, mean, rtol=1e-5)
    np.testing.assert_allclose(after.stats.var, var, rtol=1e-5)
    np.testing.assert_allclose(after.stats.count, count, rtol=1e-6)


def test_integer_observation_leaves_are_untouched_and_float_leaves_normalised():
    spec = {
        "image": ArraySpec((2, 2), "uint8"),
        "direction": ArraySpec((), "int32", num_values=4),
        "position": ArraySpec((2,), "float32"),
    }
    normalizer = normalization.Normalizer(
        observation_spec=spec,
        num_envs=2,
        normalize_observations=True,
        normalize_rewards=False,
        observation_clip=10.0,
        reward_clip=10.0,
        gamma=0.99,
    )
    state = normalizer.init()
    assert state.observation["image"] is None and state.reward is None
    obs = {
        "image": jnp.full((3, 2, 2, 2), 200, jnp.uint8),  # [T=3, B=2, ...]
        "direction": jnp.ones((3, 2), jnp.int32),
        "position": jnp.arange(12, dtype=jnp.float32).reshape(3, 2, 2),
    }
    state = normalizer.observed(state, obs)
    normalized = normalizer.observations(state, obs)
    assert normalized["image"].dtype == jnp.uint8
    np.testing.assert_array_equal(normalized["image"], obs["image"])
    np.testing.assert_array_equal(normalized["direction"], obs["direction"])
    flat = np.asarray(normalized["position"]).reshape(-1, 2)
    np.testing.assert_allclose(flat.mean(0), 0.0, atol=1e-4)
    np.testing.assert_allclose(flat.std(0), 1.0, rtol=1e-3)
    # The actors' view: the statistics travel inside the policy parameters.
    params = normalizer.policy_params({"w": jnp.ones(1)}, state)
    network_params, actor_obs = normalizer.network_inputs(params, obs)
    assert network_params == {"w": jnp.ones(1)}
    np.testing.assert_allclose(actor_obs["position"], normalized["position"])


def test_without_normalisation_the_policy_params_and_state_are_unchanged():
    normalizer = normalization.Normalizer(
        observation_spec=ArraySpec((3,), "float32"),
        num_envs=2,
        normalize_observations=False,
        normalize_rewards=False,
        observation_clip=10.0,
        reward_clip=10.0,
        gamma=0.99,
    )
    params = {"w": jnp.ones(1)}
    assert normalizer.init() is None
    assert normalizer.policy_params(params, None) is params
