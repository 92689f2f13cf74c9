"""End to end: PPO learns CartPole and InvertedPendulum; Atari and the task configs run."""

import jax
import numpy as np
import pytest

from sebulba import train
from sebulba.environments import envpool_pools
from tests.helpers import load_config, make_pipeline, read_metrics, read_summary


def test_ppo_cartpole_smoke_config_runs(tmp_path):
    config = load_config("ppo_cartpole", "smoke")
    config.log.tensorboard = False
    train.train(config, str(tmp_path))
    lines = read_metrics(str(tmp_path))
    assert [line["update"] for line in lines] == [1, 2, 3, 4]
    for name in ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac"):
        assert all(np.isfinite(line[name]) for line in lines)


def test_atari_end_to_end(tmp_path):
    config = load_config("ppo_atari", "smoke")
    # The cheaper network: what this checks (frames, clipped rewards, a lagged update on
    # two learner devices) does not depend on it. impala_resnet, the config's own, trains
    # on Atari in the impala_atari smoke runs below and under PPO in test_networks.py.
    config.agent.network = "nature_cnn"
    config.mesh.learner_device_ids = (1, 2)
    config.log.tensorboard = False
    setup = train.prepare(config)
    assert setup.env_spec.obs_shape == (4, 84, 84) and setup.env_spec.num_actions == 18
    state = train.init_learner_state(setup)
    pipeline = make_pipeline(setup, policy_lag=1, clip_rewards=True)
    seen = []

    def on_update(report, new_state):
        seen.append(jax.device_get(report.agent_metrics))

    observed = {}
    original_assemble = pipeline._assemble

    def assemble_and_inspect(actor_rollouts):
        rollout = original_assemble(actor_rollouts)
        observed.setdefault("obs", jax.device_get(rollout.obs))
        observed.setdefault("rewards", jax.device_get(rollout.rewards))
        return rollout

    pipeline._assemble = assemble_and_inspect
    final = pipeline.run(state, on_update=on_update)
    assert len(seen) == setup.sizes.num_updates == 2
    obs = observed["obs"]
    assert obs.dtype == np.uint8 and obs.shape == (9, 4, 4, 84, 84)
    assert obs.max() > 0 and obs.std() > 0  # Real frames, not zeros.
    assert set(np.unique(observed["rewards"])) <= {-1.0, 0.0, 1.0}  # Clipped for learning.
    for metrics in seen:
        assert all(np.isfinite(v) for v in metrics.values())
    before = jax.device_get(setup.agent.policy_params(train.init_learner_state(setup)))
    after = jax.device_get(setup.agent.policy_params(final))
    pairs = zip(jax.tree.leaves(before), jax.tree.leaves(after), strict=True)
    assert any(not np.allclose(a, b) for a, b in pairs)


@pytest.mark.slow
def test_continuous_ppo_learns_inverted_pendulum(tmp_path):
    # configs/ppo_mujoco.py (CleanRL's settings, both normalisations) for 45 updates of
    # 2048 steps, 15-25 s on 2 CPU cores. Seeds 1-3 log 953 / 1000 / 1000 at 51k steps
    # and 1000 (the maximum) at every line from 61k on.
    config = load_config("ppo_mujoco", "InvertedPendulum-v4")
    config.total_timesteps = 45 * 2048
    config.log.every_updates = 5
    config.log.tensorboard = False
    train.train(config, str(tmp_path))
    late = [
        line["episodic_return"]
        for line in read_metrics(str(tmp_path))
        if line["global_step"] >= 60_000
    ]
    assert len(late) >= 4 and all(r is not None and r >= 900 for r in late), late


@pytest.mark.parametrize(
    "name, arg",
    [
        ("ppo_mujoco", "smoke"),
        ("ppo_dmc", "smoke"),
        ("ppo_minigrid", "smoke"),
        ("ppo_joint", "smoke"),
    ],
)
def test_continuous_control_minigrid_and_joint_smoke_configs_run(tmp_path, name, arg):
    config = load_config(name, arg)
    config.log.tensorboard = False
    train.train(config, str(tmp_path))
    lines = read_metrics(str(tmp_path))
    assert [line["update"] for line in lines] == [1, 2, 3, 4]
    for metric in ("policy_loss", "value_loss", "entropy", "approx_kl"):
        assert all(np.isfinite(line[metric]) for line in lines)


@pytest.mark.parametrize("name", ["ppo_mujoco", "ppo_dmc", "ppo_minigrid"])
def test_task_configs_select_their_task_and_refuse_others(name):
    task = {
        "ppo_mujoco": "Walker2d-v4",
        "ppo_dmc": "WalkerWalk-v1",
        "ppo_minigrid": "MiniGrid-Empty-5x5-v0",
    }[name]
    config = load_config(name, task)
    assert config.env.id == task
    # CleanRL's 2048 steps per update (MiniGrid: 16 envs x 128 steps, the same count).
    assert config.env.num_envs * config.agent.num_steps == 2048
    with pytest.raises(ValueError, match=f"unknown variant 'Breakout-v5' of {name}"):
        load_config(name, "Breakout-v5")


@pytest.mark.slow
@pytest.mark.xla_default_compilation
def test_lstm_learns_a_memory_task_that_feed_forward_cannot(tmp_path):
    # configs/ppo_memory.py: CartPole with its velocities hidden, at two thirds of its
    # budget (the assertion's failure message shows both returns). Without memory the
    # pole's direction of motion cannot be known, and the feed-forward policy stays near
    # 50 however long it trains.
    results = {}
    for core in ("lstm", "none"):
        config = load_config("ppo_memory")
        config.agent.core = core
        config.total_timesteps = 200_000
        config.log.tensorboard = False
        train.train(config, str(tmp_path / core))
        results[core] = read_summary(str(tmp_path / core))["mean_return"]
    assert results["lstm"] >= 150, results
    assert results["none"] <= 70, results


@pytest.mark.parametrize("name, arg", [("ppo_lstm_atari", "smoke"), ("impala_atari", "lstm,smoke")])
def test_lstm_atari_configs_run_end_to_end(tmp_path, name, arg):
    config = load_config(name, arg)
    config.log.tensorboard = False
    setup = train.prepare(config)
    # CleanRL's ppo_atari_lstm sees one frame per observation; the IMPALA variant keeps 4.
    frames = 1 if name == "ppo_lstm_atari" else 4
    assert setup.env_spec.obs_shape == (frames, 84, 84)
    for pool in setup.envs_per_thread:
        pool.close()
    state = train.train(config, str(tmp_path))
    lines = read_metrics(str(tmp_path))
    assert [line["update"] for line in lines] == [1, 2]
    assert all(np.isfinite(v) for line in lines for v in line.values() if isinstance(v, float))
    assert "core" in state.params["params"]


@pytest.mark.slow
def test_joint_ppo_learns_every_task(tmp_path):
    # configs/ppo_joint.py (three MiniGrid tasks, one policy) for 16 updates of 2048
    # steps, 30 s on 2 busy CPU cores. A MiniGrid return is 1 - 0.9 * steps / limit on
    # reaching the goal, else 0; a uniformly random policy averages 0.21 (Empty-5x5), 0.27
    # (Empty-Random-6x6) and 0.07 (Empty-8x8). Seeds 1 and 2 end at (summary.json, each
    # task's last 100 episodes, 5x5 / Random-6x6 / 8x8) 0.796 / 0.816 / 0.710 and 0.839 /
    # 0.878 / 0.765; after 20 updates, seeds 1-3 end at 0.914 / 0.940 / 0.918, 0.910 /
    # 0.936 / 0.912 and 0.912 / 0.941 / 0.910 (with the unrolled minibatch loop, which
    # compiles for 1-1.5 min instead of ~10 s: 0.914 / 0.941 / 0.918, 0.911 / 0.939 /
    # 0.913 and 0.918 / 0.941 / 0.918); after 14, seed 1 ends at 0.742 / 0.741 / 0.569.
    config = load_config("ppo_joint")
    config.total_timesteps = 16 * 2048
    config.log.tensorboard = False
    train.train(config, str(tmp_path))
    summary = read_summary(str(tmp_path))
    assert set(summary["tasks"]) == set(config.env.ids)
    returns = {task_id: task["mean_return"] for task_id, task in summary["tasks"].items()}
    assert all(r is not None and r >= 0.6 for r in returns.values()), returns


def test_impala_atari_multitask_config_is_atari_57_with_popart():
    from sebulba.environments import tasks
    from sebulba.experiments import atari_scores

    config = load_config("impala_atari_multitask")
    # Atari-57 but Skiing-v5, to which envpool gives 9 actions with the full action space.
    assert set(config.env.ids) == set(atari_scores.RANDOM_AND_HUMAN_SCORES) - {"Skiing-v5"}
    skiing = envpool_pools.make_envs(tasks.task_env_config(config.env, "Skiing-v5"), 1, seed=0)
    assert skiing.action_space.n != 18
    skiing.close()
    assert config.env.full_action_space and config.agent.popart is True
    # Every game gets the same number of envs, on any number of processes.
    num_games = len(config.env.ids)
    for processes in (1, 4):
        num_envs = config.env.num_envs * config.pipeline.num_actor_threads * processes
        layout = tasks.TaskLayout(config.env.ids, num_envs)
        blocks = {len(layout.block(k)) for k in range(num_games)}
        assert blocks == {num_envs // num_games}, blocks
    with pytest.raises(ValueError, match="unknown variant 'Pong-v5' of impala_atari_multitask"):
        load_config("impala_atari_multitask", "Pong-v5")


def test_impala_atari_multitask_smoke_config_runs(tmp_path):
    config = load_config("impala_atari_multitask", "smoke")
    config.log.tensorboard = False
    assert len(config.env.ids) == 2 and config.env.num_envs >= 2
    train.train(config, str(tmp_path))
    lines = read_metrics(str(tmp_path))
    assert [line["update"] for line in lines] == [1, 2]
    assert all(np.isfinite(v) for line in lines for v in line.values() if isinstance(v, float))
    assert read_summary(str(tmp_path))["env_ids"] == list(config.env.ids)
