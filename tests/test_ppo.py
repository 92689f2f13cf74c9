"""PPO: GAE and masks, layout-independent minibatches, sharded update, networks."""

import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from sebulba.agents import defaults, minibatches, ppo
from sebulba.agents.api import Discrete, Rollout, rollout_partition_specs
from sebulba.agents.networks import make_network
from sebulba.config import resume as resume_config
from sebulba.config.sizes import derive_sizes
from sebulba.errors import ConfigError
from tests.helpers import (
    CARTPOLE,
    assert_update_agrees_across_layouts,
    assert_update_moves_no_rollout_data,
    logged_learning_rates,
    mesh_of,
    run_update,
    small_update_config,
)

T, B = 8, 8


def make_agent(**agent):
    config = small_update_config(ppo, T, B, **{"update_epochs": 2, **agent})
    return ppo.make(config, CARTPOLE, derive_sizes(config))


def random_rollout(seed=0, num_envs=B):
    rng = np.random.default_rng(seed)
    return Rollout(
        obs=rng.normal(size=(T + 1, num_envs, 4)).astype(np.float32),
        actions=rng.integers(0, 2, size=(T, num_envs)).astype(np.int32),
        rewards=rng.normal(size=(T, num_envs)).astype(np.float32),
        terminations=rng.random((T, num_envs)) < 0.1,
        truncations=rng.random((T, num_envs)) < 0.05,
        valid=rng.random((T, num_envs)) > 0.1,
        policy_outputs={
            "logprob": np.log(rng.uniform(0.2, 0.8, size=(T + 1, num_envs))).astype(np.float32),
            "value": rng.normal(size=(T + 1, num_envs)).astype(np.float32),
        },
        env_ids=np.arange(num_envs, dtype=np.int32),
    )


def test_gae_hand_checked_terminations_truncations_and_lambda():
    # One env, T=3, values v = [1, 2, 3, 4], rewards 1, gamma = lambda = 0.5.
    rollout = Rollout(
        obs=np.zeros((4, 1, 4), np.float32),
        actions=np.zeros((3, 1), np.int32),
        rewards=np.ones((3, 1), np.float32),
        terminations=np.array([[False], [True], [False]]),
        truncations=np.zeros((3, 1), bool),
        valid=np.ones((3, 1), bool),
        policy_outputs={
            "logprob": np.zeros((4, 1), np.float32),
            "value": np.array([[1.0], [2.0], [3.0], [4.0]], np.float32),
        },
        env_ids=np.zeros(1, np.int32),
    )
    delta0 = 1 + 0.5 * 2 - 1
    delta1 = 1 + 0.0 - 2  # Terminal: no bootstrap.
    delta2 = 1 + 0.5 * 4 - 3
    expected = [delta0 + 0.25 * delta1, delta1, delta2]  # Trace cut after t=1.
    advantages, returns = ppo.advantages_and_returns(rollout, 0.5, 0.5)
    np.testing.assert_allclose(advantages[:, 0], expected, rtol=1e-6)
    np.testing.assert_allclose(returns[:, 0], np.add(expected, [1, 2, 3]), rtol=1e-6)
    # A truncation at t=1 bootstraps from v2 but still cuts the trace to t=0.
    truncated = rollout.replace(
        terminations=np.zeros((3, 1), bool), truncations=np.array([[False], [True], [False]])
    )
    advantages, _ = ppo.advantages_and_returns(truncated, 0.5, 0.5)
    d1 = 1 + 0.5 * 3 - 2
    np.testing.assert_allclose(advantages[:, 0], [delta0 + 0.25 * d1, d1, delta2], rtol=1e-6)


@pytest.mark.parametrize("norm_adv", ["minibatch", "batch"])
def test_invalid_samples_carry_no_weight(norm_adv):
    agent = make_agent(norm_adv=norm_adv)
    rollout = random_rollout()
    # Scrambling every invalid sample's data must not change the update.
    scrambled = rollout.replace(
        actions=np.where(rollout.valid, rollout.actions, 1 - rollout.actions),
        policy_outputs={
            "logprob": np.where(
                np.concatenate([rollout.valid, np.ones((1, B), bool)]),
                rollout.policy_outputs["logprob"],
                -5.0,
            ),
            "value": rollout.policy_outputs["value"],
        },
    )
    update = jax.jit(agent.update)
    new_a, metrics = update(agent.init(jax.random.key(0)), rollout)
    new_b, _ = update(agent.init(jax.random.key(0)), scrambled)
    for a, b in zip(jax.tree.leaves(new_a.params), jax.tree.leaves(new_b.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert np.isfinite(float(metrics["policy_loss"]))


def _composition(batches_fn, num_devices, permutation, num_minibatches=2):
    mesh = mesh_of(num_devices)
    env_ids = np.arange(B, dtype=np.int32)[permutation]
    time_index = np.broadcast_to(np.arange(T)[:, None], (T, B)).astype(np.int32)
    tree = {"t": time_index, "env": np.broadcast_to(env_ids, (T, B)).astype(np.int32)}
    sharding = NamedSharding(mesh, PartitionSpec(None, "batch"))
    fn = jax.jit(
        lambda tree, ids: batches_fn(tree, jax.random.key(3), ids, num_minibatches),
        in_shardings=(sharding, NamedSharding(mesh, PartitionSpec("batch"))),
    )
    out = jax.device_get(fn(tree, env_ids))
    hlo = fn.lower(tree, env_ids).compile().as_text()
    return [
        set(zip(out["t"][j].ravel(), out["env"][j].ravel(), strict=True))
        for j in range(num_minibatches)
    ], hlo


@pytest.mark.parametrize("batches_fn", [minibatches.time_shuffled, minibatches.env_groups])
def test_minibatch_composition_does_not_depend_on_layout(batches_fn):
    reference, _ = _composition(batches_fn, 1, np.arange(B))
    assert sum(len(m) for m in reference) == T * B  # Every sample exactly once.
    for num_devices in (2, 4):
        other, hlo = _composition(batches_fn, num_devices, np.arange(B))
        assert other == reference
        for collective in ("all-to-all", "all-gather", "collective-permute"):
            assert collective not in hlo
    # Column order must not matter either (pairs of adjacent columns swapped).
    swapped = np.arange(B).reshape(-1, 2)[::-1].ravel()
    other, _ = _composition(batches_fn, 2, swapped)
    assert other == reference


def test_update_agrees_across_learner_layouts_and_is_replicated():
    assert_update_agrees_across_layouts(make_agent(), random_rollout())


def test_compiled_update_moves_no_rollout_data_between_devices():
    assert_update_moves_no_rollout_data(make_agent(), random_rollout())


def test_scan_and_unrolled_loops_agree():
    rollout = random_rollout()
    out = {}
    for loop in ("scan", "unrolled"):
        agent = make_agent(minibatch_loop=loop)
        state, _ = jax.jit(agent.update)(agent.init(jax.random.key(0)), rollout)
        out[loop] = jax.device_get(state.params)
    for a, b in zip(jax.tree.leaves(out["scan"]), jax.tree.leaves(out["unrolled"]), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _final_params(agent, rollout):
    state, _ = jax.jit(agent.update)(agent.init(jax.random.key(0)), rollout)
    return jax.tree.leaves(jax.device_get(state.params))


@pytest.mark.parametrize("loop", ["scan", "unrolled"])
def test_gradient_accumulation_equals_the_unsplit_update_for_a_mean_loss(loop):
    # With every sample valid and no per-minibatch advantage normalisation the loss is a
    # plain mean over samples: the mean of micro-batch gradients is the minibatch's.
    # One epoch of one minibatch: more run the same code from other parameters (and would
    # multiply the unrolled programs' compile time); the layouts test below splits each of
    # 2 minibatches over 2 epochs. One split, into 4 micro-batches: a split into 2 runs the
    # same code but compiles a program of its own (the layouts test below has it).
    rollout = random_rollout().replace(valid=np.ones((T, B), bool))
    one_minibatch = dict(minibatch_loop=loop, update_epochs=1, num_minibatches=1)
    options = dict(norm_adv="none", **one_minibatch)
    reference = _final_params(make_agent(**options), rollout)
    accumulated = _final_params(make_agent(gradient_accumulation_steps=4, **options), rollout)
    for a, b in zip(reference, accumulated, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # The split is real: with per-micro-batch normalisation the update differs.
    normalised = _final_params(make_agent(gradient_accumulation_steps=4, **one_minibatch), rollout)
    unsplit = _final_params(make_agent(**one_minibatch), rollout)
    assert any(
        not np.allclose(a, b, rtol=1e-5, atol=1e-6)
        for a, b in zip(unsplit, normalised, strict=True)
    )


def test_accumulating_update_agrees_across_layouts_and_moves_no_rollout_data():
    agent = make_agent(gradient_accumulation_steps=2)
    assert_update_agrees_across_layouts(agent, random_rollout())
    assert_update_moves_no_rollout_data(agent, random_rollout())


def test_learning_rate_anneals_once_per_update():
    rates = logged_learning_rates(make_agent(), [random_rollout()] * 3)
    np.testing.assert_allclose(rates, [2.5e-4, 2.5e-4 * 0.9, 2.5e-4 * 0.8], rtol=1e-6)


@pytest.mark.parametrize(
    "agent, field",
    [
        ({"num_minibatches": 3}, "agent.num_minibatches"),
        ({"update_epochs": 0}, "agent.update_epochs"),
        ({"minibatch_loop": "fast"}, "agent.minibatch_loop"),
        ({"network": "transformer"}, "agent.network"),
        ({"gradient_accumulation_steps": 3}, "agent.gradient_accumulation_steps"),
        ({"gradient_accumulation_steps": 0}, "agent.gradient_accumulation_steps"),
    ],
)
def test_bad_ppo_values_name_the_field(agent, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        make_agent(**agent)


@pytest.mark.parametrize(
    "agent, message",
    [
        ({"learning_rate": -1.0}, "agent.learning_rate must be a number > 0, got -1.0"),
        ({"gamma": 1.5}, "agent.gamma must be a number in [0, 1], got 1.5"),
        ({"gae_lambda": -0.1}, "agent.gae_lambda must be a number in [0, 1], got -0.1"),
        ({"clip_coef": 0.0}, "agent.clip_coef must be a number > 0, got 0.0"),
        ({"ent_coef": -0.01}, "agent.ent_coef must be a number >= 0, got -0.01"),
        ({"vf_coef": float("nan")}, "agent.vf_coef must be a number >= 0, got nan"),
        ({"max_grad_norm": 0.0}, "agent.max_grad_norm must be a number > 0, got 0.0"),
        ({"num_minibatches": 0}, "agent.num_minibatches must be an integer >= 1, got 0"),
        ({"update_epochs": 0}, "agent.update_epochs must be an integer >= 1, got 0"),
        ({"norm_adv": "always"}, "agent.norm_adv 'always' must be one of minibatch, batch, none"),
        ({"conv_init": "xavier"}, "agent.conv_init 'xavier' must be one of orthogonal,"),
    ],
)
def test_out_of_range_ppo_values_name_the_field_value_and_range(agent, message):
    with pytest.raises(ConfigError) as raised:
        make_agent(**agent)
    assert str(raised.value).startswith(message)


def _params_after_update(agent, rollout):
    state, _ = jax.jit(agent.update)(agent.init(jax.random.key(0)), rollout)
    return jax.device_get(state.params)


def _assert_same_params(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def _differ(a, b):
    return any(
        not np.allclose(x, y, rtol=1e-5, atol=1e-6)
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


@pytest.mark.parametrize("norm_adv", ["minibatch", "batch", "none"])
def test_advantage_normalisation_removes_the_advantages_scale_and_offset(norm_adv):
    # With gamma 0 the advantages are rewards - values: scaling rewards and values by 3 and
    # shifting rewards by 5 maps every advantage A to 3 A + 5. With the value loss off only
    # the policy gradient moves the parameters, and a normalised one cannot see the change.
    agent = make_agent(norm_adv=norm_adv, gamma=0.0, vf_coef=0.0)
    rollout = random_rollout()
    shifted = rollout.replace(
        rewards=3.0 * rollout.rewards + 5.0,
        policy_outputs={
            "logprob": rollout.policy_outputs["logprob"],
            "value": 3.0 * rollout.policy_outputs["value"],
        },
    )
    a, b = _params_after_update(agent, rollout), _params_after_update(agent, shifted)
    if norm_adv == "none":
        assert _differ(a, b)
    else:
        _assert_same_params(a, b)


def test_batch_normalisation_uses_the_whole_rollouts_statistics():
    rollout = random_rollout()
    # One minibatch is the whole rollout: both modes see the same statistics...
    whole = {
        mode: _params_after_update(make_agent(norm_adv=mode, num_minibatches=1), rollout)
        for mode in ("minibatch", "batch")
    }
    _assert_same_params(whole["minibatch"], whole["batch"])
    # ...but with two, "minibatch" uses each half's own and "batch" still the rollout's.
    halves = {
        mode: _params_after_update(make_agent(norm_adv=mode), rollout)
        for mode in ("minibatch", "batch")
    }
    assert _differ(halves["minibatch"], halves["batch"])


def test_batch_normalisation_agrees_across_learner_layouts():
    # Statistics over the global rollout, not per learner device (as Cleanba computes
    # them), keep the update independent of the number of devices. Per-device statistics
    # already differ on 2 devices; the 4-device layout is the plain update's test's
    # (test_update_agrees_across_learner_layouts_and_is_replicated).
    assert_update_agrees_across_layouts(
        make_agent(norm_adv="batch"), random_rollout(), device_counts=(1, 2)
    )


@pytest.mark.parametrize("stored, mode", [(True, "minibatch"), (False, "none")])
def test_a_stored_bool_norm_adv_keeps_its_old_meaning(stored, mode):
    # config.json of runs from before the modes existed holds norm_adv as a bool.
    config = small_update_config(ppo, T, B, update_epochs=2)
    old = config.to_dict()
    old["agent"]["norm_adv"] = stored
    old = ml_collections.ConfigDict(old)
    legacy = ppo.make(old, CARTPOLE, derive_sizes(old))
    rollout = random_rollout()
    _assert_same_params(
        _params_after_update(legacy, rollout),
        _params_after_update(make_agent(norm_adv=mode), rollout),
    )


@pytest.mark.parametrize(
    "name, obs_shape, dtype",
    [
        ("mlp", (4,), jnp.float32),
        ("nature_cnn", (4, 84, 84), jnp.uint8),
        ("impala_resnet", (4, 84, 84), jnp.uint8),
    ],
)
def test_networks_map_observations_to_logits_and_values(name, obs_shape, dtype):
    network = make_network(name, Discrete(18))
    obs = jnp.full((2, *obs_shape), 7, dtype)
    params = network.init(jax.random.key(0), obs)
    again = network.init(jax.random.key(0), obs)
    logits, value = network.apply(params, obs)
    assert logits.shape == (2, 18) and value.shape == (2,)
    assert logits.dtype == jnp.float32
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(again), strict=True):
        np.testing.assert_array_equal(a, b)
    # baselines initialisation: the policy head starts near-uniform (gain 0.01).
    assert float(jnp.max(jnp.abs(logits))) < 0.5


# The auxiliary details of Huang et al. (2022): early stopping at a target KL (CleanRL
# ppo.py) and clip-range annealing (baselines ppo2). Both off by default.


def _updates(agent, rollout, num_updates=2):
    """The states after, and the metrics of, `num_updates` jitted updates on one rollout."""
    state, update, states, metrics = agent.init(jax.random.key(0)), jax.jit(agent.update), [], []
    for _ in range(num_updates):
        state, step_metrics = update(state, rollout)
        states.append(jax.device_get(state))
        metrics.append({name: float(value) for name, value in step_metrics.items()})
    return states, metrics


def _adam_count(state):
    # optax.chain(clip_by_global_norm, adam): adam's own chain holds ScaleByAdamState first.
    return int(state.opt_state[1][0].count)


def _without_schedule(state):
    return state.replace(opt_state=state.opt_state[1][0])  # ScaleByAdamState only.


def on_policy_rollout(agent, seed=0):
    """random_rollout with actions and log-probabilities of the agent's initial policy, so
    the KL starts at 0 and grows with every step instead of sitting at a random level."""
    rollout = random_rollout(seed)
    params = agent.policy_params(agent.init(jax.random.key(0)))
    keys = jax.random.split(jax.random.key(seed + 1), (T + 1) * B)
    actions, outputs = agent.act(params, rollout.obs.reshape((T + 1) * B, 4), keys)
    return rollout.replace(
        actions=np.asarray(actions).reshape(T + 1, B)[:T],
        policy_outputs={
            "logprob": np.asarray(outputs["logprob"]).reshape(T + 1, B),
            "value": rollout.policy_outputs["value"],
        },
    )


@functools.cache
def _plain_updates():
    """Two updates with the defaults, which the tests of both details compare with."""
    return _updates(make_agent(), random_rollout())


def test_a_huge_target_kl_changes_nothing_and_both_details_are_off_by_default():
    assert ppo.get_config().target_kl is None and ppo.get_config().anneal_clip is False
    rollout = random_rollout()
    plain, plain_metrics = _plain_updates()
    assert "epochs_run" not in plain_metrics[-1] and "clip_coef" not in plain_metrics[-1]
    huge, huge_metrics = _updates(make_agent(target_kl=1e9), rollout)
    _assert_same_params(plain[-1].params, huge[-1].params)
    assert [m["epochs_run"] for m in huge_metrics] == [2.0, 2.0]
    assert _adam_count(huge[-1]) == _adam_count(plain[-1]) == 2 * 2 * 2  # Updates x epochs x M.
    np.testing.assert_allclose(
        [m["learning_rate"] for m in huge_metrics], [m["learning_rate"] for m in plain_metrics]
    )


def _popart_lstm_agent(**agent):
    from tests.test_popart import make_two_task_agent, ppo_rollout

    made = make_two_task_agent(
        ppo, core="lstm", lstm_size=8, gradient_accumulation_steps=2, **agent
    )
    return made, ppo_rollout().replace(initial_carry=made.initial_carry(B))


def _plain_agent(**agent):
    return make_agent(**agent), random_rollout()


def _unrolled_normalised_agent(**agent):
    # One minibatch per epoch: the unrolled loop compiles for as long as it has steps.
    options = dict(normalize_observations=True, normalize_rewards=True, num_minibatches=1)
    return make_agent(minibatch_loop="unrolled", **options, **agent), random_rollout()


@pytest.mark.parametrize(
    "agent_and_rollout", [_plain_agent, _unrolled_normalised_agent, _popart_lstm_agent]
)
def test_a_tiny_target_kl_runs_only_the_first_epoch(agent_and_rollout):
    # Any KL exceeds 1e-9 after the first epoch: each update is then the first epoch's
    # steps, with the optimizer (its step count, Adam's bias correction and the step size)
    # exactly as in a run of one epoch per update. Scan and unrolled loops, normalisation,
    # PopArt, an LSTM's sequences and gradient accumulation.
    agent, rollout = agent_and_rollout(update_epochs=2, target_kl=1e-9)
    stopped, metrics = _updates(agent, rollout)
    agent, _ = agent_and_rollout(update_epochs=1)
    one_epoch, one_epoch_metrics = _updates(agent, rollout)
    for a, b in zip(stopped, one_epoch, strict=True):
        # The whole learner state, statistics and Adam's moments too. (Without early
        # stopping optax also keeps the schedule's step count, which the step size is then
        # computed from.)
        _assert_same_params(_without_schedule(a), _without_schedule(b))
    assert [m["epochs_run"] for m in metrics] == [1.0, 1.0]
    # Not a step more than the one-epoch run took: skipped steps leave Adam's count alone.
    assert _adam_count(stopped[-1]) == _adam_count(one_epoch[-1])
    # The losses are averaged over the steps that ran; approx_kl is the one that stopped
    # the epochs (the first epoch's last minibatch), as CleanRL logs them.
    np.testing.assert_allclose(
        metrics[-1]["policy_loss"], one_epoch_metrics[-1]["policy_loss"], rtol=1e-5
    )
    assert all(float(m["approx_kl"]) > 1e-9 for m in metrics)


def test_early_stopping_decides_alike_on_1_and_2_learner_devices():
    # Starting on-policy the KL grows epoch by epoch; this target stops after the third of
    # four epochs. The KL that decides is the global minibatch's (an all-reduce), so the
    # learner layout changes it only by float reduction order, far from the target.
    agent = make_agent(update_epochs=4, target_kl=1e-5)
    rollout = on_policy_rollout(agent)
    (one_device, one_device_metrics), _ = run_update(agent, 1, rollout)
    # Two devices, compiled once to run it and to read its collectives, as
    # assert_update_moves_no_rollout_data reads them.
    mesh = mesh_of(2)
    replicated = NamedSharding(mesh, PartitionSpec())
    state = jax.jit(agent.init, out_shardings=replicated)(jax.random.key(0))
    rollout_sharding = jax.tree.map(
        lambda spec: NamedSharding(mesh, spec), rollout_partition_specs(rollout)
    )
    rollout = jax.device_put(rollout, rollout_sharding)
    in_shardings = (jax.tree.map(lambda _: replicated, state), rollout_sharding)
    compiled = (
        jax.jit(agent.update, in_shardings=in_shardings, out_shardings=replicated)
        .lower(state, rollout)
        .compile()
    )
    two_devices, two_devices_metrics = compiled(state, rollout)
    assert float(one_device_metrics["epochs_run"]) == float(two_devices_metrics["epochs_run"]) == 3
    # Logged as CleanRL logs it: the KL of the minibatch that stopped the epochs, over the
    # target (the mean over every minibatch that ran, earlier epochs' included, is below).
    for metrics in (one_device_metrics, two_devices_metrics):
        assert float(metrics["approx_kl"]) > 1e-5
    _assert_same_params(jax.device_get(one_device.params), jax.device_get(two_devices.params))
    # The decision's KL travels in the gradients' all-reduce; no rollout data moves.
    hlo = compiled.as_text()
    assert "all-reduce" in hlo
    for collective in ("all-to-all", "all-gather", "collective-permute"):
        assert collective not in hlo


def test_the_clip_coefficient_anneals_like_the_learning_rate():
    rollout = random_rollout()
    annealed, metrics = _updates(make_agent(anneal_clip=True), rollout, num_updates=10)
    # baselines ppo2: cliprange * frac, frac = 1 - (update - 1) / nupdates (10 updates).
    np.testing.assert_allclose(
        [m["clip_coef"] for m in metrics], [0.1 * (1 - k / 10) for k in range(10)], rtol=1e-6
    )
    assert metrics[-1]["clip_coef"] == pytest.approx(0.01)  # The last update's: 1/10 of it.
    # The first update clips at the full coefficient; the second at 0.09, not 0.1.
    plain, _ = _plain_updates()
    _assert_same_params(annealed[0].params, plain[0].params)
    assert _differ(annealed[1].params, plain[1].params)


@pytest.mark.parametrize(
    "agent, message",
    [
        ({"target_kl": -0.01}, "agent.target_kl must be None or a number > 0, got -0.01"),
        ({"target_kl": 0.0}, "agent.target_kl must be None or a number > 0, got 0.0"),
        ({"anneal_clip": 1}, "agent.anneal_clip must be a bool (True or False), got 1"),
    ],
)
def test_bad_target_kl_and_anneal_clip_name_the_field(agent, message):
    # Built from a dict, as from a stored config.json: no field types to convert the values.
    stored = small_update_config(ppo, T, B).to_dict()
    stored["agent"].update(agent)
    config = ml_collections.ConfigDict(stored)
    for check in (
        lambda: defaults.check_builtin_ranges(config.agent),  # sebulba.main, before JAX.
        lambda: ppo.make(config, CARTPOLE, derive_sizes(config)),
    ):
        with pytest.raises(ConfigError) as raised:
            check()
        assert str(raised.value) == message


def test_a_resume_accepts_both_details_unchanged_and_refuses_a_change():
    requested = resume_config.flatten(small_update_config(ppo, T, B).to_dict())
    defaults_now = dict(requested)
    # A run from before the keys existed ran with them off: resuming it is accepted.
    new_keys = ("agent.target_kl", "agent.anneal_clip")
    older = {key: value for key, value in requested.items() if key not in new_keys}
    assert resume_config.differences(older, requested, defaults_now) == []
    changed = dict(requested, **{"agent.target_kl": 0.02})
    assert resume_config.differences(requested, changed, defaults_now) == [
        "agent.target_kl (stored None, requested 0.02)"
    ]


# Decoupled PPO and V-trace advantages (agent.proximal_policy, agent.advantages) ---------


def _surrogate_loss(logprob, behaviour, proximal, advantages, weight, clip_coef=0.2, cap=100.0):
    return ppo.decoupled_pg_loss(
        logprob, behaviour, proximal, advantages, weight, clip_coef, jnp.log(cap)
    )


def test_the_decoupled_objective_is_ppos_where_the_proximal_policy_is_the_behaviour():
    rng = np.random.default_rng(3)
    logprob = jnp.log(rng.uniform(0.05, 0.95, 64)).astype(jnp.float32)
    behaviour = jnp.log(rng.uniform(0.05, 0.95, 64)).astype(jnp.float32)
    advantages = jnp.asarray(rng.normal(size=64), jnp.float32)
    weight = jnp.asarray(rng.random(64) > 0.2, jnp.float32)

    def ppo_loss(logprob):  # As PPO's loss computes it, through rlax.
        scale = weight.size / jnp.sum(weight)
        ratio = jnp.exp(logprob - behaviour)
        return scale * ppo.rlax.clipped_surrogate_pg_loss(ratio, advantages * weight, 0.2)

    def decoupled(logprob):
        return _surrogate_loss(logprob, behaviour, behaviour, advantages, weight)

    np.testing.assert_allclose(decoupled(logprob), ppo_loss(logprob), rtol=1e-5)
    np.testing.assert_allclose(
        jax.grad(decoupled)(logprob), jax.grad(ppo_loss)(logprob), rtol=1e-5, atol=1e-7
    )


@pytest.mark.parametrize(
    "pi, proximal, behaviour, advantage, loss",
    [
        # r = pi / prox = 1.25 clips to 1.2; weighted by prox / mu = 2: min(2.5, 2.4).
        (0.5, 0.4, 0.2, 1.0, -2.4),
        # A negative advantage keeps the smaller of -2.5 and -2.4: the unclipped term.
        (0.5, 0.4, 0.2, -1.0, 2.5),
        # pi / mu = 900 is capped at 100 (agent.importance_ratio_max), r = 1 unclipped.
        (0.9, 0.9, 0.001, 1.0, -100.0),
    ],
)
def test_the_decoupled_objective_clips_around_the_proximal_policy_and_caps_pi_over_mu(
    pi, proximal, behaviour, advantage, loss
):
    logs = [jnp.log(jnp.asarray([p], jnp.float32)) for p in (pi, behaviour, proximal)]
    value = _surrogate_loss(*logs, jnp.asarray([advantage]), jnp.ones(1))
    np.testing.assert_allclose(value, loss, rtol=1e-5)


def _on_policy_rollout(agent, seed=0):
    """A rollout whose actions and log-probabilities are the initial policy's own."""
    rollout = random_rollout(seed)
    params = agent.policy_params(agent.init(jax.random.key(0)))
    keys = jax.random.split(jax.random.key(seed), T + 1)
    outputs = [
        agent.recurrent_act(params, (), rollout.obs[t], jax.random.split(keys[t], B))
        for t in range(T + 1)
    ]
    actions = np.stack([np.asarray(o[1]) for o in outputs])
    logprob = np.stack([np.asarray(o[2]["logprob"]) for o in outputs])
    value = np.stack([np.asarray(o[2]["value"]) for o in outputs])
    return rollout.replace(actions=actions[:T], policy_outputs={"logprob": logprob, "value": value})


def test_decoupled_ppo_on_its_own_data_updates_as_ppo():
    # On-policy (lag 0) the learner's policy at the update's start is the behaviour: the
    # decoupled objective's weights are 1 and its clipping PPO's.
    agent = make_agent()
    rollout = _on_policy_rollout(agent)
    _assert_same_params(
        _params_after_update(agent, rollout),
        _params_after_update(make_agent(proximal_policy="learner"), rollout),
    )
    # Off-policy data (random log-probabilities) are weighted: the updates differ.
    stale = random_rollout()
    assert _differ(
        _params_after_update(agent, stale),
        _params_after_update(make_agent(proximal_policy="learner"), stale),
    )


def test_vtrace_advantages_differ_from_gae_and_agree_across_learner_layouts():
    rollout = random_rollout()
    vtrace = make_agent(advantages="vtrace", proximal_policy="learner")
    assert _differ(
        _params_after_update(make_agent(), rollout), _params_after_update(vtrace, rollout)
    )
    # The learner's forward pass over the whole rollout is global: layouts agree (a
    # per-device pass already differs on 2 devices).
    assert_update_agrees_across_layouts(vtrace, rollout, device_counts=(1, 2))


@pytest.mark.parametrize(
    "agent, message",
    [
        (
            {"proximal_policy": "ewma"},
            "agent.proximal_policy 'ewma' must be one of behaviour, learner",
        ),
        ({"advantages": "retrace"}, "agent.advantages 'retrace' must be one of gae, vtrace"),
        ({"importance_ratio_max": 0.5}, "agent.importance_ratio_max must be a number >= 1"),
    ],
)
def test_bad_decoupling_values_name_the_field(agent, message):
    with pytest.raises(ConfigError) as raised:
        make_agent(**agent)
    assert str(raised.value).startswith(message)


def test_ppo_at_a_lag_beyond_one_is_told_of_the_decoupled_objective(caplog):
    def make(proximal):
        config = small_update_config(ppo, T, B, proximal_policy=proximal)
        config.pipeline.policy_lag = 2
        ppo.make(config, CARTPOLE, derive_sizes(config))

    with caplog.at_level("WARNING"):
        make("behaviour")
    assert "agent.proximal_policy='learner'" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        make("learner")
    assert "proximal_policy" not in caplog.text
