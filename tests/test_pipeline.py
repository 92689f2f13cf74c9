"""The pipeline's guarantees: lag schedule, reproducibility, layouts, failure, steady state."""

import dataclasses
import threading
import time
from types import SimpleNamespace

import jax
import numpy as np
import pytest

from sebulba import run_setup, train
from sebulba.agents import impala, ppo
from sebulba.lag_schedule import advance_lagged, lagged_versions, required_policy_version
from tests import minimal_agent, probe_agent
from tests.helpers import (
    LSTM_RUN,
    agent_config,
    assert_rollouts_came_from_the_lagged_version,
    make_pipeline,
    normalized_continuous_overrides,
    popart_overrides,
    read_metrics,
    read_summary,
)

# The reproducibility tests run the minimal agent; PPO with Box actions and both
# normalisations on, whose statistics are learner state that must keep the guarantees;
# PPO with an LSTM, whose carries cross the actor/learner split; the minimal agent
# trained jointly on three tasks with CartPole's spaces (phys2d/ is envpool's second
# registration of CartPole), whose blocks of 8 envs, [0, 3), [3, 6) and [6, 8), make
# each of 2 actor threads span two tasks; and PPO and IMPALA with PopArt on two tasks,
# whose per-task statistics are learner state too; and the minimal agent with a lag of 3
# (`pipeline.policy_lag`), whose actors run up to three rollouts ahead of the learner.
AGENT_CASES = {
    "minimal": (minimal_agent, {}),
    "lag-3": (minimal_agent, {"pipeline__policy_lag": 3}),
    "ppo-normalized": (ppo, normalized_continuous_overrides()),
    # 6 updates, as in the other cases (LSTM_RUN keeps `agent_config`'s total_timesteps,
    # 6 rollouts of PPO's default 128 steps: 48 of its 16-step rollouts).
    "lstm": (ppo, {**LSTM_RUN, "total_timesteps": 8 * 16 * 6}),
    "multitask": (
        minimal_agent,
        {"env__ids": ("CartPole-v1", "CartPole-v0", "phys2d/CartPole-v1")},
    ),
    "ppo-popart": (ppo, popart_overrides()),
    "impala-popart": (impala, popart_overrides()),
}


def test_required_policy_version_table():
    assert [required_policy_version(k, 1) for k in range(1, 6)] == [1, 1, 2, 3, 4]
    assert [required_policy_version(k, 0) for k in range(1, 6)] == [1, 2, 3, 4, 5]
    assert [required_policy_version(k, 3) for k in range(1, 7)] == [1, 1, 1, 1, 2, 3]


def test_lagged_versions_are_the_next_rollouts_versions_oldest_first():
    assert lagged_versions(1, 0) == []
    assert lagged_versions(5, 1) == [4]
    assert lagged_versions(2, 3) == [1, 1, 1]
    assert lagged_versions(6, 3) == [3, 4, 5]
    # After update u the newest joins: the window of u + 1.
    assert list(advance_lagged((3, 4, 5), 6)) == lagged_versions(7, 3)
    assert advance_lagged((), 6) == ()


@pytest.mark.parametrize("policy_lag", [0, 1, 3])
@pytest.mark.parametrize(
    "delays", [(0.0, 0.0), (0.05, 0.0), (0.0, 0.05)], ids=["no-delay", "slow-learner", "slow-actor"]
)
def test_lag_schedule_holds_in_the_data(tmp_path, policy_lag, delays):
    learner_delay, actor_delay = delays
    config = agent_config(
        probe_agent,
        pipeline__policy_lag=policy_lag,
        pipeline__num_actor_threads=2,
        env__num_envs=4,
        mesh__learner_device_ids=[1, 2],
        debug__learner_delay_s=learner_delay,
        debug__actor_delay_s=actor_delay,
    )
    train.train(config, str(tmp_path))
    lines = read_metrics(str(tmp_path))
    assert [line["update"] for line in lines] == list(range(1, 7))
    # Every sample of rollout k, from both threads, came from version max(1, k - lag).
    assert_rollouts_came_from_the_lagged_version(lines, policy_lag)
    for line in lines:
        if line["update"] > policy_lag:  # Before that, version 1 collects.
            assert line["learner_policy_version"] - line["actor_policy_version"] == policy_lag + 1


def _checksum_and_params(tmp_path, name, case="minimal", **overrides):
    """A run's checksum and its final learner state's leaves (parameters and statistics)."""
    agent_module, case_overrides = AGENT_CASES[case]
    config = agent_config(agent_module, **case_overrides, **overrides)
    state = train.train(config, str(tmp_path / name))
    learned = state.params if case == "minimal" else state
    return read_summary(str(tmp_path / name))["params_checksum"], jax.device_get(learned)


@pytest.fixture(scope="module")
def one_learner_run(tmp_path_factory):
    """Final learner state and summary.json of each case on the default layout (actor and
    learner sharing device 0, as on a laptop), computed once per case."""
    cache = {}

    def run(case):
        if case not in cache:
            tmp_path = tmp_path_factory.mktemp(f"one-{case}")
            _, params = _checksum_and_params(tmp_path, "one", case)
            cache[case] = params, read_summary(str(tmp_path / "one"))
        return cache[case]

    return run


@pytest.mark.parametrize("case", list(AGENT_CASES))
def test_same_seed_same_checksum_under_injected_delays(tmp_path, one_learner_run, case):
    # Each delayed run is also a rerun of the module's one-learner run with the same seed,
    # only its timing differs. The minimal agent runs a slow learner and a slow actor apart;
    # every other agent, whose runs cost several times more, runs once with both: a learner
    # 30 ms slower per update and actors 0 to 60 ms slower per rollout (a seeded draw), so
    # that the actors wait for the learner in some updates and the learner for the actors
    # in others.
    _, reference_summary = one_learner_run(case)
    reference = reference_summary["params_checksum"]
    if case == "minimal":
        delays = {
            "c": {"debug__learner_delay_s": 0.03},
            "d": {"debug__actor_delay_s": 0.03},
        }
    else:
        delays = {"c": {"debug__learner_delay_s": 0.03, "debug__actor_delay_jitter_s": 0.06}}
    for name, delay in delays.items():
        checksum, _ = _checksum_and_params(tmp_path, name, case, **delay)
        assert checksum == reference, name
        # The same episodes, attributed to the same tasks.
        assert read_summary(str(tmp_path / name))["tasks"] == reference_summary["tasks"], name
    if case == "minimal":  # The checksum tells seeds apart (one case shows it; it is the
        # same checksum for every agent, and each run here costs a training run).
        other_seed, _ = _checksum_and_params(tmp_path, "e", case, seed=7)
        assert other_seed != reference


def test_jittered_actor_delays_change_only_the_timing(tmp_path, one_learner_run):
    # An actor whose rollouts take 0 to 60 ms longer, a seeded draw per thread and rollout
    # (`debug.actor_delay_jitter_s`), running up to three rollouts ahead: the same run.
    _, reference_summary = one_learner_run("lag-3")
    jittered, _ = _checksum_and_params(tmp_path, "j", "lag-3", debug__actor_delay_jitter_s=0.06)
    assert jittered == reference_summary["params_checksum"]
    setup = train.prepare(agent_config(minimal_agent))
    pipeline = make_pipeline(setup, actor_delay_jitter_s=0.06)
    delays = [pipeline.actor_delay(thread, update) for thread in (0, 1) for update in (1, 2)]
    assert all(0.0 <= d < 0.06 for d in delays) and len(set(delays)) == 4
    assert delays == [pipeline.actor_delay(t, u) for t in (0, 1) for u in (1, 2)]


LAYOUTS = {
    "2-learners": {"mesh__learner_device_ids": [1, 2]},
    "4-learners": {"mesh__learner_device_ids": [1, 2, 3, 4]},
    "2-threads": {"pipeline__num_actor_threads": 2, "env__num_envs": 4},
    "2-actor-devices": {
        "pipeline__num_actor_threads": 2,
        "env__num_envs": 4,
        "mesh__actor_device_ids": [0, 5],
    },
    # Both splits in one run, for the agents whose runs cost the most (the minimal agent
    # runs each split alone, so a failure here that it does not share is the agent's).
    "2-learners-2-threads": {
        "mesh__learner_device_ids": [1, 2],
        "pipeline__num_actor_threads": 2,
        "env__num_envs": 4,
    },
}


@pytest.mark.parametrize(
    "case, layout",
    [("minimal", name) for name in LAYOUTS if name != "2-learners-2-threads"]
    # The LSTM's carries cross threads and its sequences are split over learner devices.
    + [("lstm", "2-learners-2-threads")]
    + [("lag-3", "2-threads")]
    + [("multitask", "2-learners"), ("multitask", "2-threads")]
    + [("ppo-popart", "2-learners"), ("impala-popart", "2-learners")],
)
def test_layouts_agree_to_float_tolerance(tmp_path, one_learner_run, case, layout):
    reference, reference_summary = one_learner_run(case)
    _, other = _checksum_and_params(tmp_path, "other", case, **LAYOUTS[layout])
    for a, b in zip(jax.tree.leaves(reference), jax.tree.leaves(other), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    # The same episodes per task, whichever thread or device handled their envs.
    other_tasks = read_summary(str(tmp_path / "other"))["tasks"]
    assert other_tasks.keys() == reference_summary["tasks"].keys()
    for task_id, task in reference_summary["tasks"].items():
        assert other_tasks[task_id] == pytest.approx(task, rel=1e-12), task_id


def test_normalization_statistics_agree_across_layouts(tmp_path, one_learner_run):
    # One run on 2 learner devices fed by 2 actor threads: the statistics are summed over
    # both threads' envs and both devices' shards.
    reference, _ = one_learner_run("ppo-normalized")
    layout = LAYOUTS["2-learners-2-threads"]
    _, other = _checksum_and_params(tmp_path, "other", "ppo-normalized", **layout)
    stats = reference.normalization
    np.testing.assert_allclose(stats.observation.count, 8 * 16 * 6, rtol=1e-6)
    assert np.any(np.asarray(stats.reward.returns) != 0)
    for a, b in zip(jax.tree.leaves(reference), jax.tree.leaves(other), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_rollout_is_sharded_over_learner_devices_without_gathering(tmp_path):
    config = agent_config(probe_agent, mesh__learner_device_ids=[3, 1], total_timesteps=8 * 4)
    setup = train.prepare(config)
    state = train.init_learner_state(setup)
    pipeline = make_pipeline(setup, seed=0, policy_lag=1, clip_rewards=False)
    struct = pipeline.rollout_struct(state)
    devices = jax.local_devices()
    assert struct.obs.sharding.spec == jax.sharding.PartitionSpec(None, "batch")
    assert struct.env_ids.sharding.spec == jax.sharding.PartitionSpec("batch")
    assert list(struct.obs.sharding.mesh.devices.flat) == [devices[3], devices[1]]
    seen = {}

    def capture(report, new_state):
        seen["state"] = new_state

    pipeline.run(state, on_update=capture)
    for leaf in jax.tree.leaves(seen["state"]):
        assert leaf.sharding.is_fully_replicated
        assert leaf.sharding.device_set == {devices[3], devices[1]}


class _FailingEnvs:
    """Wraps an env pool and raises on the n-th step, like a crashing simulator."""

    def __init__(self, envs, fail_at_step):
        self._envs, self._fail_at, self._steps = envs, fail_at_step, 0

    def __getattr__(self, name):
        return getattr(self._envs, name)

    def step(self, actions):
        self._steps += 1
        if self._steps == self._fail_at:
            raise ValueError("simulator exploded")
        return self._envs.step(actions)


def _pipeline(config, wrap_envs=None):
    setup = train.prepare(config)
    if wrap_envs is not None:
        wrapped = [wrap_envs(e) for e in setup.envs_per_thread]
        setup = dataclasses.replace(setup, envs_per_thread=wrapped)
    pipeline = make_pipeline(setup, policy_lag=1, clip_rewards=False)
    return pipeline, train.init_learner_state(setup)


def test_actor_exception_ends_the_run_with_that_error():
    config = agent_config(probe_agent, total_timesteps=10**9, pipeline__num_actor_threads=2)
    pipeline, state = _pipeline(config, lambda e: _FailingEnvs(e, fail_at_step=30))
    before = set(threading.enumerate())
    start = time.perf_counter()
    with pytest.raises(ValueError, match="simulator exploded"):
        pipeline.run(state)
    assert time.perf_counter() - start < 10
    time.sleep(0.5)
    assert not [t for t in set(threading.enumerate()) - before if t.name.startswith("sebulba")]


def test_learner_exception_stops_the_actors():
    config = agent_config(probe_agent, total_timesteps=10**9)
    pipeline, state = _pipeline(config)

    def explode(report, new_state):
        if report.update == 3:
            raise RuntimeError("learner exploded")

    start = time.perf_counter()
    with pytest.raises(RuntimeError, match="learner exploded"):
        pipeline.run(state, on_update=explode)
    assert time.perf_counter() - start < 10
    time.sleep(0.5)
    assert not [t for t in threading.enumerate() if t.name.startswith("sebulba-actor")]


def test_steady_state_never_recompiles_and_transfers_are_explicit():
    config = agent_config(
        probe_agent,
        total_timesteps=8 * 4 * 8,
        pipeline__num_actor_threads=2,
        env__num_envs=4,
        mesh__learner_device_ids=[1, 2],
    )
    pipeline, state = _pipeline(config)
    assert pipeline.transfer_guard == "disallow"  # The loop runs under jax.transfer_guard.
    compiles = []
    traces_after_warmup = {}

    def listener(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(threading.current_thread().name)

    def on_update(report, new_state):
        if report.update == 2:
            compiles.clear()
            traces_after_warmup.update(probe_agent.TRACE_COUNTS)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        pipeline.run(state, on_update=on_update)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert compiles == []
    assert probe_agent.TRACE_COUNTS == traces_after_warmup


def test_compiling_on_its_own_thread_hands_back_the_program_or_the_error_it_raised():
    def init(key):
        return {"w": jax.numpy.zeros((3, 2)), "key": key}

    agent = SimpleNamespace(init=init)
    setup = SimpleNamespace(
        agent=agent, learner_state_shapes=run_setup.state_shapes(agent, 4), jax_env=None
    )

    class Compiles:
        def compile_update(self, shapes):
            return jax.tree.map(lambda s: (s.shape, str(s.dtype)), shapes)

    class Fails:
        def compile_update(self, shapes):
            raise MemoryError("the update needs more memory than the device has")

    compiled = train.start_compiling(Compiles(), setup).result(timeout=60)
    assert compiled["w"] == ((3, 2), "float32")
    with pytest.raises(MemoryError, match="needs more memory"):
        train.start_compiling(Fails(), setup).result(timeout=60)
