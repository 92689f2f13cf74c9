"""Recurrent agents: the reset rule, the carry across steps, rollouts and resumes, and an
exact learner replay of the actors' LSTM states."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sebulba import train
from sebulba.agents import impala, ppo, recurrent
from sebulba.agents.api import episode_starts, reset_carry
from sebulba.agents.distributions import for_action_spec
from sebulba.agents.networks import make_network
from sebulba.errors import ConfigError
from tests import counting_agent
from tests.helpers import LSTM_RUN, agent_config, make_pipeline, read_metrics


def test_episode_starts_and_reset_carry_on_a_hand_checked_sequence():
    # env 0 ends an episode at step 1, so step 2 is envpool's reset step (invalid) and
    # obs[3] is the first observation of its next episode; env 1 resets at step 3.
    valid = jnp.array([[True, True], [True, True], [False, True], [True, False]])
    starts = episode_starts(valid)
    assert starts.tolist() == [
        [False, False],  # obs[0]: the stored initial carry is already reset.
        [False, False],
        [False, False],
        [True, False],
        [False, True],
    ]
    carry = {"c": jnp.array([[1.0, 1.0], [2.0, 2.0]]), "n": jnp.array([5, 6])}
    initial = {"c": jnp.zeros((2, 2)), "n": jnp.zeros((2,), jnp.int32)}
    reset = reset_carry(carry, jnp.array([True, False]), initial)
    assert reset["c"].tolist() == [[0.0, 0.0], [2.0, 2.0]]
    assert reset["n"].tolist() == [0, 6]


def _capturing_pipeline(config, **run_kwargs):
    """Runs the pipeline and returns, per update, (behaviour-version params, rollout)."""
    setup = train.prepare(config)
    state = train.init_learner_state(setup)
    pipeline = make_pipeline(
        setup,
        clip_rewards=False,
        transfer_guard="allow",  # The capture below copies every rollout to the host.
    )
    compiled = pipeline.compile_update(state)
    captured = []

    def recording_update(state, rollout):
        params = jax.device_get(setup.agent.policy_params(state))
        captured.append((params, jax.device_get(rollout)))
        return compiled(state, rollout)

    pipeline._compiled_update = recording_update
    pipeline.run(state, **run_kwargs)
    return setup, captured


def test_the_carry_is_reset_exactly_where_episodes_start_and_continues_across_rollouts():
    config = agent_config(
        counting_agent,
        pipeline__num_actor_threads=2,
        env__num_envs=4,
        mesh__learner_device_ids=[1, 2],
    )
    _, captured = _capturing_pipeline(config)
    rollouts = [rollout for _, rollout in captured]
    assert len(rollouts) == 6
    assert rollouts[0].initial_carry["age"].tolist() == [0] * 8  # Zero initial state.
    resets = 0
    for k, rollout in enumerate(rollouts):
        ages, valid = rollout.policy_outputs["age"], rollout.valid
        assert (ages[0] == rollout.initial_carry["age"]).all()
        # obs[t + 1] after envpool's reset step t starts an episode: age 0; else one more.
        expected = np.where(valid, ages[:-1] + 1, 0)
        np.testing.assert_array_equal(ages[1:], expected, err_msg=f"rollout {k + 1}")
        resets += int((~valid).sum())
        if k:
            # obs[T] of rollout k is obs[0] of rollout k + 1, processed from the same carry.
            np.testing.assert_array_equal(rollouts[k - 1].env_ids, rollout.env_ids)
            np.testing.assert_array_equal(
                rollout.initial_carry["age"], rollouts[k - 1].policy_outputs["age"][-1]
            )
    assert resets > 0  # Episodes did end inside rollouts.
    assert max(int(r.initial_carry["age"].max()) for r in rollouts) > 0  # Carried over.


def test_resumed_actors_restart_their_carries_from_zero(tmp_path):
    kwargs = dict(ckpt__every_updates=3)
    train.train(agent_config(counting_agent, **kwargs), str(tmp_path / "first"))
    source = str(tmp_path / "first" / "checkpoints" / "3")
    resumed = agent_config(counting_agent, ckpt__resume_from=source, **kwargs)
    train.train(resumed, str(tmp_path / "resumed"))
    first, after = read_metrics(str(tmp_path / "first")), read_metrics(str(tmp_path / "resumed"))
    assert [line["update"] for line in after] == [4, 5, 6]
    # The envs are re-created and reset on resume, so are the carries; the uninterrupted
    # run carried its carries into update 4.
    assert after[0]["initial_carry_max"] == 0
    assert first[3]["initial_carry_max"] > 0
    assert after[1]["initial_carry_max"] > 0
    # The learner replays what the actors carried, with the same reset rule.
    assert all(line["replay_mismatches"] == 0 for line in first + after)


@pytest.mark.parametrize("agent_module", [ppo, impala], ids=["ppo", "impala"])
def test_the_learner_replays_the_actors_lstm_exactly(agent_module):
    # policy_lag 0: update k starts from the version that collected rollout k.
    config = agent_config(
        agent_module,
        pipeline__policy_lag=0,
        mesh__learner_device_ids=[1, 2],
        total_timesteps=8 * 16 * 3,
        **LSTM_RUN,
    )
    setup, captured = _capturing_pipeline(config)
    spec = setup.env_spec
    assert spec.observation.shape == (2,)
    network = make_network(
        "mlp", spec.action, observation=spec.observation, core=recurrent.make_core("lstm", 16)
    )
    model = recurrent.ActorCritic(network, spec.observation, 16)
    policy = for_action_spec(spec.action)
    resets = 0
    for params, rollout in captured:
        starts = episode_starts(rollout.valid)
        resets += int(starts.sum())

        def replayed(starts, params=params, rollout=rollout):
            logits, values = model.sequence(params, rollout.initial_carry, rollout.obs, starts)
            return logits[:-1], values

        logits, values = replayed(starts)
        # The policy head starts at gain 0.01: logits are ~1e-4, so compare relatively.
        if agent_module is ppo:
            logprob = policy.logprob(logits, rollout.actions)
            stored = rollout.policy_outputs["logprob"][:-1]
            np.testing.assert_allclose(logprob, stored, rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(
                values, rollout.policy_outputs["value"], rtol=1e-5, atol=1e-7
            )
        else:
            stored = rollout.policy_outputs["policy"][:-1]
            np.testing.assert_allclose(logits, stored, rtol=1e-5, atol=1e-9)
        # Without the resets inside the sequence the replay would not match.
        unreset, _ = replayed(jnp.zeros_like(starts))
        if starts.any():
            assert np.abs(unreset - logits).max() > 0.05 * np.abs(logits).max()
    assert resets > 0


def test_lstm_ppo_runs_and_its_params_hold_an_orthogonal_zero_bias_lstm(tmp_path):
    config = agent_config(ppo, total_timesteps=8 * 16 * 2, **LSTM_RUN)
    state = train.train(config, str(tmp_path))
    assert [line["update"] for line in read_metrics(str(tmp_path))] == [1, 2]
    setup = train.prepare(config)
    fresh = jax.device_get(train.init_learner_state(setup).params["params"]["core"])
    cell = jax.tree.leaves_with_path(fresh)
    for path, leaf in cell:
        name = jax.tree_util.keystr(path)
        if "bias" in name:
            assert not leaf.any(), name
        else:  # Orthogonal, gain 1: the columns of every gate's kernel are orthonormal.
            gram = leaf.T @ leaf if leaf.shape[0] >= leaf.shape[1] else leaf @ leaf.T
            np.testing.assert_allclose(gram, np.eye(len(gram)), atol=1e-5, err_msg=name)
    assert jax.tree.leaves(state.params["params"]["core"])


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"agent__core": "gru"}, "agent.core 'gru' is unknown"),
        ({"agent__core": "lstm", "agent__num_minibatches": 3}, "agent.num_minibatches"),
        ({"env__observation_indices": (0, 4)}, "env.observation_indices"),
        ({"env__observation_indices": (1, 1)}, "env.observation_indices"),
    ],
)
def test_bad_recurrent_settings_name_the_field(overrides, message):
    config = agent_config(ppo, **overrides)
    with pytest.raises(ConfigError, match=message):
        train.prepare(config)
