"""PopArt (sebulba.agents.popart): preserved outputs, statistics, agents, resume, policies."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

import sebulba
from sebulba import train
from sebulba.agents import impala, learner, popart, ppo
from sebulba.agents.api import Discrete, Rollout
from sebulba.agents.networks import make_network
from sebulba.config.sizes import derive_sizes
from sebulba.environments import tasks
from sebulba.errors import ConfigError
from tests.helpers import (
    CARTPOLE,
    agent_config,
    assert_update_moves_no_rollout_data,
    load_config,
    popart_overrides,
    read_summary,
    small_update_config,
)

T, B = 8, 8
TWO_TASKS = ("CartPole-v1", "CartPole-v0")


def random_statistics(rng, num_tasks):
    shift = rng.normal(0.0, 5.0, num_tasks).astype(np.float32)
    scale = rng.uniform(0.5, 5.0, num_tasks).astype(np.float32)
    return rlax.PopArtState(
        jnp.asarray(shift), jnp.asarray(scale), jnp.asarray(scale**2 + shift**2)
    )


def random_network_params(network, obs, seed):
    """Random parameters of the network's shapes, biases non-zero too: normal, of spread
    1 / sqrt(fan-in) for kernels (so activations stay O(1)) and 0.1 for biases. Drawn
    directly rather than by the network's initialisers and then perturbed: the Nature
    CNN's orthogonal dense kernel (a QR of 3136 x 512) took most of the test's time."""
    shapes = jax.eval_shape(network.init, jax.random.key(0), obs)
    leaves, tree = jax.tree.flatten(shapes)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    drawn = [
        jax.random.normal(k, x.shape, x.dtype)
        * (1 / np.sqrt(np.prod(x.shape[:-1])) if len(x.shape) > 1 else 0.1)
        for x, k in zip(leaves, keys, strict=True)
    ]
    return jax.tree.unflatten(tree, drawn)


def unnormalized_values(network, params, state, obs):
    return popart.all_unnormalized(state, jax.jit(network.apply)(params, obs)[1])


@pytest.mark.parametrize(
    "name, obs_shape, dtype",
    [("mlp", (4,), np.float32), ("nature_cnn", (4, 84, 84), np.uint8)],
)
def test_rescaling_preserves_every_tasks_unnormalised_values(name, obs_shape, dtype):
    # The paper's invariant, for random parameters, statistics and masked targets of 3 tasks.
    num_tasks = 3
    rng = np.random.default_rng(0)
    network = make_network(name, Discrete(4), value_heads=num_tasks)
    obs = jnp.asarray(rng.integers(0, 255, (16, *obs_shape)).astype(dtype))
    for seed in range(3):
        params = random_network_params(network, obs, seed)
        old = random_statistics(rng, num_tasks)
        targets = jnp.asarray(rng.normal(20.0, 50.0, (T, B)).astype(np.float32))
        valid = jnp.asarray(rng.random((T, B)) > 0.2)
        task_of_column = jnp.asarray(rng.integers(0, num_tasks, B).astype(np.int32))
        moments = popart.task_moments(targets, valid, task_of_column[None], num_tasks)
        new = popart.updated_state(old, moments, step_size=0.1, scale_lb=1e-4, scale_ub=1e6)
        # Not vacuous: every task's statistics moved a lot.
        assert np.all(np.abs(np.asarray(new.shift - old.shift)) > 0.1)
        assert np.all(np.abs(np.asarray(new.scale / old.scale) - 1.0) > 0.05)
        new_params = popart.preserved_params(params, old, new)

        before = unnormalized_values(network, params, old, obs)
        after = unnormalized_values(network, new_params, new, obs)
        assert before.shape == (16, num_tasks)
        # Equal to float32 rounding: a dot product's error scales with its terms, so the
        # absolute tolerance follows the largest output.
        magnitude = max(float(np.max(np.abs(before))), 10.0)
        np.testing.assert_allclose(after, before, rtol=1e-6, atol=1e-6 * magnitude)
        # Without the rescaling the same statistics change would move every output.
        unpreserved = unnormalized_values(network, params, new, obs)
        assert np.min(np.abs(np.asarray(unpreserved - before))) > 1e-2
        # Only the value head changes.
        changed = jax.tree.map(lambda a, b: bool(np.any(a != b)), params, new_params)
        flat = jax.tree_util.tree_flatten_with_path(changed)[0]
        assert {popart.VALUE_HEAD in jax.tree_util.keystr(path) for path, c in flat if c} == {True}


def test_equal_targets_move_the_statistics_as_per_sample_rlax_steps():
    # n equal targets at once = n steps of rlax.art with one target each.
    state = popart.initial_state(2)
    targets, n, beta = 7.0, 50, 3e-3
    sequential = state
    for _ in range(n):
        sequential = rlax.art(
            sequential, jnp.full((1,), targets), jnp.zeros((1,), jnp.int32), beta, 1e-4, 1e6
        )
    moments = popart.task_moments(
        jnp.full((n,), targets), jnp.ones((n,), bool), jnp.zeros((n,), jnp.int32), 2
    )
    batched = popart.updated_state(state, moments, step_size=beta, scale_lb=1e-4, scale_ub=1e6)
    for a, b in zip(batched, sequential, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5)
    assert float(batched.shift[0]) == pytest.approx(targets * (1 - (1 - beta) ** n), rel=1e-5)
    assert float(batched.shift[1]) == 0.0  # Task 1 saw no target.


def test_each_task_follows_the_mean_of_its_own_valid_targets():
    beta = 0.01
    targets = jnp.asarray([[1.0, 3.0, 100.0, -5.0], [5.0, 7.0, -100.0, 5.0]])
    valid = jnp.asarray([[True, True, True, True], [True, True, False, True]])
    task_of_column = jnp.asarray([0, 0, 2, 2], jnp.int32)
    moments = popart.task_moments(targets, valid, task_of_column[None], 3)
    np.testing.assert_allclose(moments[0], [4, 0, 3])  # Valid targets per task.
    state = popart.initial_state(3)
    new = popart.updated_state(state, moments, step_size=beta, scale_lb=1e-4, scale_ub=1e6)
    # Task 0: targets 1, 3, 5, 7 (mean 4, mean square 21); task 2: 100, -5, 5 (the masked
    # -100 is no target); task 1 has none and keeps the prior.
    for task, mean, mean_square, n in [(0, 4.0, 21.0, 4), (2, 100 / 3, 10050 / 3, 3)]:
        rate = 1 - (1 - beta) ** n
        shift = rate * mean
        second = 1.0 + rate * (mean_square - 1.0)
        assert float(new.shift[task]) == pytest.approx(shift, rel=1e-5)
        assert float(new.second_moment[task]) == pytest.approx(second, rel=1e-5)
        assert float(new.scale[task]) == pytest.approx(np.sqrt(second - shift**2), rel=1e-5)
    assert (float(new.shift[1]), float(new.scale[1]), float(new.second_moment[1])) == (0, 1, 1)


def test_the_scale_stays_within_its_bounds():
    state = popart.initial_state(3)
    # A full step onto the batch moments: task 0's targets have variance 0, task 1's a
    # standard deviation of 1e6; task 2 has none and keeps its scale 1.
    targets = jnp.asarray([3.0, 3.0, 1e6, -1e6])
    moments = popart.task_moments(targets, jnp.ones(4, bool), jnp.asarray([0, 0, 1, 1]), 3)
    new = popart.updated_state(state, moments, step_size=1.0, scale_lb=0.5, scale_ub=1e3)
    np.testing.assert_allclose(new.scale, [0.5, 1e3, 1.0])
    np.testing.assert_allclose(new.shift, [3.0, 0.0, 0.0])


def two_task_config(agent_module, **agent):
    config = small_update_config(agent_module, T, B, popart=True, **agent)
    config.env.ids = TWO_TASKS
    return config


def make_two_task_agent(agent_module, **agent):
    config = two_task_config(agent_module, **agent)
    return agent_module.make(config, CARTPOLE, derive_sizes(config))


def _random_rollout(seed, draw_policy_outputs):
    """Random CartPole-shaped data; `draw_policy_outputs(rng)` draws the agent's outputs last."""
    rng = np.random.default_rng(seed)
    return Rollout(
        obs=rng.normal(size=(T + 1, B, 4)).astype(np.float32),
        actions=rng.integers(0, 2, size=(T, B)).astype(np.int32),
        rewards=rng.normal(1.0, 1.0, size=(T, B)).astype(np.float32),
        terminations=rng.random((T, B)) < 0.1,
        truncations=rng.random((T, B)) < 0.05,
        valid=rng.random((T, B)) > 0.1,
        policy_outputs=draw_policy_outputs(rng),
        env_ids=np.arange(B, dtype=np.int32),
    )


def ppo_rollout(seed=0, num_tasks=2):
    """A random PPO rollout whose behaviour values differ per task column: [T + 1, B, K]."""

    def draw(rng):
        logprob = np.log(rng.uniform(0.2, 0.8, size=(T + 1, B))).astype(np.float32)
        values = rng.normal(size=(T + 1, B, num_tasks)) + 10 * np.arange(num_tasks)
        return {"logprob": logprob, "value": values.astype(np.float32)}

    return _random_rollout(seed, draw)


def impala_rollout(seed=0):
    return _random_rollout(
        seed, lambda rng: {"policy": rng.normal(size=(T + 1, B, 2)).astype(np.float32)}
    )


def test_popart_off_keeps_the_learner_state_and_the_scalar_value():
    config = small_update_config(ppo, T, B)
    agent = ppo.make(config, CARTPOLE, derive_sizes(config))
    state = agent.init(jax.random.key(0))
    assert type(state) is learner.TrainState
    assert "popart_value" not in str(jax.tree_util.tree_flatten_with_path(state.params)[0])
    _, outputs = agent.act(
        agent.policy_params(state), jnp.zeros((3, 4)), jax.random.split(jax.random.key(1), 3)
    )
    assert outputs["value"].shape == (3,)


@pytest.mark.parametrize("agent_module", [ppo, impala], ids=["ppo", "impala"])
def test_popart_state_lives_in_the_learner_state(agent_module):
    agent = make_two_task_agent(agent_module)
    state = agent.init(jax.random.key(0))
    assert isinstance(state, learner.PopArtTrainState)
    assert state.normalization is None
    np.testing.assert_array_equal(state.popart.scale, [1.0, 1.0])
    kernels = [
        x.shape
        for path, x in jax.tree_util.tree_flatten_with_path(state.params)[0]
        if popart.VALUE_HEAD in jax.tree_util.keystr(path)
    ]
    assert sorted(kernels) == [(2,), (64, 2)]


def test_ppo_acts_with_every_tasks_unnormalised_value():
    agent = make_two_task_agent(ppo)
    state = agent.init(jax.random.key(0))
    stats = rlax.PopArtState(jnp.asarray([5.0, -3.0]), jnp.asarray([2.0, 4.0]), jnp.ones(2))
    state = state.replace(popart=stats)
    obs = jnp.asarray(np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32))
    _, outputs = agent.act(agent.policy_params(state), obs, jax.random.split(jax.random.key(1), 5))
    network = make_network("mlp", Discrete(2), value_heads=2)
    normalized = network.apply(state.params, obs)[1]
    np.testing.assert_allclose(outputs["value"], normalized * stats.scale + stats.shift, rtol=1e-6)


def test_ppo_statistics_take_in_the_returns_of_each_columns_own_task():
    # Behaviour values of task 1's heads are ~10 higher: picking the wrong column would
    # change the returns and so the statistics.
    agent = make_two_task_agent(ppo, popart_step_size=0.05)
    rollout = ppo_rollout()
    state = agent.init(jax.random.key(0))
    new_state, metrics = jax.jit(agent.update)(state, rollout)
    column_tasks = np.arange(B) * 2 // B
    values = np.take_along_axis(
        rollout.policy_outputs["value"], column_tasks[None, :, None], axis=-1
    )[..., 0]
    _, returns = ppo.advantages_and_returns(rollout, 0.99, 0.95, jnp.asarray(values))
    moments = popart.task_moments(returns, rollout.valid, jnp.asarray(column_tasks)[None], 2)
    expected = popart.updated_state(
        state.popart, moments, step_size=0.05, scale_lb=1e-4, scale_ub=1e6
    )
    for a, b in zip(new_state.popart, expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    assert float(metrics["popart_shift/CartPole-v0"]) == pytest.approx(float(expected.shift[1]))
    assert float(metrics["popart_scale/CartPole-v1"]) == pytest.approx(float(expected.scale[0]))


def test_impala_statistics_take_in_the_vtrace_targets_before_the_step():
    # One minibatch: its V-trace targets come from the initial parameters (statistics 0
    # and 1, so n(s) is the value) and update the statistics before the optimizer step.
    agent = make_two_task_agent(impala, popart_step_size=0.05, num_minibatches=1)
    rollout = impala_rollout()
    state = agent.init(jax.random.key(0))
    new_state, metrics = jax.jit(agent.update)(state, rollout)

    network = make_network("mlp", Discrete(2), value_heads=2)
    column_tasks = np.arange(B) * 2 // B
    all_values = network.apply(state.params, rollout.obs.reshape(-1, 4))
    logits = all_values[0].reshape(T + 1, B, 2)[:-1]
    values = np.take_along_axis(
        np.asarray(all_values[1]).reshape(T + 1, B, 2), column_tasks[None, :, None], axis=-1
    )[..., 0]
    log_pi = jax.nn.log_softmax(logits)
    log_mu = jax.nn.log_softmax(rollout.policy_outputs["policy"][:-1])
    action = rollout.actions[..., None]
    rhos = jnp.exp(
        jnp.take_along_axis(log_pi, action, -1)[..., 0]
        - jnp.take_along_axis(log_mu, action, -1)[..., 0]
    )
    returns = impala.vtrace(
        jnp.asarray(values),
        rhos,
        rollout.rewards,
        rollout.terminations,
        rollout.truncations,
        gamma=0.99,
        vtrace_lambda=1.0,
        clip_rho_threshold=1.0,
        clip_pg_rho_threshold=1.0,
    )
    targets = returns.errors + values[:-1]
    moments = popart.task_moments(targets, rollout.valid, jnp.asarray(column_tasks)[None], 2)
    expected = popart.updated_state(
        state.popart, moments, step_size=0.05, scale_lb=1e-4, scale_ub=1e6
    )
    for a, b in zip(new_state.popart, expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert float(metrics["popart_scale/CartPole-v0"]) == pytest.approx(float(expected.scale[1]))


def test_impala_normalises_sparse_rewards_with_statistics_that_have_seen_them():
    # A long stretch without reward leaves a task's scale at its lower bound (1e-4). The
    # first rewarded minibatch must update the statistics before its loss (Hessel et al.
    # 2019, Algorithm 1; rlax.popart_update): its targets, of order 1, are then normalised
    # to tens. Normalised with the stale scale, they would be ~1e4 and the value loss ~1e8.
    agent = make_two_task_agent(impala, num_minibatches=1)
    state = agent.init(jax.random.key(0))
    decayed = rlax.PopArtState(jnp.zeros(2), jnp.full(2, 1e-4), jnp.full(2, 1e-8))
    state = state.replace(popart=decayed)
    rollout = impala_rollout()  # Rewards ~ N(1, 1): the first rewarded rollout.
    new_state, metrics = jax.jit(agent.update)(state, rollout)
    assert np.all(np.asarray(new_state.popart.scale) > 1e-3)  # The statistics saw them.
    assert 0 < float(metrics["value_loss"]) < 1e5, metrics["value_loss"]
    assert np.isfinite(float(metrics["policy_loss"]))


def test_impala_accumulation_and_loops_agree_with_popart():
    # The minibatch's target moments are sums, so micro-batches add up to the unsplit
    # statistics; the rolled and unrolled loops thread the statistics alike.
    rollout = impala_rollout()

    def final_state(**agent):
        agent = make_two_task_agent(impala, popart_step_size=0.05, **agent)
        state, _ = jax.jit(agent.update)(agent.init(jax.random.key(0)), rollout)
        return jax.tree.leaves(jax.device_get(state))

    reference = final_state()
    for loop in ("scan", "unrolled"):
        other = final_state(gradient_accumulation_steps=2, minibatch_loop=loop)
        for a, b in zip(reference, other, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("agent_module", [ppo, impala], ids=["ppo", "impala"])
def test_popart_update_moves_no_rollout_data_between_devices(agent_module):
    rollout = ppo_rollout() if agent_module is ppo else impala_rollout()
    assert_update_moves_no_rollout_data(make_two_task_agent(agent_module), rollout)


@pytest.mark.parametrize("agent_module", [ppo, impala], ids=["ppo", "impala"])
@pytest.mark.parametrize(
    "field, value, message",
    [
        ("popart_step_size", 0.0, "agent.popart_step_size must be a number in (0, 1]"),
        ("popart_step_size", 1.5, "agent.popart_step_size must be a number in (0, 1]"),
        ("popart_scale_lb", -1.0, "agent.popart_scale_lb must be a number > 0"),
        ("popart_scale_ub", 1e-5, "agent.popart_scale_ub (1e-05) must exceed"),
    ],
)
def test_bad_popart_values_name_the_field(agent_module, field, value, message):
    config = two_task_config(agent_module)
    config.agent[field] = value
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        agent_module.make(config, CARTPOLE, derive_sizes(config))


def test_a_single_task_run_has_one_value_head():
    config = small_update_config(impala, T, B, popart=True)
    layout = tasks.task_layout(config, B)
    settings = popart.popart_of(config, layout)
    assert settings.value_heads == 1
    assert list(settings.metrics(popart.initial_state(1))) == [
        "popart_shift/CartPole-v1",
        "popart_scale/CartPole-v1",
    ]


def test_resume_restores_the_popart_statistics_exactly(tmp_path):
    # IMPALA on two CartPole tasks: 6 updates, a checkpoint after 3 and after 6.
    overrides = popart_overrides()
    first = str(tmp_path / "first")
    saved = jax.device_get(
        train.train(agent_config(impala, ckpt__every_updates=3, **overrides), first)
    )
    assert np.all(np.asarray(saved.popart.shift) != 0)
    setup = train.prepare(agent_config(impala, ckpt__resume_from=first, **overrides))
    start = train.restore_or_init(setup, str(tmp_path / "new"))
    assert start.first_update == 7
    assert isinstance(start.state, learner.PopArtTrainState)
    for restored, expected in zip(
        jax.tree.leaves(start.state), jax.tree.leaves(saved), strict=True
    ):
        np.testing.assert_array_equal(jax.device_get(restored), expected)  # Bit-exact.

    # Two resumes from update 3 agree (envs restart, so not with the first run), and
    # continue the statistics saved at update 3.
    source = os.path.join(first, "checkpoints", "3")
    setup = train.prepare(agent_config(impala, ckpt__resume_from=source, **overrides))
    at_three = jax.device_get(train.restore_or_init(setup, str(tmp_path / "probe")).state.popart)
    results = []
    for name in ("a", "b"):
        config = agent_config(impala, ckpt__resume_from=source, **overrides)
        results.append(jax.device_get(train.train(config, str(tmp_path / name)).popart))
    for a, b, three in zip(*results, at_three, strict=True):
        np.testing.assert_array_equal(a, b)
        assert np.all(a != three)
    checksums = [read_summary(str(tmp_path / name))["params_checksum"] for name in ("a", "b")]
    assert checksums[0] == checksums[1]


@pytest.mark.parametrize("agent_module", [ppo, impala], ids=["ppo", "impala"])
def test_a_popart_run_loads_as_a_policy_and_acts(tmp_path, agent_module):
    workdir = str(tmp_path / "run")
    overrides = popart_overrides()
    del overrides["env__ids"]  # One task: load_policy builds the run's single env.
    state = jax.device_get(train.train(agent_config(agent_module, **overrides), workdir))
    policy = sebulba.load_policy(workdir, greedy=True)
    obs = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    network = make_network("mlp", Discrete(2), value_heads=1)
    logits = network.apply(state.params, obs)[0]
    np.testing.assert_array_equal(policy(obs), np.argmax(logits, axis=-1))
    sampled = sebulba.load_policy(workdir)(obs)
    assert sampled.shape == (16,) and set(np.unique(sampled)) <= {0, 1}


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, steps, threshold",
    [("ppo_cartpole", 150_000, 350.0), ("impala_cartpole", 300_000, 400.0)],
    ids=["ppo", "impala"],
)
def test_popart_agents_learn_cartpole(tmp_path, name, steps, threshold):
    # The CartPole configs with PopArt on, cut short: 12-20 s each on 2 CPU cores (CI).
    config = load_config(name)
    config.log.tensorboard = False
    config.agent.popart = True
    config.total_timesteps = steps
    train.train(config, str(tmp_path))
    summary = read_summary(str(tmp_path))
    assert summary["global_step"] >= steps - config.env.num_envs * config.agent.num_steps
    assert summary["mean_return"] >= threshold, summary
