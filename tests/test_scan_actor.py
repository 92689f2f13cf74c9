"""`pipeline.actor_loop`: the rollout as one XLA program gives the step loop's data, bit for bit.

Each case trains a few updates twice from the same seed, once per loop, and compares
every leaf of every rollout the learner receives (observations, actions, behaviour
outputs, rewards, flags, validity, env ids, initial carries), every episode record
(return, length, global env id) and the final learner state.
"""

import types

import jax
import numpy as np
import pytest

from sebulba import train
from sebulba.actors import scan_actor
from sebulba.agents import impala, ppo
from sebulba.environments import spaces, thread_envs
from sebulba.errors import ConfigError
from tests import minimal_agent
from tests.helpers import (
    LSTM_RUN,
    agent_config,
    make_pipeline,
    normalized_continuous_overrides,
    read_summary,
)

MINIGRID = {
    "env__id": "MiniGrid-Empty-5x5-v0",
    "env__num_envs": 4,
    "agent__network": "multi_input",
    "agent__num_steps": 40,  # 3 x 40 steps pass the task's 100-step limit: truncations.
    "agent__num_minibatches": 2,
}

# Box actions whose random episodes end within the run (Pendulum's last 200 steps).
LUNAR_LANDER = {"env__id": "LunarLanderContinuous-v2", "agent__num_steps": 32}

TWO_THREADS_THREE_TASKS = {
    "env__ids": ("CartPole-v1", "CartPole-v0", "phys2d/CartPole-v1"),
    "pipeline__num_actor_threads": 2,
    "env__num_envs": 4,
}

CASES = {
    # Envs stepped as two halves: inside a scan, every pool is sent before any is read.
    "ppo-mlp-overlap-env-steps": (ppo, {"pipeline__overlap_env_steps": True}),
    # Float rewards clipped to their sign for learning, recorded raw in the episodes.
    "impala-clipped-rewards": (
        impala,
        {"env__id": "LunarLander-v2", "env__clip_rewards": True, "agent__num_steps": 48},
    ),
    "ppo-lstm-observation-indices": (ppo, LSTM_RUN),
    "ppo-dict-observations": (ppo, MINIGRID),
    # Box actions clipped to the bounds; observation and reward normalisation.
    "ppo-box-normalized": (ppo, {**normalized_continuous_overrides(), **LUNAR_LANDER}),
}
# Several pools per thread, each of 2 threads spanning two tasks: the same comparison, with
# delays, in test_scan_keeps_the_same_data_under_injected_delays (whose compilation, fast,
# gives the linear minimal agent the same bits in both loops).


def _run(config, actor_loop: str, compiled_update=None, **pipeline_options):
    """The rollouts the learner received, the episodes, the final learner state, and the
    compiled learner update (`compiled_update`, where given, is used instead of one built
    for the run)."""
    setup = train.prepare(config)
    state = train.init_learner_state(setup)
    pipeline = make_pipeline(setup, actor_loop=actor_loop, **pipeline_options)
    if compiled_update is None:
        compiled_update = pipeline.compile_update(state)
    else:
        pipeline.use_compiled_update(compiled_update)
    received = []
    to_learner = pipeline._to_learner_devices

    def capture(rollout):
        pieces = to_learner(rollout)
        episodes = (rollout.episode_returns, rollout.episode_lengths, rollout.episode_env_ids)
        received.append((jax.device_get(pieces), [list(e) for e in episodes]))
        return pieces

    pipeline._to_learner_devices = capture
    try:
        final = jax.device_get(pipeline.run(state))
    finally:
        for pool in setup.envs_per_thread:
            pool.close()
    # Threads hand over in the timing's order: group by thread (their envs' ids), each
    # thread's rollouts in its own order (the sort is stable).
    received.sort(key=lambda r: int(np.min(r[0][0].env_ids)))
    return received, final, compiled_update


def _step_and_scan_runs(config, **scan_options):
    """`_run` of `config` with the step loop, then with the scan loop on the step run's
    compiled learner update: the loops under test differ, the update they feed does not,
    and tracing and lowering it again took a third of a case's time."""
    step_run = _run(config, "step")
    return step_run, _run(config, "scan", compiled_update=step_run[2], **scan_options)


def _assert_same(step_run, scan_run, episodes_end=True):
    (step_rollouts, step_final, _), (scan_rollouts, scan_final, _) = step_run, scan_run
    assert len(step_rollouts) == len(scan_rollouts) > 0
    for (step_pieces, step_episodes), (scan_pieces, scan_episodes) in zip(
        step_rollouts, scan_rollouts, strict=True
    ):
        leaves = jax.tree_util.tree_leaves_with_path(step_pieces)
        assert jax.tree.structure(step_pieces) == jax.tree.structure(scan_pieces)
        for (path, a), b in zip(leaves, jax.tree.leaves(scan_pieces), strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape, jax.tree_util.keystr(path)
            np.testing.assert_array_equal(a, b, err_msg=jax.tree_util.keystr(path))
        assert step_episodes == scan_episodes
    if episodes_end:  # The comparison covers the episode records' bookkeeping.
        assert sum(len(episodes[0]) for _, episodes in step_rollouts) > 0
    for a, b in zip(jax.tree.leaves(step_final), jax.tree.leaves(scan_final), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.xla_default_compilation
def test_scan_and_step_give_the_same_data():
    # Every case in one test rather than a parametrization: a test compiling with XLA's
    # defaults runs in a pytest process of its own, whose start-up (imports, envpool, JAX's
    # devices: seconds) the cases then share.
    for case, (agent_module, overrides) in CASES.items():
        config = agent_config(agent_module, **overrides)
        # Three updates: the first two rollouts share policy version 1, the third uses 2.
        config.total_timesteps = config.env.num_envs * config.agent.num_steps * 3
        try:
            _assert_same(*_step_and_scan_runs(config))
        except AssertionError as error:
            raise AssertionError(f"case {case}: {error}") from error


def test_scan_keeps_the_same_data_under_injected_delays():
    config = agent_config(minimal_agent, **TWO_THREADS_THREE_TASKS)
    _assert_same(*_step_and_scan_runs(config, learner_delay_s=0.03, actor_delay_s=0.02))


def test_auto_chooses_scan_for_envpool_on_cpu_and_records_it(tmp_path):
    config = agent_config(minimal_agent, total_timesteps=8 * 128 * 2)
    train.train(config, str(tmp_path))
    assert read_summary(str(tmp_path))["actor_loop"] == "scan"


@pytest.mark.parametrize("task, network", [("Hopper-v4", "mlp"), ("CheetahRun-v1", "multi_input")])
def test_float64_tasks_fall_back_to_step_with_the_reason(task, network):
    overrides = {"env__id": task, "env__num_envs": 2, "agent__network": network}
    setup = train.prepare(agent_config(ppo, **overrides))
    try:
        assert setup.actor_loop == "step"
        groups = thread_envs.step_groups(setup.envs_per_thread[0])
        reason = scan_actor.unsupported_reason(groups, jax.devices()[0], setup.env_spec.action)
        assert "float64" in reason and "jax_enable_x64" in reason
    finally:
        for pool in setup.envs_per_thread:
            pool.close()
    with pytest.raises(ConfigError, match=r"pipeline.actor_loop is 'scan', but .*float64"):
        train.prepare(agent_config(ppo, **overrides, pipeline__actor_loop="scan"))


def test_unsupported_devices_and_pools_keep_the_step_loop():
    import envpool

    pool = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=2)
    action = spaces.Discrete(2)
    try:
        tpu = types.SimpleNamespace(platform="tpu")
        assert "no kernels for tpu" in scan_actor.unsupported_reason([pool], tpu, action)
        assert scan_actor.unsupported_reason([pool], jax.devices()[0], action) is None
        loop, _ = scan_actor.choose_actor_loop("auto", [[pool]], [tpu], action)
        assert loop == "step"
        loop, _ = scan_actor.choose_actor_loop("step", [[pool]], [jax.devices()[0]], action)
        assert loop == "step"
    finally:
        pool.close()
    not_envpool = types.SimpleNamespace()
    reason = scan_actor.unsupported_reason([not_envpool], jax.devices()[0], action)
    assert "not an envpool pool" in reason


def test_actions_envpool_would_misread_are_refused_before_compiling():
    import envpool

    pool = envpool.make("LunarLanderContinuous-v2", env_type="gymnasium", num_envs=2)
    try:
        wrong = spaces.Box((3,), (-1.0,) * 3, (1.0,) * 3)
        reason = scan_actor.unsupported_reason([pool], jax.devices()[0], wrong)
        assert "float32 (2,)" in reason and "(3,)" in reason
        assert scan_actor.unsupported_reason([pool], jax.devices()[0], spaces.Discrete(4))
        env_spec = types.SimpleNamespace(action=wrong, observation=None)
        with pytest.raises(ValueError, match="reads action as float32"):
            scan_actor.build_rollout_program(
                None, env_spec, [pool], 4, clip_rewards=False, num_slices=1
            )
    finally:
        pool.close()


def test_a_bad_actor_loop_is_one_line():
    with pytest.raises(
        ConfigError, match=r"^pipeline.actor_loop 'fast' must be one of auto, scan, step$"
    ):
        train.prepare(agent_config(ppo, pipeline__actor_loop="fast"))


@pytest.mark.slow
def test_scan_and_step_agree_when_lives_terminate_and_games_are_scored():
    # Atari, with CleanRL's protocol (env.kwargs episodic_life, noop_max): both loops
    # record whole games while every lost life terminates the learner's data.
    config = agent_config(
        ppo,
        env__id="Breakout-v5",
        env__kwargs={"episodic_life": True, "noop_max": 30},
        env__use_fire_reset=True,
        env__repeat_action_probability=0.0,
        env__full_action_space=False,
        env__num_envs=4,
        agent__network="nature_cnn",
        agent__num_steps=64,
        agent__num_minibatches=2,
        agent__minibatch_loop="auto",
        agent__update_epochs=1,  # The actors are under test: the update compiles faster.
        total_timesteps=4 * 64 * 3,
    )
    step_run, scan_run = _step_and_scan_runs(config)
    _assert_same(step_run, scan_run)
    rollouts = step_run[0]
    terminations = sum(int(pieces[0].terminations.sum()) for pieces, _ in rollouts)
    games = sum(len(episodes[0]) for _, episodes in rollouts)
    assert terminations >= 4 * games > 0  # Breakout has 5 lives.
