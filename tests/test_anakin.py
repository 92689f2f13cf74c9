"""Anakin mode (a JAX env, one program per update): its guarantees through `train`.

Reproducibility, layout invariance, bit-identical resume, the lag schedule, every agent
feature, envpool's auto-reset convention for JAX envs, one-line config errors,
checkpoints that refuse the other architecture, and a steady state that never compiles.

The runs share one compilation cache (a module fixture), as command-line runs do: a
rerun or a resumed segment of a run loads the program its first run compiled.
"""

import math
import os
import shutil
import signal
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sebulba import checkpoint, train
from sebulba.anakin.env_api import JaxEnv, reset_envs, step_envs
from sebulba.anakin.runner import update_blocks
from sebulba.environments.spaces import ArraySpec, Discrete, EnvSpec
from sebulba.errors import ConfigError
from tests import minimal_agent, probe_agent
from tests.helpers import (  # noqa: F401 - module_compilation_cache is an autouse fixture.
    LSTM_RUN,
    agent_config,
    assert_rollouts_came_from_the_lagged_version,
    load_config,
    module_compilation_cache,
    process_env,
    read_metrics,
    read_summary,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV_ID = "gymnax:CartPole-v1"
NUM_UPDATES = 6

# Metrics that measure time: the only ones a rerun or a resumed run may change.
TIMING_METRICS = {"sps", "wall_time_s", "rollout_wait_s", "params_wait_s"}
TIMING_METRICS |= {"learner_wait_fraction", "actor_wait_fraction", "host_cpu_fraction"}

# LSTM_RUN without its `env.observation_indices` (see the test of that option below).
LSTM = {key: value for key, value in LSTM_RUN.items() if not key.startswith("env__")}

# The runs whose outputs several tests read: PPO from configs/ppo_cartpole_anakin.py
# (smoke sizes, 6 updates), on-policy, with the one-step lag and a lag of 3, and PPO with
# an LSTM.
CASES = {
    "ppo": {},
    "ppo-lag1": {"pipeline__policy_lag": 1},
    "lstm-lag1": {"pipeline__policy_lag": 1, **LSTM},
    "ppo-lag3": {"pipeline__policy_lag": 3},
}


def _override(config, overrides):
    for dotted, value in overrides.items():
        section, _, field = dotted.rpartition("__")
        target = config[section] if section else config
        target[field] = tuple(value) if isinstance(value, list) else value
    return config


def anakin_config(name="ppo_cartpole_anakin", **overrides):
    """`configs/NAME.py:smoke` on gymnax's CartPole for 6 updates, with overrides; one
    update per program call unless they say otherwise (so a stop can fall after any)."""
    config = load_config(name, "smoke")
    config.env.id = ENV_ID
    config.log.tensorboard = False
    config.pipeline.updates_per_call = 1
    _override(config, overrides)
    config.total_timesteps = config.env.num_envs * config.agent.num_steps * NUM_UPDATES
    return config


def probe_config(**overrides):
    """The probe agent (its parameter is its version) on gymnax's CartPole, 6 updates."""
    return agent_config(probe_agent, env__id=ENV_ID, **overrides)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """`finished_run(case)`: (workdir, final learner state on the host) of an
    uninterrupted run of CASES[case], run once per module."""
    cache = {}

    def run(case):
        if case not in cache:
            workdir = str(tmp_path_factory.mktemp(case) / "run")
            state = train.train(anakin_config(**CASES[case]), workdir)
            cache[case] = workdir, jax.device_get(state)
        return cache[case]

    return run


@pytest.fixture(scope="module")
def probe_run(tmp_path_factory):
    """`probe_run(policy_lag)`: the workdir of a finished probe-agent run."""
    cache = {}

    def run(policy_lag):
        if policy_lag not in cache:
            workdir = str(tmp_path_factory.mktemp(f"probe-lag{policy_lag}") / "run")
            train.train(probe_config(pipeline__policy_lag=policy_lag), workdir)
            cache[policy_lag] = workdir
        return cache[policy_lag]

    return run


def _without_timing(lines):
    return [{k: v for k, v in line.items() if k not in TIMING_METRICS} for line in lines]


def _assert_finite_losses(workdir):
    lines = read_metrics(workdir)
    assert [line["update"] for line in lines] == list(range(1, NUM_UPDATES + 1))
    for line in lines:
        losses = {k: v for k, v in line.items() if "loss" in k}
        assert losses, line
        assert all(math.isfinite(v) for v in losses.values()), line


# Reproducibility ----------------------------------------------------------------------


def test_same_seed_gives_the_same_checksum_and_another_seed_another(finished_run, tmp_path):
    reference, _ = finished_run("ppo")
    train.train(anakin_config(), str(tmp_path / "again"))
    train.train(anakin_config(seed=2), str(tmp_path / "seed2"))
    summary = read_summary(reference)
    assert summary["architecture"] == "anakin"
    again = read_summary(str(tmp_path / "again"))
    assert again["params_checksum"] == summary["params_checksum"]
    assert again["tasks"] == summary["tasks"]  # The same episodes, with the same returns.
    assert _without_timing(read_metrics(str(tmp_path / "again"))) == _without_timing(
        read_metrics(reference)
    )
    assert read_summary(str(tmp_path / "seed2"))["params_checksum"] != summary["params_checksum"]


# Layouts ------------------------------------------------------------------------------


def test_one_and_two_learner_devices_learn_the_same_policy(finished_run, tmp_path):
    reference, one = finished_run("ppo")  # mesh.learner_device_ids=(0,), the default.
    assert "learner_devices=[0]" in read_summary(reference)["layout"]
    workdir = str(tmp_path / "two")
    two = train.train(anakin_config(mesh__learner_device_ids=[0, 1]), workdir)
    devices = set(jax.devices()[:2])
    for leaf in jax.tree.leaves(two):
        assert leaf.sharding.is_fully_replicated and leaf.sharding.device_set == devices
    assert "learner_devices=[0, 1]" in read_summary(workdir)["layout"]
    assert read_summary(workdir)["architecture"] == "anakin"
    for a, b in zip(jax.tree.leaves(one.params), jax.tree.leaves(two.params), strict=True):
        np.testing.assert_allclose(a, jax.device_get(b), rtol=1e-3, atol=1e-6)
    # The same global envs with the same keys: the same episodes.
    assert read_summary(workdir)["episodes"] == read_summary(reference)["episodes"]


def test_the_acting_state_is_split_over_the_learner_devices_in_mesh_order():
    config = probe_config(mesh__learner_device_ids=[3, 1], pipeline__policy_lag=1)
    setup = train.prepare(config)
    # The run's policy lag (1) and reward clipping (off), as a run builds it.
    runner = train.make_anakin_runner(
        config, setup.agent, setup.layout, setup.sizes, setup.jax_env, setup.env_spec
    )
    devices = jax.local_devices()
    runner.acting = runner.initial_acting_state()
    seen = []

    def check_acting_state(report, state):
        del report
        for leaf in jax.tree.leaves(state):
            assert leaf.sharding.is_fully_replicated
        leaves = jax.tree.leaves(runner.acting)
        assert leaves
        for leaf in leaves:
            assert leaf.shape[0] == 8
            assert leaf.sharding.device_set == {devices[3], devices[1]}
            assert {shard.data.shape[0] for shard in leaf.addressable_shards} == {4}
        # Envs 0-3 on the mesh's first device (3), envs 4-7 on its second (1).
        shards = {s.device: np.asarray(s.data) for s in runner.acting.env_ids.addressable_shards}
        np.testing.assert_array_equal(shards[devices[3]], [0, 1, 2, 3])
        np.testing.assert_array_equal(shards[devices[1]], [4, 5, 6, 7])
        seen.append(jax.device_get(runner.acting.envs.obs))

    runner.run(train.init_learner_state(setup), on_update=check_acting_state)
    assert len(seen) == NUM_UPDATES
    assert not np.array_equal(seen[0], seen[1])  # The envs moved on between updates.
    # Checkpoints restore the acting state with the same shardings.
    abstract = runner.abstract_acting_state()
    for spec, leaf in zip(jax.tree.leaves(abstract), jax.tree.leaves(runner.acting), strict=True):
        assert spec.sharding.is_equivalent_to(leaf.sharding, leaf.ndim)


# Resume -------------------------------------------------------------------------------


def _run_segment(config, workdir, interrupt_after=None):
    """Runs `train` (with a SIGINT sent during update `interrupt_after`'s bookkeeping, if
    given); returns the updates this segment ran and its final learner state."""
    updates = []

    def record(report, state):
        del state
        updates.append(report.update)
        if report.update == interrupt_after:
            os.kill(os.getpid(), signal.SIGINT)

    state = train.train(config, workdir, on_update=record)
    return updates, state


@pytest.mark.parametrize(
    "case, interrupts",
    [("ppo", [2]), ("ppo-lag1", [1, 3]), ("lstm-lag1", [2]), ("ppo-lag3", [2, 4])],
    ids=["ppo-lag0", "ppo-lag1-resumed-twice", "lstm-lag1", "ppo-lag3-resumed-twice"],
)
def test_an_interrupted_run_resumes_bit_identically(finished_run, tmp_path, case, interrupts):
    reference, reference_state = finished_run(case)
    config = anakin_config(**CASES[case])
    workdir = str(tmp_path / "run")
    last = 0
    for interrupt_after in interrupts:  # The same command, again and again.
        updates, _ = _run_segment(config, workdir, interrupt_after)
        stopped = checkpoint.list_steps(checkpoint.checkpoints_dir(workdir))[-1]
        assert last < stopped < NUM_UPDATES
        # Each segment continues after the previous one's checkpoint, up to its own.
        assert updates == list(range(last + 1, stopped + 1))
        assert not os.path.exists(os.path.join(workdir, "summary.json"))
        last = stopped
    updates, state = _run_segment(config, workdir)
    assert updates == list(range(last + 1, NUM_UPDATES + 1))
    summary, expected = read_summary(workdir), read_summary(reference)
    assert summary["params_checksum"] == expected["params_checksum"]
    for a, b in zip(jax.tree.leaves(reference_state), jax.tree.leaves(state), strict=True):
        np.testing.assert_array_equal(a, jax.device_get(b))  # Optimiser state too.
    # The envs continued their episodes: the same episodes, losses and versions.
    assert _without_timing(read_metrics(workdir)) == _without_timing(read_metrics(reference))
    assert (summary["episodes"], summary["mean_return"]) == (
        expected["episodes"],
        expected["mean_return"],
    )


# Several updates per program call --------------------------------------------------


def test_update_blocks_end_at_checkpoints_and_at_the_last_update():
    due_every_3 = lambda update: update % 3 == 0  # noqa: E731
    assert list(update_blocks(1, 8, 4, due_every_3)) == [(1, 3), (4, 3), (7, 2)]
    assert list(update_blocks(5, 13, 4)) == [(5, 4), (9, 4), (13, 1)]
    assert list(update_blocks(1, 3, 1, due_every_3)) == [(1, 1), (2, 1), (3, 1)]


# Blocks of up to 4 updates, ended at the checkpoints after updates 3 and 6 (each block's
# loop of 4 iterations then skips its last).
CHECKPOINT_ENDED_BLOCKS = dict(pipeline__updates_per_call=4, ckpt__every_updates=3)
# Blocks of 2 and no checkpoint before the end: a block's reports are made while the next
# block runs, so a stop falls after the block in flight.
OVERLAPPED_BLOCKS = dict(pipeline__updates_per_call=2, ckpt__every_updates=0)


@pytest.mark.xla_default_compilation
def test_several_updates_per_call_give_the_runs_of_one_per_call(finished_run, tmp_path):
    # One test rather than one per lag schedule, per stop and per seeds run: a test
    # compiling with XLA's defaults runs in a pytest process of its own, whose start-up
    # (imports, JAX's devices, the module's compilation cache) they then share, and the
    # stopped run of blocks loads the program of the uninterrupted one.
    blocks = {
        "ppo": CHECKPOINT_ENDED_BLOCKS,
        "ppo-lag1": OVERLAPPED_BLOCKS,
        "ppo-lag3": CHECKPOINT_ENDED_BLOCKS,
    }
    for case, block_overrides in blocks.items():
        reference, reference_state = finished_run(case)
        workdir = str(tmp_path / case)
        updates, state = _run_segment(anakin_config(**CASES[case], **block_overrides), workdir)
        assert updates == list(range(1, NUM_UPDATES + 1)), case  # Every update, in order.
        summary, expected = read_summary(workdir), read_summary(reference)
        assert summary["params_checksum"] == expected["params_checksum"], case
        for a, b in zip(jax.tree.leaves(reference_state), jax.tree.leaves(state), strict=True):
            np.testing.assert_array_equal(a, jax.device_get(b), err_msg=case)
        metrics, expected_metrics = read_metrics(workdir), read_metrics(reference)
        assert _without_timing(metrics) == _without_timing(expected_metrics), case
        saved = [3, 6] if block_overrides is CHECKPOINT_ENDED_BLOCKS else [NUM_UPDATES]
        assert checkpoint.list_steps(checkpoint.checkpoints_dir(workdir)) == saved, case
    # The run of ppo-lag1's blocks above, stopped and resumed, ends as it did (and so as
    # the run of one update per call, whose learner state is at hand).
    _assert_a_stopped_run_of_blocks_resumes_bit_identically(
        anakin_config(**CASES["ppo-lag1"], **OVERLAPPED_BLOCKS),
        finished_run("ppo-lag1"),
        tmp_path / "stopped",
    )
    _assert_seeds_in_blocks_end_as_one_update_per_call(tmp_path)


def _assert_a_stopped_run_of_blocks_resumes_bit_identically(config, uninterrupted, workdir):
    """A run of `config` (OVERLAPPED_BLOCKS), stopped and resumed, ends as the
    uninterrupted run `uninterrupted` (workdir, final learner state) did."""
    uninterrupted, reference_state = uninterrupted
    workdir = str(workdir)
    # SIGINT while update 1's report is made: block 1-2 is done and block 3-4 already runs
    # (a block's reports are made while the next one runs), so the run saves after 4.
    updates, _ = _run_segment(config, workdir, interrupt_after=1)
    assert updates == [1, 2, 3, 4]
    assert checkpoint.list_steps(checkpoint.checkpoints_dir(workdir)) == [4]
    updates, state = _run_segment(config, workdir)
    assert updates == [5, 6]
    summary, expected = read_summary(workdir), read_summary(uninterrupted)
    assert summary["params_checksum"] == expected["params_checksum"]
    for a, b in zip(jax.tree.leaves(reference_state), jax.tree.leaves(state), strict=True):
        np.testing.assert_array_equal(a, jax.device_get(b))
    assert _without_timing(read_metrics(workdir)) == _without_timing(read_metrics(uninterrupted))


def _assert_seeds_in_blocks_end_as_one_update_per_call(tmp_path):
    """`--seeds` (tests/test_anakin_seeds.py): the vmapped program of two seeds in blocks
    ends each seed as its program of one update per call does."""
    from sebulba.anakin import seeds as seeds_lib

    runs = {}
    for per_call in (1, 4):
        workdir = str(tmp_path / f"seeds_per_call_{per_call}")
        config = anakin_config(pipeline__updates_per_call=per_call, ckpt__every_updates=3)
        seeds_lib.train_seeds(config, workdir, (1, 2))
        runs[per_call] = workdir
    for seed in (1, 2):
        one, block = (os.path.join(runs[k], f"seed={seed}") for k in (1, 4))
        assert read_summary(block)["params_checksum"] == read_summary(one)["params_checksum"]
        assert _without_timing(read_metrics(block)) == _without_timing(read_metrics(one))
        assert checkpoint.list_steps(checkpoint.checkpoints_dir(block)) == [3, 6]


def test_updates_per_call_is_refused_for_envpool_tasks():
    config = load_config("ppo_cartpole", "smoke")
    config.pipeline.updates_per_call = 8
    with pytest.raises(ConfigError, match=r"^pipeline.updates_per_call must be 1 with envpool"):
        train.prepare(config)


# Lag schedule -------------------------------------------------------------------------


@pytest.mark.parametrize("policy_lag", [0, 1, 3])
def test_rollout_k_is_collected_by_version_k_minus_the_lag(probe_run, policy_lag):
    lines = read_metrics(probe_run(policy_lag))
    assert [line["update"] for line in lines] == list(range(1, NUM_UPDATES + 1))
    assert_rollouts_came_from_the_lagged_version(lines, policy_lag)
    summary = read_summary(probe_run(policy_lag))
    assert summary["policy_lag"] == policy_lag and summary["architecture"] == "anakin"


@pytest.mark.parametrize("case, policy_lag", [("ppo", 0), ("ppo-lag1", 1)])
def test_metrics_report_the_lag_schedule(finished_run, case, policy_lag):
    workdir, _ = finished_run(case)
    lines = read_metrics(workdir)
    assert [line["update"] for line in lines] == list(range(1, NUM_UPDATES + 1))
    for line in lines:
        k = line["update"]
        assert line["actor_policy_version"] == max(1, k - policy_lag)
        assert line["learner_policy_version"] == k + 1
    assert read_summary(workdir)["policy_lag"] == policy_lag


# Every agent feature ------------------------------------------------------------------


def test_impala_trains_in_anakin(tmp_path):
    config = anakin_config("impala_cartpole")
    assert config.pipeline.policy_lag == 1  # As configs/impala_cartpole.py has it.
    workdir = str(tmp_path / "run")
    state = train.train(config, workdir)
    _assert_finite_losses(workdir)
    summary = read_summary(workdir)
    assert (summary["architecture"], summary["agent"]) == ("anakin", "impala")
    assert summary["env_id"] == ENV_ID and summary["updates"] == NUM_UPDATES
    assert summary["episodes"] > 0
    assert all(np.all(np.isfinite(leaf)) for leaf in jax.tree.leaves(jax.device_get(state)))


def test_ppo_with_an_lstm_trains_in_anakin(finished_run):
    workdir, state = finished_run("lstm-lag1")
    _assert_finite_losses(workdir)
    summary = read_summary(workdir)
    assert (summary["architecture"], summary["agent"]) == ("anakin", "ppo")
    assert summary["episodes"] > 0
    paths = [jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_leaves_with_path(state)]
    assert any("LSTM" in path for path in paths)  # The run did learn an LSTM.


def test_ppo_with_observation_and_reward_normalization_trains_in_anakin(tmp_path):
    config = anakin_config(agent__normalize_observations=True, agent__normalize_rewards=True)
    workdir = str(tmp_path / "run")
    state = jax.device_get(train.train(config, workdir))
    _assert_finite_losses(workdir)
    summary = read_summary(workdir)
    assert summary["architecture"] == "anakin" and summary["episodes"] > 0
    stats = state.normalization
    # Statistics of the valid samples: some of the 6 x 8 x 16 steps were auto-resets.
    assert 6 * 8 * 16 * 0.8 < float(stats.observation.count) <= 6 * 8 * 16 + 1
    assert np.all(np.asarray(stats.observation.var) > 0)
    assert np.any(np.asarray(stats.reward.returns) != 0)


def test_ppo_with_continuous_actions_trains_in_anakin(tmp_path):
    config = anakin_config(env__id="gymnax:Pendulum-v1", agent__normalize_observations=True)
    workdir = str(tmp_path / "run")
    state = jax.device_get(train.train(config, workdir))
    _assert_finite_losses(workdir)
    summary = read_summary(workdir)
    assert summary["architecture"] == "anakin" and summary["env_id"] == "gymnax:Pendulum-v1"
    # Pendulum's episodes last 200 steps: none ends, every sample is valid.
    assert float(state.normalization.observation.count) == pytest.approx(6 * 8 * 16, rel=1e-3)
    assert all(np.all(np.isfinite(leaf)) for leaf in jax.tree.leaves(state))


def test_env_observation_indices_select_observation_components_in_anakin(tmp_path):
    # CartPole's positions without their velocities, as configs/ppo_memory.py observes.
    config = agent_config(minimal_agent, env__id=ENV_ID, env__observation_indices=(0, 2))
    workdir = str(tmp_path / "run")
    state = train.train(config, workdir)
    assert read_summary(workdir)["architecture"] == "anakin"
    assert all(leaf.shape[0] == 2 for leaf in jax.tree.leaves(state.params) if leaf.ndim == 2)


# envpool's auto-reset convention ------------------------------------------------------

TIME_LIMIT = 3


def _counter_env():
    """Counts its steps (observation [counter], reward = counter); action 1 reaches a
    terminal state; the time limit cuts episodes after 3 steps."""

    def reset(key):
        del key
        return jnp.int32(0), jnp.zeros((1,), jnp.float32)

    def step(counter, action, key):
        del key
        counter = counter + 1
        obs = counter.astype(jnp.float32)[None]
        terminated = action == 1
        truncated = counter >= TIME_LIMIT
        return counter, obs, counter.astype(jnp.float32), terminated, truncated

    spec = EnvSpec("test:Counter", ArraySpec((1,), "float32"), Discrete(2))
    return JaxEnv(spec=spec, reset=reset, step=step, max_episode_steps=TIME_LIMIT)


def test_step_envs_bootstraps_truncation_and_resets_on_the_next_step():
    env = _counter_env()
    keys = jax.random.split(jax.random.key(0), 2)
    envs = reset_envs(env, keys)
    np.testing.assert_array_equal(envs.obs, [[0.0], [0.0]])
    # Env 0 only ever takes action 0: its time limit ends the episode after 3 steps.
    # Env 1 takes action 1 on step 3: a terminal state on the time limit's step. Both
    # take action 1 on the reset step (4), which must be ignored.
    actions = [[0, 0], [0, 0], [0, 1], [1, 1], [0, 0]]
    steps = []
    for action in actions:
        envs, step = step_envs(env, envs, jnp.asarray(action, jnp.int32), keys)
        steps.append((jax.device_get(envs.obs), jax.device_get(step)))

    for count, (obs, step) in enumerate(steps[:2], start=1):  # Mid-episode: no episode.
        np.testing.assert_array_equal(obs, [[count], [count]])
        np.testing.assert_array_equal(step.valid, [True, True])
        np.testing.assert_array_equal(step.terminated | step.truncated, [False, False])
        np.testing.assert_array_equal(step.episode_return, [0.0, 0.0])
        np.testing.assert_array_equal(step.episode_length, [0, 0])

    obs, step = steps[2]  # The step that ends both episodes.
    np.testing.assert_array_equal(step.valid, [True, True])
    np.testing.assert_array_equal(step.truncated, [True, False])
    np.testing.assert_array_equal(step.terminated, [False, True])  # Terminal wins.
    np.testing.assert_array_equal(obs, [[3.0], [3.0]])  # The real last observation.
    np.testing.assert_array_equal(step.reward, [3.0, 3.0])
    np.testing.assert_array_equal(step.episode_return, [6.0, 6.0])  # 1 + 2 + 3.
    np.testing.assert_array_equal(step.episode_length, [3, 3])

    obs, step = steps[3]  # The reset step: invalid, ignores action 1, ends nothing.
    np.testing.assert_array_equal(step.valid, [False, False])
    np.testing.assert_array_equal(step.terminated | step.truncated, [False, False])
    np.testing.assert_array_equal(step.reward, [0.0, 0.0])
    np.testing.assert_array_equal(step.episode_return, [0.0, 0.0])
    np.testing.assert_array_equal(step.episode_length, [0, 0])
    np.testing.assert_array_equal(obs, [[0.0], [0.0]])  # A fresh episode's first.

    obs, step = steps[4]  # The new episode runs.
    np.testing.assert_array_equal(step.valid, [True, True])
    np.testing.assert_array_equal(step.reward, [1.0, 1.0])
    np.testing.assert_array_equal(obs, [[1.0], [1.0]])
    np.testing.assert_array_equal(envs.episode_length, [1, 1])


# Config errors ------------------------------------------------------------------------


def _cli(workdir, *overrides):
    env = process_env(devices=1)
    config = os.path.join(ROOT, "configs", "ppo_cartpole_anakin.py:smoke")
    return subprocess.run(
        [sys.executable, "-m", "sebulba.main", f"--config={config}", f"--workdir={workdir}"]
        # KEY=VALUE overrides a config key; a --flag passes as it is (e.g. --seeds=1,2).
        + [o if o.startswith("--") else f"--config.{o}" for o in overrides],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )


@pytest.mark.parametrize(
    "override, expected",
    [
        (
            "pipeline.num_actor_threads=2",
            "pipeline.num_actor_threads must be 1 with a JAX env, got 2",
        ),
        ("debug.actor_delay_s=0.1", "debug.actor_delay_s must be 0.0 with a JAX env, got 0.1"),
        (
            "mesh.actor_platform=cpu",
            "mesh.actor_platform must be 'default' with a JAX env, got 'cpu'",
        ),
        (
            "env.id=gymnax:CartPol-v1",
            "env.id 'gymnax:CartPol-v1' is not a task of gymnax: did you mean 'gymnax:CartPole-v1'",
        ),
        ("env.id=foo:Bar", "env.id 'foo:Bar': 'foo' is not a JAX env suite; a JAX env id is"),
        (
            "env.id=gymnaz:CartPole-v1",
            "env.id 'gymnaz:CartPole-v1': 'gymnaz' is not a JAX env suite; did you mean "
            "'gymnax:CartPole-v1'?",
        ),
    ],
    ids=[
        "actor-threads",
        "actor-delay",
        "actor-platform",
        "misspelt-task",
        "unknown-suite",
        "misspelt-suite",
    ],
)
def test_what_anakin_cannot_do_is_one_line_before_any_work(tmp_path, override, expected):
    workdir = tmp_path / "run"
    result = _cli(workdir, override)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith(f"sebulba: config error: {expected}"), lines[0]
    assert "Traceback" not in result.stderr
    assert not workdir.exists()


# Checkpoints of the other architecture ------------------------------------------------


def _copied_checkpoints(workdir, tmp_path):
    # Without the source's config.json, the checkpoint's own record must refuse it.
    copied = str(tmp_path / "copied")
    shutil.copytree(checkpoint.checkpoints_dir(workdir), copied)
    return copied


def test_an_anakin_checkpoint_does_not_resume_an_envpool_run(probe_run, tmp_path):
    source = _copied_checkpoints(probe_run(0), tmp_path)
    config = agent_config(probe_agent, env__id="CartPole-v1", ckpt__resume_from=source)
    with pytest.raises(ConfigError) as error:
        train.train(config, str(tmp_path / "new"))
    message = str(error.value)
    assert "\n" not in message
    assert "env_id='gymnax:CartPole-v1'" in message and "env_id='CartPole-v1'" in message
    assert not (tmp_path / "new").exists()


def test_an_envpool_checkpoint_does_not_resume_an_anakin_run(tmp_path):
    envpool_run = str(tmp_path / "envpool")
    train.train(
        agent_config(probe_agent, total_timesteps=8 * 4, pipeline__policy_lag=0), envpool_run
    )
    assert read_summary(envpool_run)["architecture"] == "sebulba"
    source = _copied_checkpoints(envpool_run, tmp_path)
    config = probe_config(ckpt__resume_from=source, pipeline__policy_lag=0)
    with pytest.raises(ConfigError) as error:
        train.train(config, str(tmp_path / "new"))
    message = str(error.value)
    assert "\n" not in message
    assert "env_id='CartPole-v1'" in message and f"env_id={ENV_ID!r}" in message
    assert not (tmp_path / "new").exists()


# Steady state -------------------------------------------------------------------------

COMPILE_EVENTS = (
    "/jax/core/compile/backend_compile_duration",
    "/jax/compilation_cache/cache_retrieval_time_sec",
)


def test_steady_state_neither_traces_nor_compiles(tmp_path):
    compiles = []
    window = {}

    def listener(event, duration, **kwargs):
        del duration, kwargs
        if event in COMPILE_EVENTS:
            compiles.append(event)

    def on_update(report, state):
        del state
        if report.update == 1:  # Compiling (or loading from the cache) is over.
            window["before"] = list(compiles)
            compiles.clear()
            window["traces"] = dict(probe_agent.TRACE_COUNTS)
        if report.update == NUM_UPDATES - 1:  # Before the last update's checkpoint.
            window["steady"] = list(compiles)
            assert probe_agent.TRACE_COUNTS == window["traces"]

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        train.train(
            probe_config(pipeline__policy_lag=1, seed=5), str(tmp_path), on_update=on_update
        )
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert window["before"]  # The listener does hear the run's compilations.
    assert window["steady"] == []  # Updates 2-5 ran the program compiled before update 1.
    assert probe_agent.TRACE_COUNTS == window["traces"]
