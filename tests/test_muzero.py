"""MuZero: its value targets on hand-checked windows, the support, each env's search on its
own key, Reanalyse's windows, one-line refusals of bad settings, the search priced by
sebulba.check, and its runs in both architectures: resumed to the bit, alike on one and
two learner devices, resumed on another layout, the same checksum under a slow learner,
and the search's throughput in the metrics; the MinAtar and Atari smoke configs end to end."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec

from sebulba import train
from sebulba.agents import muzero, replay
from sebulba.agents.api import ArraySpec, Box, EnvSpec
from sebulba.config.sizes import derive_sizes
from sebulba.errors import ConfigError
from tests.helpers import (
    CARTPOLE,
    agent_config,
    assert_an_interrupted_run_resumes_exactly,
    load_config,
    read_metrics,
    read_summary,
)

GAMMA = 0.5


def _targets(rewards, terminations, truncations, valid, values, k_steps, n):
    column = [np.asarray(x)[:, None] for x in (rewards, terminations, truncations, valid, values)]
    value, alive, reward_mask = muzero.window_targets(*column, k_steps, n, GAMMA)
    return np.asarray(value)[:, 0], np.asarray(alive)[:, 0], np.asarray(reward_mask)[:, 0]


def test_value_targets_bootstrap_from_the_search_value_n_steps_on():
    # K = 1, n = 2: positions 0 .. 3, no episode end.
    value, alive, _ = _targets(
        rewards=[1.0, 2.0, 4.0, 8.0],
        terminations=[False] * 4,
        truncations=[False] * 4,
        valid=[True] * 4,
        values=[10.0, 20.0, 40.0, 80.0],
        k_steps=1,
        n=2,
    )
    np.testing.assert_allclose(value, [1 + 0.5 * 2 + 0.25 * 40, 2 + 0.5 * 4 + 0.25 * 80])
    np.testing.assert_allclose(alive, [1.0, 1.0])


def test_value_targets_stop_at_a_termination_and_bootstrap_a_truncation():
    # Step 0 terminates its episode: q = 0 earns its reward and nothing after it; q = 1 is
    # envpool's reset step (invalid) and q = 2 is past the sample's episode.
    value, alive, reward_mask = _targets(
        rewards=[1.0, 0.0, 4.0, 8.0, 16.0],
        terminations=[True, False, False, False, False],
        truncations=[False] * 5,
        valid=[True, False, True, True, True],
        values=[10.0, 20.0, 40.0, 80.0, 160.0],
        k_steps=2,
        n=2,
    )
    assert value[0] == 1.0
    np.testing.assert_allclose(alive, [1.0, 0.0, 0.0])
    np.testing.assert_allclose(reward_mask, [1.0, 0.0])
    # A time-limit truncation at step 0 bootstraps from the real final observation's
    # search value (position 1), and the state after it is not the sample's episode.
    value, alive, _ = _targets(
        rewards=[1.0, 0.0, 4.0, 8.0, 16.0],
        terminations=[False] * 5,
        truncations=[True, False, False, False, False],
        valid=[True, False, True, True, True],
        values=[10.0, 20.0, 40.0, 80.0, 160.0],
        k_steps=2,
        n=2,
    )
    assert value[0] == pytest.approx(1.0 + 0.5 * 20.0)
    np.testing.assert_allclose(alive, [1.0, 0.0, 0.0])


def test_the_support_holds_values_up_to_its_bound():
    pair = muzero.support_pair(10)
    values = jnp.asarray([-50.0, -1.5, 0.0, 0.3, 7.0, 99.0])
    back = pair.apply_inv(pair.apply(values))
    np.testing.assert_allclose(back, values, rtol=1e-3, atol=1e-3)
    assert 110 < muzero.largest_value(10) < 130  # h^-1(10), about 120.


def _agent(**agent):
    defaults = dict(
        buffer_size=8 * 10 * 4,
        batch_size=16,
        learning_starts=0,
        num_simulations=4,
        max_num_considered_actions=2,
    )
    overrides = {f"agent__{key}": value for key, value in {**defaults, **agent}.items()}
    config = agent_config(muzero, **overrides)
    return muzero.make(config, CARTPOLE, derive_sizes(config))


@pytest.mark.parametrize("search", muzero.SEARCHES)
def test_each_env_searches_with_its_own_key(search):
    # An env's action and search results depend on its observation and key alone, not on
    # the other envs of its batch: the rollout does not depend on the device layout.
    agent = _agent(search=search)
    params = agent.policy_params(agent.init(jax.random.key(0)))
    obs = jax.random.normal(jax.random.key(1), (4, 4))
    keys = jax.random.split(jax.random.key(2), 4)
    act = jax.jit(agent.act)
    actions, outputs = act(params, obs, keys)
    halves = [act(params, obs[i : i + 2], keys[i : i + 2]) for i in (0, 2)]
    np.testing.assert_array_equal(actions, np.concatenate([h[0] for h in halves]))
    for name in ("search_policy", "search_value"):
        together = np.concatenate([h[1][name] for h in halves])
        np.testing.assert_allclose(outputs[name], together, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.sum(outputs["search_policy"], axis=-1), 1.0, rtol=1e-5)
    greedy = jax.jit(agent.act_greedy)(params, obs)
    assert greedy.shape == (4,) and greedy.dtype == jnp.int32


@pytest.mark.parametrize(
    "agent, field",
    [
        ({"num_simulations": 0}, "agent.num_simulations"),
        ({"unroll_steps": 0}, "agent.unroll_steps"),
        ({"td_steps": 0}, "agent.td_steps"),
        ({"support_size": 0}, "agent.support_size"),
        ({"max_depth": 0}, "agent.max_depth"),
        ({"gumbel_scale": -1.0}, "agent.gumbel_scale"),
        ({"search": "alphabeta"}, "agent.search"),
        ({"value_bootstrap": "reanalyse"}, "agent.value_bootstrap"),
        ({"reanalyse_fraction": 1.5}, "agent.reanalyse_fraction"),
        ({"priority_exponent": -1.0}, "agent.priority_exponent"),
        ({"priority_importance": 2.0}, "agent.priority_importance"),
        ({"network": "multi_input"}, "agent.network"),
        ({"buffer_size": 8 * 10}, "agent.buffer_size"),
    ],
)
def test_bad_settings_are_refused_in_one_line(agent, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")) as error:
        _agent(**agent)
    assert "\n" not in str(error.value)


def test_continuous_actions_are_refused():
    pendulum = EnvSpec("Pendulum-v1", ArraySpec((3,), "float32"), Box((1,), -2.0, 2.0))
    config = agent_config(muzero)
    with pytest.raises(ConfigError, match="Discrete"):
        muzero.make(config, pendulum, derive_sizes(config))


def _smoke(**mesh):
    """configs/muzero_cartpole.py:smoke: 6 updates of 8 envs x 10 steps, learning from
    update 2 on."""
    config = load_config("muzero_cartpole", "smoke")
    config.log.tensorboard = False
    for key, value in mesh.items():
        config.mesh[key] = value
    return config


def _anakin_smoke():
    config = _smoke()
    config.env.id = "gymnax:CartPole-v1"
    return config


def _assert_search_throughput(workdir, acting_devices):
    # Simulations per second per acting device: each env step runs one search.
    simulations = _smoke().agent.num_simulations / acting_devices
    for line in read_metrics(workdir):
        assert line["search_simulations_per_s"] == pytest.approx(line["sps"] * simulations)
    summary = read_summary(workdir)
    assert summary["search_simulations_per_s"] == pytest.approx(summary["sps"] * simulations)


def test_an_interrupted_anakin_run_resumes_with_the_same_checksum(tmp_path):
    # The search runs inside the Anakin program; the replay ring and the search results
    # beside it resume to the bit.
    workdir, state = assert_an_interrupted_run_resumes_exactly(_anakin_smoke, tmp_path)
    assert int(state.count) == 6 * 10
    assert float(read_metrics(workdir)[-1]["learning"]) == 1.0
    _assert_search_throughput(workdir, acting_devices=len(_anakin_smoke().mesh.learner_device_ids))


def _prioritised_smoke(delay_s=0.0, **mesh):
    """The smoke run cut to 3 updates, learning in the last two, with prioritised replay
    and Reanalyse (the same windows reanalysed on every layout)."""
    config = _smoke(**mesh)
    config.total_timesteps = 8 * 10 * 3
    config.agent.priority_exponent = 1.0
    config.agent.reanalyse_fraction = 0.5
    config.debug.learner_delay_s = delay_s
    return config


@pytest.fixture(scope="module")
def one_learner_device_run(tmp_path_factory):
    """`_prioritised_smoke` on learner device 1, trained once for the tests comparing
    another run with it: its workdir and its final state."""
    workdir = str(tmp_path_factory.mktemp("one_learner_device"))
    state = train.train(_prioritised_smoke(learner_device_ids=(1,)), workdir)
    return workdir, state


def test_a_sebulba_run_on_one_and_two_learner_devices_agrees(tmp_path, one_learner_device_run):
    # envpool actors: the same global envs, so the same data; the ring and the search
    # results split along envs on two learner devices, and the priorities of prioritised
    # replay beside them: each column draws its windows from its own priorities. Three
    # updates, learning in the last two: every rollout is searched with parameters that
    # have not learnt yet. Later ones would be searched with parameters that differ in
    # their last bits, and a search's near-tie could then take another action.
    two = str(tmp_path / "two")
    runs = [
        one_learner_device_run,
        (two, train.train(_prioritised_smoke(learner_device_ids=(1, 2)), two)),
    ]
    finals = []
    for workdir, state in runs:
        assert float(read_metrics(workdir)[-1]["learning"]) == 1.0
        _assert_search_throughput(workdir, acting_devices=1)
        assert float(jnp.min(state.priorities)) > 0 and float(jnp.max(state.priorities)) != 1
        for leaf in jax.tree.leaves((state.buffer, state.search, state.priorities)):
            assert leaf.sharding.spec == PartitionSpec(None, "batch")
        finals.append(
            jax.device_get(((state.params, state.buffer), (state.search, state.priorities)))
        )
    for a, b in zip(*(jax.tree.leaves(final[0]) for final in finals), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # A search's root value goes through the value support's square roots and the
    # simulations' backups: the parameters' last-bit differences reach it as ~5e-5.
    for a, b in zip(*(jax.tree.leaves(final[1]) for final in finals), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


# configs/muzero_minatar.py:smoke and configs/muzero_atari.py:smoke are trained, and their
# searches and learning checked, by their documented commands (tests/test_readme.py,
# MUZERO_SMOKE_CONFIGS).


def test_sebulba_check_prices_every_simulation_of_the_search():
    # The simulations are a loop inside the act step: `sebulba.check` prices the actor's
    # step with its body once per simulation, so 4 times the simulations cost about 4 times
    # the FLOPs (the representation runs once per search, whatever their number). Each
    # simulation's descent to a leaf is a loop whose trip count depends on the tree; it
    # holds no network call and is priced once (the report says so).
    from sebulba.preflight import hlo_cost

    obs = jnp.zeros((8, 4))
    keys = jax.random.split(jax.random.key(0), 8)
    flops = {}
    for simulations in (4, 16):
        agent = _agent(num_simulations=simulations)
        params = agent.policy_params(agent.init(jax.random.key(0)))
        compiled = jax.jit(agent.act).lower(params, obs, keys).compile()
        cost = hlo_cost.program_cost(compiled.as_text(), 1)
        flops[simulations] = cost.flops
    assert 3.0 < flops[16] / flops[4] < 4.0, flops


def test_same_seed_same_checksum_under_delays(tmp_path, one_learner_device_run):
    # The one-step lag holds whatever the timing: a slow learner changes nothing. The
    # prompt run is the one-learner-device run (3 updates: the lag reaches its steady 2
    # from update 2 on).
    prompt, _ = one_learner_device_run
    slow = str(tmp_path / "slow")
    train.train(_prioritised_smoke(delay_s=0.05, learner_device_ids=(1,)), slow)
    for workdir in (prompt, slow):
        lines = read_metrics(workdir)
        lags = [line["learner_policy_version"] - line["actor_policy_version"] for line in lines]
        assert lags == [1] + [2] * (len(lines) - 1)
    assert read_summary(prompt)["params_checksum"] == read_summary(slow)["params_checksum"]


def _threads_smoke(threads, envs_per_thread, learners):
    """The smoke run over 16 global envs: 3 updates of 16 x 10 steps, a checkpoint after
    update 2, a ring that keeps every step, learning from update 2 on (so every rollout,
    resumed or not, is searched with the parameters of update 1 at the latest: the
    layouts' last-bit differences never reach an action)."""
    config = _smoke(learner_device_ids=learners)
    config.pipeline.num_actor_threads = threads
    config.env.num_envs = envs_per_thread
    config.total_timesteps = 16 * 10 * 3
    config.agent.buffer_size = 16 * 10 * 4
    config.agent.learning_starts = 16 * 10 * 2
    config.ckpt.every_updates = 2
    config.agent.reanalyse_fraction = 0.5  # The same windows reanalysed on every layout.
    return config


def test_a_resume_on_another_layout_keeps_each_envs_steps_and_searches(tmp_path):
    # 2 threads x 8 envs on 2 learner devices hold env ids [0-3, 8-11, 4-7, 12-15] along
    # the ring's env axis, 1 thread x 16 on 1 device [0-15]: the ring and the search
    # results beside it move together into the new order, so both resumes train alike.
    two_threads = functools.partial(_threads_smoke, 2, 8, (1, 2))
    one_thread = functools.partial(_threads_smoke, 1, 16, (1,))
    train.train(two_threads(), str(tmp_path / "saved"))
    results = {}
    for name, make_config in (("same", two_threads), ("other", one_thread)):
        config = make_config()
        config.ckpt.resume_from = str(tmp_path / "saved" / "checkpoints" / "2")
        state = train.train(config, str(tmp_path / name))
        assert read_metrics(str(tmp_path / name))[0]["update"] == 3
        order = np.argsort(derive_sizes(config).env_order())
        in_id_order = jax.tree.map(
            lambda x, order=order: np.asarray(x)[:, order],
            jax.device_get((state.buffer, state.search)),
        )
        results[name] = jax.device_get(state.params), in_id_order
    (same_params, same_steps), (other_params, other_steps) = results.values()
    for a, b in zip(jax.tree.leaves(same_steps), jax.tree.leaves(other_steps), strict=True):
        # Stored observations and actions are the envs' own; search outputs are floats
        # of networks that differ in their last bits between the layouts.
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    for a, b in zip(jax.tree.leaves(same_params), jax.tree.leaves(other_params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_reanalyse_replaces_the_first_windows_of_every_env_column():
    # Policy targets [K + 1 = 2, B * S = 3 * 4, A = 2], env-major; observations carry
    # (step, env, window) so the fresh search's inputs can be read back.
    steps, envs, per_env, reanalysed = 2, 3, 4, 1
    stored = jnp.zeros((steps, envs * per_env, 2))
    index = np.stack(
        np.meshgrid(np.arange(steps), np.arange(envs), np.arange(per_env), indexing="ij"), -1
    ).reshape(steps, envs * per_env, 3)
    searched = []

    def fresh_policy(obs):
        searched.append(np.asarray(obs))
        return jnp.ones((obs.shape[0], 2)) * 0.5

    policy = np.asarray(
        muzero.reanalyse(stored, jnp.asarray(index), fresh_policy, per_env, reanalysed)
    )
    # The fresh search saw exactly window 0 of each env, at both steps.
    assert sorted(map(tuple, searched[0])) == [(k, b, 0) for k in range(2) for b in range(3)]
    replaced = policy.reshape(steps, envs, per_env, 2)
    np.testing.assert_array_equal(replaced[:, :, :reanalysed], 0.5)
    np.testing.assert_array_equal(replaced[:, :, reanalysed:], 0.0)
    assert muzero.reanalyse(stored, index, fresh_policy, per_env, 0) is stored
    assert [muzero.reanalysed_count(f, 32) for f in (0.0, 0.25, 1.0)] == [0, 8, 32]


def test_prioritised_starts_follow_the_priorities_within_the_startable_positions():
    # A ring of 8 slots per column holding positions 6 .. 13 (count 14); windows need 3
    # steps after their start, so starts 6 .. 10 only. Column 0 weighs slot 9 % 8 = 1
    # (position 9) 1,000 times the others; column 1 is uniform.
    capacity, count, lookahead = 8, 14, 3
    priorities = np.ones((capacity, 2), np.float32)
    priorities[9 % capacity, 0] = 1000.0
    env_ids = jnp.array([5, 9])
    starts, probabilities, startable = replay.sample_prioritised_starts(
        jnp.asarray(priorities), jnp.int32(count), jax.random.key(0), env_ids, 400, lookahead, 1.0
    )
    starts, probabilities = np.asarray(starts), np.asarray(probabilities)
    assert int(startable) == 5
    assert starts.min() >= 6 and starts.max() <= 10
    assert np.mean(starts[:, 0] == 9) > 0.98
    assert set(starts[:, 1]) == {6, 7, 8, 9, 10}
    np.testing.assert_allclose(probabilities[:, 1], 0.2, rtol=1e-6)
    np.testing.assert_allclose(probabilities[starts[:, 0] == 9, 0], 1000 / 1004, rtol=1e-6)
    # Each column draws with its own env id's key: a column alone draws the same.
    alone, _, _ = replay.sample_prioritised_starts(
        jnp.asarray(priorities[:, 1:]),
        jnp.int32(count),
        jax.random.key(0),
        env_ids[1:],
        400,
        lookahead,
        1.0,
    )
    np.testing.assert_array_equal(np.asarray(alone)[:, 0], starts[:, 1])
    # Priorities are written back at the drawn positions' slots, column by column.
    written = replay.write_at(
        jnp.zeros((capacity, 2)), jnp.array([[9, 6]]), jnp.array([[3.0, 4.0]])
    )
    expected = np.zeros((capacity, 2))
    expected[1, 0], expected[6, 1] = 3.0, 4.0
    np.testing.assert_array_equal(np.asarray(written), expected)
