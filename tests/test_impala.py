"""IMPALA: V-trace targets and masks, sharded update, lag schedule, learning, Atari."""

import chex
import jax
import numpy as np
import pytest
import rlax

from sebulba import train
from sebulba.agents import impala
from sebulba.agents.api import Discrete, Rollout
from sebulba.agents.networks import make_network
from sebulba.config.sizes import derive_sizes
from sebulba.errors import ConfigError
from sebulba.lag_schedule import required_policy_version
from tests.helpers import (
    CARTPOLE,
    load_config,
    logged_learning_rates,
    make_pipeline,
    read_metrics,
    read_summary,
    run_update,
    small_update_config,
)

T, B, A = 8, 8, 2


def make_agent(**agent):
    config = small_update_config(impala, T, B, **agent)
    return impala.make(config, CARTPOLE, derive_sizes(config))


def random_rollout(seed=0, num_envs=B):
    """Random data with envpool's structure: a step after an episode end is invalid."""
    rng = np.random.default_rng(seed)
    end = rng.choice(3, size=(T, num_envs), p=[0.85, 0.1, 0.05])  # running | term. | trunc.
    valid = np.ones((T, num_envs), bool)
    valid[0] = rng.random(num_envs) > 0.2  # The previous rollout may have ended an episode.
    for t in range(T):
        end[t] = np.where(valid[t], end[t], 0)
        if t + 1 < T:
            valid[t + 1] = end[t] == 0
    return Rollout(
        obs=rng.normal(size=(T + 1, num_envs, 4)).astype(np.float32),
        actions=rng.integers(0, A, size=(T, num_envs)).astype(np.int32),
        rewards=rng.normal(size=(T, num_envs)).astype(np.float32),
        terminations=end == 1,
        truncations=end == 2,
        valid=valid,
        policy_outputs={"policy": rng.normal(size=(T + 1, num_envs, A)).astype(np.float32)},
        env_ids=np.arange(num_envs, dtype=np.int32),
    )


def vtrace_by_hand(values, rhos, rewards, terminations, truncations, gamma, lam, rho_bar, pg_bar):
    """V-trace of Espeholt et al. (2018), eq. 1 and section 4.2, one env, plain loops.

    With a per-step trace coefficient lambda_s (0 at episode ends):
      v_s = V(x_s) + delta_s + gamma_s lambda_s c_s (v_{s+1} - V(x_{s+1})), v_T = V(x_T),
      delta_s = min(rho_bar, rho_s) (r_s + gamma_s V(x_{s+1}) - V(x_s)), c_s = min(1, rho_s),
      A_s = min(pg_bar, rho_s) (r_s + gamma_s q_{s+1} - V(x_s)),
      q_{s+1} = lambda_s v_{s+1} + (1 - lambda_s) V(x_{s+1}).
    """
    steps = len(rewards)
    discounts = [0.0 if terminations[s] else gamma for s in range(steps)]
    lambdas = [0.0 if terminations[s] or truncations[s] else lam for s in range(steps)]
    targets = list(values)  # targets[T] = V(x_T).
    for s in reversed(range(steps)):
        delta = min(rho_bar, rhos[s]) * (rewards[s] + discounts[s] * values[s + 1] - values[s])
        trace = discounts[s] * lambdas[s] * min(1.0, rhos[s])
        targets[s] = values[s] + delta + trace * (targets[s + 1] - values[s + 1])
    advantages = []
    for s in range(steps):
        q_next = lambdas[s] * targets[s + 1] + (1 - lambdas[s]) * values[s + 1]
        q = rewards[s] + discounts[s] * q_next
        advantages.append(min(pg_bar, rhos[s]) * (q - values[s]))
    return np.array(targets[:-1]), np.array(advantages)


def one_env_vtrace(values, rewards, terminations=(), truncations=(), rhos=None, gamma=0.5):
    steps = len(rewards)
    flags = [np.isin(np.arange(steps), f)[:, None] for f in (terminations, truncations)]
    return impala.vtrace(
        np.asarray(values, np.float32)[:, None],
        np.ones((steps, 1), np.float32) if rhos is None else np.asarray(rhos, np.float32)[:, None],
        np.asarray(rewards, np.float32)[:, None],
        *flags,
        gamma=gamma,
        vtrace_lambda=1.0,
        clip_rho_threshold=1.0,
        clip_pg_rho_threshold=1.0,
    )


def test_on_policy_vtrace_with_lambda_one_gives_n_step_returns():
    # One env, T = 4, values V(x_0..x_4) = 1..5, rewards 1, gamma 0.5, all ratios 1:
    # v_s is the discounted reward-to-go plus gamma^(T-s) V(x_4).
    values, rewards = np.array([1.0, 2.0, 3.0, 4.0, 5.0]), [1.0, 1.0, 1.0, 1.0]
    out = one_env_vtrace(values, rewards)
    n_step = [
        1 + 0.5 + 0.25 + 0.125 + 0.0625 * 5,  # 2.1875
        1 + 0.5 + 0.25 + 0.125 * 5,  # 2.375
        1 + 0.5 + 0.25 * 5,  # 2.75
        1 + 0.5 * 5,  # 3.5
    ]
    np.testing.assert_allclose(out.errors[:, 0] + values[:-1], n_step, rtol=1e-6)
    # On-policy with lambda 1 the policy-gradient advantage is the same n-step error.
    np.testing.assert_allclose(out.pg_advantage[:, 0], np.subtract(n_step, values[:-1]), rtol=1e-6)

    # A termination at t = 1: no bootstrap there, and t = 0 sees only this episode.
    out = one_env_vtrace(values, rewards, terminations=[1])
    np.testing.assert_allclose(out.errors[:, 0] + values[:-1], [1.5, 1.0, 2.75, 3.5], rtol=1e-6)

    # A truncation at t = 1: bootstraps from V(x_2) = 3, still cuts the trace for t = 0.
    out = one_env_vtrace(values, rewards, truncations=[1])
    np.testing.assert_allclose(out.errors[:, 0] + values[:-1], [2.25, 2.5, 2.75, 3.5], rtol=1e-6)
    np.testing.assert_allclose(out.pg_advantage[1, 0], 1 + 0.5 * 3 - 2, rtol=1e-6)

    # Off-policy: rho_0 = 2 is clipped to 1, rho_1 = 0.5 halves step 1's error and its trace.
    out = one_env_vtrace(values, rewards, rhos=[2.0, 0.5, 1.0, 1.0])
    v1 = 2 + 0.5 * (1 + 0.5 * 3 - 2) + 0.5 * 0.5 * (2.75 - 3)  # 2.1875
    np.testing.assert_allclose(out.errors[1, 0] + 2, v1, rtol=1e-6)
    np.testing.assert_allclose(out.errors[0, 0] + 1, 1 + (1 + 0.5 * 2 - 1) + 0.5 * (v1 - 2))


def test_vtrace_matches_the_paper_and_rlax_on_random_data():
    rollout = random_rollout(seed=3)
    rng = np.random.default_rng(4)
    values = rng.normal(size=(T + 1, B)).astype(np.float32)
    rhos = np.exp(rng.normal(scale=0.7, size=(T, B))).astype(np.float32)
    settings = dict(gamma=0.9, vtrace_lambda=0.8, clip_rho_threshold=1.2, clip_pg_rho_threshold=0.9)
    fields = (rollout.rewards, rollout.terminations, rollout.truncations)
    out = impala.vtrace(values, rhos, *fields, **settings)
    assert rollout.terminations.any() and rollout.truncations.any()
    for b in range(B):
        targets, advantages = vtrace_by_hand(
            values[:, b], rhos[:, b], *(f[:, b] for f in fields), 0.9, 0.8, 1.2, 0.9
        )
        np.testing.assert_allclose(out.errors[:, b] + values[:-1, b], targets, rtol=1e-5)
        np.testing.assert_allclose(out.pg_advantage[:, b], advantages, rtol=1e-5, atol=1e-6)
    # Without episode ends the per-step coefficients reduce to rlax's scalar ones.
    no_ends = np.zeros((T, B), bool)
    out = impala.vtrace(values, rhos, rollout.rewards, no_ends, no_ends, **settings)
    for b in range(B):
        expected = rlax.vtrace_td_error_and_advantage(
            values[:-1, b],
            values[1:, b],
            rollout.rewards[:, b],
            np.full(T, 0.9, np.float32),
            rhos[:, b],
            lambda_=0.8,
            clip_rho_threshold=1.2,
            clip_pg_rho_threshold=0.9,
        )
        np.testing.assert_allclose(out.errors[:, b], expected.errors, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out.pg_advantage[:, b], expected.pg_advantage, rtol=1e-5)


def test_invalid_steps_carry_no_weight():
    agent = make_agent()
    rollout = random_rollout()
    invalid = ~rollout.valid
    assert invalid[1:].any() and invalid[0].any()
    # envpool ignores the action of a reset step and pays nothing for it: scrambling
    # everything recorded at invalid steps must not change the update.
    logits = rollout.policy_outputs["policy"]
    scrambled = rollout.replace(
        actions=np.where(invalid, 1 - rollout.actions, rollout.actions),
        rewards=np.where(invalid, 100.0, rollout.rewards).astype(np.float32),
        policy_outputs={
            "policy": np.where(np.pad(invalid, ((0, 1), (0, 0)))[..., None], -logits, logits)
        },
    )
    update = jax.jit(agent.update)
    new_a, metrics = update(agent.init(jax.random.key(0)), rollout)
    new_b, _ = update(agent.init(jax.random.key(0)), scrambled)
    for a, b in zip(jax.tree.leaves(new_a.params), jax.tree.leaves(new_b.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    # ...while the same scrambling at valid steps does change it.
    valid_scrambled = rollout.replace(rewards=np.where(invalid, rollout.rewards, 100.0))
    new_c, _ = update(agent.init(jax.random.key(0)), valid_scrambled)
    pairs = zip(jax.tree.leaves(new_a.params), jax.tree.leaves(new_c.params), strict=True)
    assert any(not np.allclose(a, c) for a, c in pairs)
    assert all(np.isfinite(float(v)) for v in metrics.values())


def assert_layouts_agree_and_only_gradients_cross_devices(agent, rollout):
    """`assert_update_agrees_across_layouts` on 1, 2 and 4 learner devices, then
    `assert_update_moves_no_rollout_data` on the 4-device update it ran, lowered from the
    same jitted step (a second jit would trace and compile it again); returns the
    1-device update's parameters."""
    results = {}
    for n in (1, 2, 4):
        (state, _), step = run_update(agent, n, rollout)
        results[n] = jax.tree.leaves(jax.device_get(state.params))
        for leaf in jax.tree.leaves(state):
            assert leaf.sharding.is_fully_replicated
            assert leaf.sharding.device_set == set(jax.devices()[:n])
    for n in (2, 4):
        for a, b in zip(results[1], results[n], strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # The output state has the input's shardings (donated in, placed alike out).
    hlo = step.lower(state, rollout).compile().as_text()
    assert "all-reduce" in hlo
    for collective in ("all-to-all", "all-gather", "collective-permute"):
        assert collective not in hlo
    return results[1]


def test_update_agrees_across_learner_layouts_and_moves_no_sequence_between_devices():
    # Replicated states equal to float tolerance on 1, 2 and 4 devices; loss sums and
    # gradients are all-reduced, minibatches of whole sequences stay put.
    assert_layouts_agree_and_only_gradients_cross_devices(make_agent(), random_rollout())


def test_update_traces_once_and_scan_and_unrolled_loops_agree():
    out = {}
    for loop in ("scan", "unrolled"):
        chex.clear_trace_counter()
        agent = make_agent(minibatch_loop=loop)
        update = jax.jit(chex.assert_max_traces(agent.update, n=1))
        state = agent.init(jax.random.key(0))
        for seed in range(3):
            state, _ = update(state, random_rollout(seed))
        out[loop] = jax.device_get(state.params)
    for a, b in zip(jax.tree.leaves(out["scan"]), jax.tree.leaves(out["unrolled"]), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_gradient_accumulation_sums_to_the_unsplit_update_and_agrees_across_layouts():
    # IMPALA's loss sums over env columns, so the summed micro-batch gradients equal the
    # minibatch's even with invalid steps. 16 envs leave 2 columns of each of the 2
    # minibatches per device on 4 devices, so 2 micro-batches stay device-local.
    rollout = random_rollout(num_envs=16)

    def final_params(**agent):
        config = small_update_config(impala, T, 16, **agent)
        agent = impala.make(config, CARTPOLE, derive_sizes(config))
        state, _ = jax.jit(agent.update)(agent.init(jax.random.key(0)), rollout)
        return agent, jax.tree.leaves(jax.device_get(state.params))

    _, reference = final_params()
    _, accumulated = final_params(gradient_accumulation_steps=2, minibatch_loop="scan")
    for a, b in zip(reference, accumulated, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # The unrolled loop's update is taken from the layouts check's one-device layout: a
    # plain jit of it would compile the largest program again.
    config = small_update_config(
        impala, T, 16, gradient_accumulation_steps=2, minibatch_loop="unrolled"
    )
    agent = impala.make(config, CARTPOLE, derive_sizes(config))
    one_device = assert_layouts_agree_and_only_gradients_cross_devices(agent, rollout)
    for a, b in zip(reference, one_device, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_learning_rate_anneals_once_per_update():
    rates = logged_learning_rates(make_agent(), [random_rollout(seed) for seed in range(3)])
    np.testing.assert_allclose(rates, [6e-4, 6e-4 * 0.9, 6e-4 * 0.8], rtol=1e-6)


@pytest.mark.parametrize(
    "agent, field",
    [
        ({"num_minibatches": 3}, "agent.num_minibatches"),
        ({"vtrace_lambda": 1.5}, "agent.vtrace_lambda"),
        ({"minibatch_loop": "fast"}, "agent.minibatch_loop"),
        ({"network": "transformer"}, "agent.network"),
        # 8 envs / 2 minibatches leave 4 columns per minibatch: 3 cannot divide them.
        ({"gradient_accumulation_steps": 3}, "agent.gradient_accumulation_steps"),
        ({"gradient_accumulation_steps": -1}, "agent.gradient_accumulation_steps"),
    ],
)
def test_bad_impala_values_name_the_field(agent, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        make_agent(**agent)


@pytest.mark.parametrize(
    "agent, message",
    [
        ({"learning_rate": 0.0}, "agent.learning_rate must be a number > 0, got 0.0"),
        ({"gamma": -0.5}, "agent.gamma must be a number in [0, 1], got -0.5"),
        ({"vtrace_lambda": 1.5}, "agent.vtrace_lambda must be a number in [0, 1], got 1.5"),
        ({"clip_rho_threshold": 0.0}, "agent.clip_rho_threshold must be a number > 0, got 0.0"),
        (
            {"clip_pg_rho_threshold": -1.0},
            "agent.clip_pg_rho_threshold must be a number > 0, got -1.0",
        ),
        ({"num_minibatches": 0}, "agent.num_minibatches must be an integer >= 1, got 0"),
        ({"ent_coef": -0.01}, "agent.ent_coef must be a number >= 0, got -0.01"),
        ({"vf_coef": -0.5}, "agent.vf_coef must be a number >= 0, got -0.5"),
        ({"max_grad_norm": -40.0}, "agent.max_grad_norm must be a number > 0, got -40.0"),
        ({"rmsprop_decay": 1.0}, "agent.rmsprop_decay must be a number in [0, 1), got 1.0"),
        ({"rmsprop_eps": 0.0}, "agent.rmsprop_eps must be a number > 0, got 0.0"),
        ({"conv_init": "xavier"}, "agent.conv_init 'xavier' must be one of orthogonal,"),
    ],
)
def test_out_of_range_impala_values_name_the_field_value_and_range(agent, message):
    with pytest.raises(ConfigError) as raised:
        make_agent(**agent)
    assert str(raised.value).startswith(message)


def test_minibatches_must_not_straddle_learner_devices():
    # 8 envs on 4 learner devices leave 2 per device: 4 minibatches of whole envs cannot
    # be cut from each device's share, even though 8 is a multiple of 4.
    config = small_update_config(impala, T, B, num_minibatches=4)
    config.mesh.learner_device_ids = (0, 1, 2, 3)
    with pytest.raises(ConfigError, match=r"env\.num_envs per learner device \(.*\(2\)"):
        impala.make(config, CARTPOLE, derive_sizes(config))


def _run_recording(config):
    """Runs the pipeline; returns per update the rollout's obs and logits, and every version."""
    setup = train.prepare(config)
    state = train.init_learner_state(setup)
    pipeline = make_pipeline(setup, clip_rewards=False)
    versions = {1: jax.device_get(setup.agent.policy_params(state))}
    rollouts = []
    original_assemble = pipeline._assemble

    def assemble_and_record(actor_rollouts):
        rollout = original_assemble(actor_rollouts)
        rollouts.append(jax.device_get((rollout.obs, rollout.policy_outputs["policy"])))
        return rollout

    def on_update(report, new_state):
        versions[report.learner_policy_version] = jax.device_get(new_state.params)

    pipeline._assemble = assemble_and_record
    pipeline.run(state, on_update=on_update)
    return rollouts, versions


@pytest.mark.parametrize("policy_lag", [0, 1])
def test_behaviour_logits_come_from_the_scheduled_version(policy_lag):
    config = load_config("impala_cartpole", "smoke")
    config.pipeline.policy_lag = policy_lag
    config.total_timesteps = 8 * 20 * 5
    config.mesh.learner_device_ids = (1, 2)
    rollouts, versions = _run_recording(config)
    network = make_network(config.agent.network, Discrete(2))
    apply = jax.jit(network.apply)
    assert len(rollouts) == 5 and sorted(versions) == [1, 2, 3, 4, 5, 6]
    for update, (obs, logits) in enumerate(rollouts, start=1):
        expected = required_policy_version(update, policy_lag)
        for version, params in versions.items():
            recomputed, _ = jax.vmap(apply, in_axes=(None, 0))(params, obs)
            matches = np.allclose(recomputed, logits, rtol=1e-5, atol=1e-6)
            assert matches == (version == expected), (update, version, expected)


def test_same_seed_same_checksum_and_both_lags_log_the_schedule(tmp_path):
    checksums = {}
    for name, seed, lag, delay in [("a", 1, 1, 0.0), ("b", 1, 1, 0.05), ("c", 2, 1, 0.0)]:
        config = load_config("impala_cartpole", "smoke")
        config.seed, config.pipeline.policy_lag = seed, lag
        config.debug.learner_delay_s = delay
        config.log.tensorboard = False
        train.train(config, str(tmp_path / name))
        checksums[name] = read_summary(str(tmp_path / name))["params_checksum"]
    assert checksums["a"] == checksums["b"] != checksums["c"]
    lines = read_metrics(str(tmp_path / "a"))
    assert [line["learner_policy_version"] - line["actor_policy_version"] for line in lines] == [
        1,
        2,
        2,
        2,
    ]
    for name in ("policy_loss", "value_loss", "entropy", "importance_ratio", "learning_rate"):
        assert all(np.isfinite(line[name]) for line in lines)


def test_impala_atari_end_to_end_on_pong(tmp_path):
    config = load_config("impala_atari", "smoke,Pong-v5")
    config.mesh.learner_device_ids = (1, 2)
    config.log.tensorboard = False
    setup = train.prepare(config)
    for pool in setup.envs_per_thread:
        pool.close()
    assert setup.env_spec.obs_shape == (4, 84, 84) and setup.env_spec.num_actions == 18
    before = jax.device_get(setup.agent.policy_params(train.init_learner_state(setup)))
    final = train.train(config, str(tmp_path))
    summary = read_summary(str(tmp_path))
    assert summary["env_id"] == "Pong-v5" and summary["updates"] == 2
    lines = read_metrics(str(tmp_path))
    assert [line["update"] for line in lines] == [1, 2]
    for line in lines:
        for name in ("policy_loss", "value_loss", "entropy", "importance_ratio"):
            assert np.isfinite(line[name]), (name, line)
    after = jax.device_get(setup.agent.policy_params(final))
    pairs = zip(jax.tree.leaves(before), jax.tree.leaves(after), strict=True)
    assert any(not np.allclose(a, b) for a, b in pairs)
