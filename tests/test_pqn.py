"""PQN: Q(lambda) targets, the epsilon schedule and where it travels, LayerNorm Q-networks,
refusals, layouts, both architectures and learning CartPole."""

import os
import signal

import jax
import numpy as np
import pytest

from sebulba import checkpoint, train
from sebulba.agents import pqn
from sebulba.agents.api import ArraySpec, Box, Discrete, EnvSpec
from sebulba.agents.networks import make_network
from sebulba.config.sizes import derive_sizes
from sebulba.errors import ConfigError
from sebulba.lag_schedule import required_policy_version
from tests.helpers import (
    CARTPOLE,
    assert_update_agrees_across_layouts,
    assert_update_moves_no_rollout_data,
    load_config,
    make_pipeline,
    module_compilation_cache,  # noqa: F401 (autouse: reruns load what a run compiled)
    read_metrics,
    read_summary,
    small_update_config,
)
from tests.test_impala import random_rollout

T, B, A = 8, 8, 2
# Frames of the smallest size the Nature CNN takes: the layers are those of 84 x 84 frames.
ATARI = EnvSpec("Breakout-v5", ArraySpec((4, 36, 36), "uint8"), Discrete(4))
MINATAR = EnvSpec("gymnax:Breakout-MinAtar", ArraySpec((10, 10, 4), "bool"), Discrete(3))


def make_agent(env_spec=CARTPOLE, **agent):
    config = small_update_config(pqn, T, B, **agent)
    return pqn.make(config, env_spec, derive_sizes(config))


def test_q_lambda_targets_match_a_hand_computed_case():
    # One env, T = 3, gamma 0.5, lambda 0.5; max_a Q of obs[1..3] is 2, 4, 8, rewards 1.
    q_values = np.array([[0.0, 9.0], [2.0, -1.0], [3.0, 4.0], [8.0, 0.0]], np.float32)[:, None]
    rewards = np.ones((3, 1), np.float32)
    none = np.zeros((3, 1), bool)
    at_1 = np.array([[False], [True], [False]])

    def targets(terminations, truncations):
        out = pqn.q_lambda_targets(q_values, rewards, terminations, truncations, 0.5, 0.5)
        return np.asarray(out)[:, 0]

    # G2 = 1 + .5 * 8 = 5; G1 = 1 + .5 (.5 * 4 + .5 * 5) = 3.25; G0 = 1 + .5 (.5 * 2 + .5 * 3.25).
    np.testing.assert_allclose(targets(none, none), [2.3125, 3.25, 5.0])
    # A termination at t = 1: G1 = r1 = 1 (nothing bootstraps), G0 = 1 + .5 (1 + .5).
    np.testing.assert_allclose(targets(at_1, none)[:2], [1.75, 1.0])
    # A truncation at t = 1: G1 = 1 + .5 * 4 bootstraps from obs[2]; the trace is cut, so
    # G0 = 1 + .5 (.5 * 2 + .5 * 3) takes G1, not the later episode's G2.
    np.testing.assert_allclose(targets(none, at_1)[:2], [2.25, 3.0])


def test_epsilon_decays_per_update_and_travels_with_the_parameters():
    # 10 updates; epsilon from 1 to 0.1 over the first half of them.
    agent = make_agent(epsilon_start=1.0, epsilon_finish=0.1, exploration_fraction=0.5)
    state = agent.init(jax.random.key(0))
    update = jax.jit(agent.update)
    seen = [float(agent.policy_params(state)["epsilon"])]  # Version v's at [v - 1].
    logged = []
    for u in range(7):
        state, metrics = update(state, random_rollout(u).replace(policy_outputs={}))
        assert set(metrics) >= {"loss", "q_mean", "behaviour_epsilon", "learning_rate"}
        seen.append(float(agent.policy_params(state)["epsilon"]))
        logged.append(float(metrics["behaviour_epsilon"]))
    np.testing.assert_allclose(seen, [1.0, 0.82, 0.64, 0.46, 0.28, 0.1, 0.1, 0.1], atol=1e-6)
    # Update k logs the epsilon of the version that collected rollout k: max(1, k - 1).
    np.testing.assert_allclose(logged, [seen[max(1, k - 1) - 1] for k in range(1, 8)], atol=1e-7)
    assert float(state.epsilon) == pytest.approx(0.1)  # Learner state, checkpointed with it.


def test_act_is_epsilon_greedy_with_the_epsilon_it_is_given():
    agent = make_agent()
    params = agent.policy_params(agent.init(jax.random.key(0)))
    obs = np.random.default_rng(0).normal(size=(4096, 4)).astype(np.float32)
    keys = jax.random.split(jax.random.key(1), 4096)
    greedy = np.asarray(agent.act_greedy(params, obs))
    act = jax.jit(agent.act)
    for epsilon, agreement in [(0.0, 1.0), (0.5, 0.75), (1.0, 0.5)]:
        actions, outputs = act({**params, "epsilon": np.float32(epsilon)}, obs, keys)
        assert outputs == {} and actions.dtype == np.int32
        assert np.mean(np.asarray(actions) == greedy) == pytest.approx(agreement, abs=0.03)


@pytest.mark.parametrize(
    "name, env_spec, layer_norms",
    [
        ("mlp", CARTPOLE, 2),  # The two hidden layers.
        ("nature_cnn", ATARI, 4),  # Three convolutions and the dense layer.
        ("impala_resnet", ATARI, 16),  # 3 x (a convolution and 2 blocks of 2) + dense.
        ("minatar", MINATAR, 3),  # The convolution, the dense layer, one hidden layer.
    ],
)
def test_q_networks_have_a_layer_norm_after_every_layer(name, env_spec, layer_norms):
    hidden = (64,) if name == "minatar" else (64, 64)
    obs = jax.ShapeDtypeStruct((3, *env_spec.observation.shape), env_spec.observation.dtype)
    counts = {}
    for norm in ("layer_norm", "none"):
        network = make_network(
            name,
            env_spec.action,
            observation=env_spec.observation,
            norm=norm,
            q_head=True,
            hidden=hidden,
        )
        params = jax.eval_shape(network.init, jax.random.key(0), obs)  # Shapes only: fast.
        paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(params)]
        counts[norm] = sum("LayerNorm" in p and p.endswith("['scale']") for p in paths)
        q_values = jax.eval_shape(network.apply, params, obs)
        assert q_values.shape == (3, env_spec.action.num_actions)
    assert counts == {"layer_norm": layer_norms, "none": 0}


def test_layer_norm_makes_the_mlp_q_values_invariant_to_the_observation_scale():
    network = make_network("mlp", Discrete(A), norm="layer_norm", q_head=True)
    obs = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    params = network.init(jax.random.key(0), obs)
    np.testing.assert_allclose(
        network.apply(params, 10 * obs), network.apply(params, obs), rtol=1e-3, atol=1e-4
    )
    plain = make_network("mlp", Discrete(A), norm="none", q_head=True)
    plain_params = plain.init(jax.random.key(0), obs)
    assert not np.allclose(plain.apply(plain_params, 10 * obs), plain.apply(plain_params, obs))


def test_a_non_discrete_action_space_is_refused_in_one_line():
    pendulum = EnvSpec("Pendulum-v1", ArraySpec((3,), "float32"), Box((1,), (-2.0,), (2.0,)))
    with pytest.raises(ConfigError) as error:
        make_agent(pendulum)
    message = str(error.value)
    assert "\n" not in message and "agent.name 'pqn'" in message and "Pendulum-v1" in message
    assert "Box" in message
    with pytest.raises(ConfigError, match="agent.network 'multi_input'"):
        make_agent(network="multi_input")
    with pytest.raises(ConfigError, match="agent.num_minibatches"):
        make_agent(num_minibatches=3)
    # A rising epsilon (most likely the two keys swapped), refused as DQN refuses one.
    rising = (
        r"^agent.epsilon_start \(0.01\) must be >= agent.epsilon_finish \(0.5\): epsilon decays$"
    )
    with pytest.raises(ConfigError, match=rising):
        make_agent(epsilon_start=0.01, epsilon_finish=0.5)
    # Only networks PQN takes are suggested (multi_input also reads a grid; PQN refuses it).
    grid = EnvSpec("Breakout-MinAtar", ArraySpec((10, 10, 4), "float32"), Discrete(3))
    with pytest.raises(ConfigError) as error:
        make_agent(grid, network="nature_cnn")
    assert "use agent.network=" in str(error.value) and "multi_input" not in str(error.value)
    # Atari frames, which only multi_input of the other networks would flatten.
    for network in ("mlp", "minatar"):
        with pytest.raises(ConfigError) as error:
            make_agent(ATARI, network=network)
        message = str(error.value)
        assert "\n" not in message and f"agent.network {network!r}" in message
        assert message.endswith("use agent.network=nature_cnn or impala_resnet")
    for widths in ((64, 0), (-4,)):
        with pytest.raises(ConfigError, match=r"agent.hidden_sizes .* must be positive integers"):
            make_agent(hidden_sizes=widths)


def test_update_agrees_across_layouts_and_moves_no_rollout_data():
    agent = make_agent()
    rollout = random_rollout(1).replace(policy_outputs={})
    assert_update_agrees_across_layouts(agent, rollout, device_counts=(1, 2))
    assert_update_moves_no_rollout_data(agent, rollout, num_devices=2)


def _with_behaviour_q_values(agent, params, rollout):
    """`rollout` with the Q-values `agent.act` gives for every obs[t] stored, as actors do."""
    keys = jax.random.split(jax.random.key(3), B)
    q_values = [
        agent.act({"network": params, "epsilon": 0.0}, obs, keys)[1]["q_values"]
        for obs in rollout.obs
    ]
    return rollout.replace(policy_outputs={"q_values": np.stack(q_values)})


def test_targets_from_the_behaviour_q_values_match_the_learners_under_lag_0():
    # Under policy lag 0 the actors hold the learner's version: the Q-values they stored
    # give the same update as the learner's own evaluation of the rollout.
    learner_agent, behaviour_agent = make_agent(), make_agent(q_targets="behaviour")
    state = learner_agent.init(jax.random.key(0))
    rollout = random_rollout(4).replace(policy_outputs={})
    stored = _with_behaviour_q_values(behaviour_agent, state.params, rollout)
    assert stored.policy_outputs["q_values"].shape == (T + 1, B, A)
    reference, reference_metrics = jax.jit(learner_agent.update)(state, rollout)
    from_behaviour, metrics = jax.jit(behaviour_agent.update)(state, stored)
    for a, b in zip(
        jax.tree.leaves(reference.params), jax.tree.leaves(from_behaviour.params), strict=True
    ):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(metrics["target_mean"], reference_metrics["target_mean"], rtol=1e-6)
    # The stored Q-values are what the targets take: other values give other targets.
    shifted = stored.replace(policy_outputs={"q_values": stored.policy_outputs["q_values"] + 1})
    _, shifted_metrics = jax.jit(behaviour_agent.update)(state, shifted)
    assert float(shifted_metrics["target_mean"]) > float(metrics["target_mean"]) + 0.5
    # The learner's agent stores nothing, so its rollouts carry no Q-values.
    assert (
        learner_agent.act(
            {"network": state.params, "epsilon": 0.0},
            rollout.obs[0],
            jax.random.split(jax.random.key(3), B),
        )[1]
        == {}
    )
    with pytest.raises(ConfigError, match=r"agent\.q_targets 'actor'"):
        make_agent(q_targets="actor")


def test_targets_from_the_behaviour_q_values_spare_the_learner_a_forward_pass():
    # The compiled update of the MinAtar CNN: without its pass over the rollout's T + 1
    # observations it does fewer floating-point operations.
    def update_flops(q_targets):
        agent = make_agent(MINATAR, network="minatar", q_targets=q_targets)
        state = jax.eval_shape(agent.init, jax.random.key(0))
        rollout = jax.eval_shape(lambda: _minatar_rollout(q_targets == "behaviour"))
        compiled = jax.jit(agent.update).lower(state, rollout).compile()
        analysis = compiled.cost_analysis()
        analysis = analysis[0] if isinstance(analysis, list) else analysis
        return analysis["flops"]

    learner_flops, behaviour_flops = update_flops("learner"), update_flops("behaviour")
    assert behaviour_flops < 0.97 * learner_flops, (behaviour_flops, learner_flops)


def _minatar_rollout(with_q_values):
    import jax.numpy as jnp

    from sebulba.agents.api import Rollout

    outputs = {"q_values": jnp.zeros((T + 1, B, 3))} if with_q_values else {}
    return Rollout(
        obs=jnp.zeros((T + 1, B, 10, 10, 4), bool),
        actions=jnp.zeros((T, B), jnp.int32),
        rewards=jnp.zeros((T, B)),
        terminations=jnp.zeros((T, B), bool),
        truncations=jnp.zeros((T, B), bool),
        valid=jnp.ones((T, B), bool),
        policy_outputs=outputs,
        env_ids=jnp.arange(B, dtype=jnp.int32),
    )


def test_invalid_steps_carry_no_weight():
    agent = make_agent()
    rollout = random_rollout(2).replace(policy_outputs={})
    invalid = ~rollout.valid
    rng = np.random.default_rng(5)
    # The actions and rewards of envpool's reset steps are ignored by every target and loss.
    scrambled = rollout.replace(
        actions=np.where(invalid, 1 - rollout.actions, rollout.actions),
        rewards=np.where(invalid, rng.normal(size=invalid.shape) * 100, rollout.rewards).astype(
            np.float32
        ),
    )
    state = agent.init(jax.random.key(0))
    update = jax.jit(agent.update)
    first, _ = update(state, rollout)
    second, _ = update(agent.init(jax.random.key(0)), scrambled)
    for a, b in zip(jax.tree.leaves(first.params), jax.tree.leaves(second.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_sebulba_lag_one_actors_act_with_the_previous_versions_epsilon_and_network():
    # Version 1 explores fully (epsilon 1); every later version acts greedily (epsilon 0).
    config = load_config("pqn_cartpole", "smoke")
    config.total_timesteps = 8 * 16 * 5
    config.agent.exploration_fraction = 1 / 5
    config.agent.epsilon_finish = 0.0
    config.agent.learning_rate = 1e-2
    config.mesh.learner_device_ids = (1, 2)
    setup = train.prepare(config)
    state = train.init_learner_state(setup)
    pipeline = make_pipeline(setup, policy_lag=1, clip_rewards=False)
    versions = {1: jax.device_get(setup.agent.policy_params(state))}
    rollouts = []
    original_assemble = pipeline._assemble

    def assemble_and_record(actor_rollouts):
        rollout = original_assemble(actor_rollouts)
        rollouts.append(jax.device_get((rollout.obs, rollout.actions)))
        return rollout

    def on_update(report, new_state):
        versions[report.learner_policy_version] = jax.device_get(
            setup.agent.policy_params(new_state)
        )

    pipeline._assemble = assemble_and_record
    pipeline.run(state, on_update=on_update)
    greedy = jax.jit(jax.vmap(setup.agent.act_greedy, in_axes=(None, 0)))
    assert [float(versions[v]["epsilon"]) for v in range(1, 7)] == [1.0] + [0.0] * 5
    for update, (obs, actions) in enumerate(rollouts, start=1):
        version = required_policy_version(update, 1)
        agreement = np.mean(np.asarray(greedy(versions[version], obs[:-1])) == actions)
        if version == 1:
            assert agreement < 0.8, update  # Uniform actions: about half are greedy.
        else:
            assert agreement == 1.0, update


def test_a_run_whose_targets_take_the_behaviour_q_values_stores_its_versions(tmp_path):
    # Under lag 1 the stored Q-values are version k - 1's: debug.consistency_checks
    # recomputes every rollout's policy outputs with the version the schedule names.
    config = load_config("pqn_cartpole", "smoke")
    config.agent.q_targets = "behaviour"
    config.debug.consistency_checks = True
    config.log.tensorboard = False
    train.train(config, str(tmp_path))
    lines = read_metrics(str(tmp_path))
    assert read_summary(str(tmp_path))["updates"] == len(lines) > 1
    assert all(np.isfinite(line["target_mean"]) for line in lines)


def test_same_seed_same_checksum_under_delays_and_the_lag_is_logged(tmp_path):
    checksums = {}
    for name, delay in [("a", 0.0), ("b", 0.05)]:
        config = load_config("pqn_cartpole", "smoke")
        config.debug.learner_delay_s = delay
        config.log.tensorboard = False
        train.train(config, str(tmp_path / name))
        checksums[name] = read_summary(str(tmp_path / name))["params_checksum"]
    assert checksums["a"] == checksums["b"]
    lines = read_metrics(str(tmp_path / "a"))
    versions = [line["learner_policy_version"] - line["actor_policy_version"] for line in lines]
    assert versions == [1, 2, 2, 2]
    for name in ("loss", "q_mean", "target_mean", "behaviour_epsilon", "learning_rate"):
        assert all(np.isfinite(line[name]) for line in lines)


def test_runs_in_anakin_mode_on_minatar(tmp_path):
    config = load_config("pqn_minatar", "Asterix,smoke")
    config.log.tensorboard = False
    train.train(config, str(tmp_path))
    summary = read_summary(str(tmp_path))
    assert summary["architecture"] == "anakin" and summary["agent"] == "pqn"
    lines = read_metrics(str(tmp_path))
    assert [line["update"] for line in lines] == [1, 2, 3, 4]
    assert all(np.isfinite(line["loss"]) for line in lines)


def test_atari_smoke_runs_with_the_nature_cnn(tmp_path):
    config = load_config("pqn_atari", "purejaxql,smoke")
    assert config.env.repeat_action_probability == 0.0 and not config.env.full_action_space
    assert config.env.kwargs.to_dict() == {"episodic_life": True, "noop_max": 30}
    config.log.tensorboard = False
    train.train(config, str(tmp_path))
    lines = read_metrics(str(tmp_path))
    assert len(lines) == 2 and all(np.isfinite(line["loss"]) for line in lines)


def test_learns_cartpole(tmp_path):
    # configs/pqn_cartpole.py cut to 60k env steps (29 updates, the step size and epsilon
    # annealed over them). Random actions score about 22; seeds 1 and 2 ended at 373 and
    # 274 (the last 100 episodes), seed 1 at 381 after 80k steps. Compiled with the tests'
    # fast flags, not in an `xla_default_compilation` process: this run took 15.9 s of CPU
    # either way (it is mostly compilation; the slower programs' 29 updates make up what
    # the faster compilation saves), so that process's start-up was pure cost. Seed 1
    # ended at 373 with the fast flags, 353 with XLA's defaults.
    config = load_config("pqn_cartpole")
    config.total_timesteps = 60_000
    config.log.tensorboard = False
    config.log.every_updates = 100
    train.train(config, str(tmp_path))
    assert read_summary(str(tmp_path))["mean_return"] >= 200


def test_an_interrupted_anakin_run_resumes_with_its_epsilon_bit_identically(tmp_path):
    # gymnax's CartPole, lag 1, 6 updates; epsilon changes at every one of them.
    config = load_config("pqn_cartpole", "smoke")
    config.env.id = "gymnax:CartPole-v1"
    config.total_timesteps = 8 * 16 * 6
    config.agent.epsilon_finish = 0.0
    config.agent.exploration_fraction = 1.0
    config.log.tensorboard = False
    reference = train.train(config, str(tmp_path / "reference"))
    workdir = str(tmp_path / "run")

    def interrupt_after_update_2(report, state):
        del state
        if report.update == 2:
            os.kill(os.getpid(), signal.SIGINT)

    train.train(config, workdir, on_update=interrupt_after_update_2)
    [stopped] = checkpoint.list_steps(checkpoint.checkpoints_dir(workdir))
    assert 2 <= stopped < 6 and not os.path.exists(os.path.join(workdir, "summary.json"))
    resumed = train.train(config, workdir)
    assert float(resumed.epsilon) == pytest.approx(0.0) and float(reference.epsilon) == 0.0
    for a, b in zip(jax.tree.leaves(reference), jax.tree.leaves(resumed), strict=True):
        np.testing.assert_array_equal(jax.device_get(a), jax.device_get(b))
    summary = read_summary(workdir)
    assert (
        summary["params_checksum"] == read_summary(str(tmp_path / "reference"))["params_checksum"]
    )
    # Each line logs the epsilon of the version that collected its rollout, max(1, k - 1).
    epsilons = [line["behaviour_epsilon"] for line in read_metrics(workdir)]
    np.testing.assert_allclose(epsilons, [1.0, 1.0, 5 / 6, 4 / 6, 3 / 6, 2 / 6], atol=1e-6)
