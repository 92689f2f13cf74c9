"""envpool construction: the Atari options reach envpool, and lives are not games."""

import os

import numpy as np
import pytest

from configs import impala_atari, ppo_atari, ppo_cartpole
from sebulba.environments import envpool_pools, task_checks, thread_envs
from sebulba.environments import episodes as episodes_lib
from sebulba.errors import ConfigError
from tests import helpers


@pytest.mark.parametrize("use_fire_reset", [False, True])
def test_use_fire_reset_reaches_envpool(use_fire_reset):
    config = ppo_atari.get_config("smoke")
    config.env.use_fire_reset = use_fire_reset
    pool = envpool_pools.make_envs(config.env, 1, seed=0)
    assert pool.spec.config.use_fire_reset is use_fire_reset
    assert pool.spec.config.noop_max == 1  # Machado et al.: no no-op starts.
    assert not pool.spec.config.episodic_life
    pool.close()


def test_cleanba_configs_fire_on_reset_and_the_base_config_does_not():
    # envpool's default (True) is what Cleanba runs; Machado et al.'s protocol has none.
    assert ppo_atari.get_config().env.use_fire_reset
    assert impala_atari.get_config().env.use_fire_reset
    assert not ppo_cartpole.get_config().env.use_fire_reset


# CleanRL's ppo_atari_envpool protocol, asked for through env.kwargs
# (sebulba.environments.envpool_pools).
CLEANRL_ATARI_KWARGS = {"episodic_life": True, "noop_max": 30}


def cleanrl_atari_env_config():
    config = ppo_atari.get_config("smoke")
    config.env.kwargs = dict(CLEANRL_ATARI_KWARGS)
    config.env.repeat_action_probability = 0.0
    config.env.full_action_space = False
    return config.env


def test_cleanrl_atari_protocol_reaches_envpool_and_bad_values_are_one_line():
    pool = envpool_pools.make_envs(cleanrl_atari_env_config(), 1, seed=0)
    assert pool.spec.config.episodic_life and pool.spec.config.noop_max == 30
    pool.close()
    env_config = cleanrl_atari_env_config()
    env_config.kwargs = {"noop_max": 0}  # envpool draws from [0, noop_max - 1].
    with pytest.raises(ConfigError, match=r"^env.kwargs.noop_max must be >= 1 .*got 0$"):
        task_checks.check_env_kwargs(env_config)
    env_config.kwargs = {"episodic_life": 1}
    with pytest.raises(ConfigError, match="env.kwargs.episodic_life must be True or False"):
        task_checks.check_env_kwargs(env_config)
    env_config.kwargs = {"frame_skip": 3}  # Still the protocol's.
    with pytest.raises(ConfigError, match="frame_skip is set by sebulba for Atari"):
        task_checks.check_env_kwargs(env_config)


def test_a_lost_life_terminates_but_the_scored_episode_is_the_whole_game():
    # Random Breakout with episodic_life: lives end long before the game does.
    pool = envpool_pools.make_envs(cleanrl_atari_env_config(), 2, seed=3)
    pool.reset()
    tracker = episodes_lib.EpisodeTracker([10, 11])
    returns, lengths, env_ids = [], [], []
    rng = np.random.default_rng(0)
    terminations_seen = game_overs_seen = 0
    reset_steps_after_a_life = 0
    for _ in range(1500):
        _, rewards, terminations, truncations, info = pool.step(rng.integers(0, 4, 2))
        over = episodes_lib.game_overs(terminations, info)
        resetting = tracker.resetting.copy()
        valid = tracker.step(rewards, terminations, truncations, returns, lengths, env_ids, over)
        assert np.array_equal(valid, ~resetting)  # Every reset step is invalid, lives too.
        reset_steps_after_a_life += int(np.sum(resetting & ~np.asarray(info["terminated"], bool)))
        terminations_seen += int(terminations.sum())
        game_overs_seen += int(over.sum())
    pool.close()
    assert len(returns) == game_overs_seen > 0
    assert terminations_seen >= 4 * game_overs_seen  # Breakout: 5 lives per game.
    assert reset_steps_after_a_life > 0
    assert set(env_ids) <= {10, 11}
    # Each game is scored whole: a game lasts several lives, not one.
    steps_per_life = 2 * 1500 / terminations_seen
    assert np.mean(lengths) > 3 * steps_per_life


def test_without_episodic_life_game_overs_are_the_terminations():
    terminations = np.array([True, False, True])
    info = {"terminated": np.array([1, 0, 1], np.int32), "lives": np.zeros(3, np.int32)}
    assert np.array_equal(episodes_lib.game_overs(terminations, info), terminations)
    assert episodes_lib.game_overs(terminations, {}) is terminations  # Tasks without the flag.


def test_envpool_workers_share_the_process_cores_among_its_pools(monkeypatch):
    from sebulba.environments.tasks import TaskLayout

    # Pools as make_thread_envs builds them: one per task block a thread overlaps, per half.
    layout = TaskLayout(("A", "B"), 12)  # Blocks [0, 6) and [6, 12).
    assert thread_envs.thread_pool_sizes(layout, 0, 12, split=False) == [6, 6]
    assert thread_envs.thread_pool_sizes(layout, 4, 4, split=False) == [2, 2]
    assert thread_envs.thread_pool_sizes(layout, 0, 6, split=True) == [3, 3]
    # A 16-core node (or a SLURM job's 16 CPUs of a larger one): two actor threads' pools
    # get 8 workers each, where envpool's own default would start 16 in each.
    monkeypatch.setattr(thread_envs, "available_cores", lambda: 16)
    assert thread_envs.worker_threads(0, [64, 64]) == (
        8,
        "env.num_threads=0: 16 cores for 2 pool(s)",
    )
    assert thread_envs.worker_threads(0, [128])[0] == 16
    assert thread_envs.worker_threads(0, [4, 4])[0] == 4  # No more workers than envs.
    assert thread_envs.worker_threads(0, [8] * 32)[0] == 1  # At least one.
    assert thread_envs.worker_threads(3, [64, 64]) == (3, "env.num_threads=3")  # Set: as set.
    assert thread_envs.worker_threads(16, [8, 8])[0] == 16  # Idle workers, but no more than cores.
    with pytest.raises(ConfigError, match=r"env.num_threads \(100000\) is more than both"):
        thread_envs.worker_threads(100_000, [64, 64])  # envpool aborts the process starting them.
    # The process's CPU set, not the machine's core count.
    monkeypatch.undo()
    assert 1 <= thread_envs.available_cores() <= (os.cpu_count() or 1)


_ENVPOOL_START_UP_PROBE = """
import sys
from sebulba.environments.envpool_registry import import_envpool

envpool = import_envpool()
envs = envpool.make_gymnasium("CartPole-v1", num_envs=1)
kind = lambda: type(sys.modules["matplotlib.pyplot"]).__name__
print("after envpool:", kind())
import matplotlib.pyplot as plt  # A user's own plot gets the real module.
figure = plt.figure()
print("after a figure:", kind(), type(figure).__name__)
"""


def test_envpool_starts_without_the_plotting_module_it_imports_only_to_render():
    """envpool's Jumanji viewers import pyplot with envpool (about 0.3 s of every command
    line's start-up); sebulba defers it to its first use (docs/architecture.md)."""
    env = {**helpers.process_env(), "MPLBACKEND": "Agg"}
    result = helpers.run_python("-c", _ENVPOOL_START_UP_PROBE, env=env, fresh_interpreter=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "after envpool: _DeferredModule" in result.stdout
    assert "after a figure: module Figure" in result.stdout
