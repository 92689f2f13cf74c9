"""Joint multi-task training in Anakin mode: `env.ids` naming several JAX envs.

Each task's env steps its fixed block of the global envs (`sebulba.environments.tasks`), so the runs
keep Anakin's guarantees: per-task episodes in metrics, summary and evaluation, the same
policy on 1 and 2 learner devices (task blocks that do not split evenly over them
included), and a bit-identical resume of every task's env state.
"""

import os
import signal

import jax
import numpy as np
import pytest

from sebulba import checkpoint, evaluate, train
from sebulba.anakin import suites
from sebulba.anakin.env_api import JointJaxEnv, reset_envs, step_envs
from sebulba.config import run_plan
from sebulba.environments.tasks import TaskLayout
from sebulba.errors import ConfigError
from tests.helpers import (  # noqa: F401 - module_compilation_cache is an autouse fixture.
    load_config,
    module_compilation_cache,
    read_metrics,
    read_summary,
)

pytest.importorskip("xminigrid")

TASKS = ("xminigrid:MiniGrid-Empty-5x5", "xminigrid:MiniGrid-Empty-6x6")
NUM_UPDATES = 4


def joint_config(num_envs=6, **mesh):
    """configs/ppo_xminigrid.py:smoke on two tasks: 6 envs are blocks of 3 and 3, which
    two learner devices cannot split evenly."""
    config = load_config("ppo_xminigrid", "smoke")
    config.env.ids = TASKS
    config.env.num_envs = num_envs
    config.log.tensorboard = False
    for key, value in mesh.items():
        config.mesh[key] = value
    config.total_timesteps = num_envs * config.agent.num_steps * NUM_UPDATES
    return config


@pytest.fixture(scope="module")
def joint_run(tmp_path_factory):
    """(workdir, final learner state on the host) of an uninterrupted joint run."""
    workdir = str(tmp_path_factory.mktemp("joint") / "run")
    state = train.train(joint_config(), workdir)
    return workdir, jax.device_get(state)


def test_each_task_steps_its_own_block_of_envs():
    layout = TaskLayout(TASKS, 5)  # Blocks of 3 and 2 envs.
    setup_spec = suites.make_env(TASKS[0]).spec
    envs = suites.make_run_envs(layout, setup_spec)
    assert isinstance(envs, JointJaxEnv) and envs.block_sizes == (3, 2)
    keys = jax.random.split(jax.random.key(0), 5)
    actions = np.full((5,), 2, np.int32)  # Forward.

    def reset_and_step(env, keys, actions):
        # Jitted, as a run steps them (op by op, xminigrid's step takes three times as
        # long); reset and step in one program, so that each env compiles once.
        return jax.jit(lambda k, a: step_envs(env, reset_envs(env, k), a, k))(keys, actions)

    batch, step = reset_and_step(envs, keys, actions)
    assert step.reward.shape == (5,) and jax.tree.leaves(batch.obs)[0].shape[0] == 5
    # Each block is exactly what its own task's env does with the same keys.
    for task_id, block in ((TASKS[0], slice(0, 3)), (TASKS[1], slice(3, 5))):
        own, own_step = reset_and_step(suites.make_env(task_id), keys[block], actions[block])
        for a, b in zip(jax.tree.leaves(own.obs), jax.tree.leaves(batch.obs), strict=True):
            np.testing.assert_array_equal(a, np.asarray(b)[block])
        np.testing.assert_array_equal(own_step.reward, np.asarray(step.reward)[block])
    # The two tasks' states stay apart: their grids differ in size.
    grid_shapes = {leaf.shape for leaf in jax.tree.leaves(batch.env[0])}
    assert grid_shapes != {leaf.shape for leaf in jax.tree.leaves(batch.env[1])}


def test_a_joint_run_reports_and_evaluates_every_task(joint_run):
    workdir, _ = joint_run
    summary = read_summary(workdir)
    assert summary["architecture"] == "anakin" and summary["env_ids"] == list(TASKS)
    assert set(summary["tasks"]) == set(TASKS)
    episodes = sum(task["episodes"] for task in summary["tasks"].values())
    assert episodes == summary["episodes"] > 0
    lines = read_metrics(workdir)
    assert [line["update"] for line in lines] == list(range(1, NUM_UPDATES + 1))
    assert all(f"episodic_return/{task}" in lines[-1] for task in TASKS)
    result = evaluate.evaluate(workdir, episodes=3, num_envs=3)
    assert set(result["tasks"]) == set(TASKS)
    for task in result["tasks"].values():
        assert task["episodes"] == 3 and np.isfinite(task["mean_return"])


def test_one_and_two_learner_devices_learn_the_same_policy(joint_run, tmp_path):
    reference, one = joint_run
    two = train.train(joint_config(learner_device_ids=(0, 1)), str(tmp_path))
    assert "learner_devices=[0, 1]" in read_summary(str(tmp_path))["layout"]
    for a, b in zip(jax.tree.leaves(one.params), jax.tree.leaves(two.params), strict=True):
        np.testing.assert_allclose(a, jax.device_get(b), rtol=1e-3, atol=1e-6)
    assert read_summary(str(tmp_path))["tasks"] == read_summary(reference)["tasks"]


def test_an_interrupted_joint_run_resumes_bit_identically(joint_run, tmp_path):
    reference, _ = joint_run
    workdir = str(tmp_path / "run")

    def interrupt(report, state):
        del state
        if report.update == 2:
            os.kill(os.getpid(), signal.SIGINT)

    train.train(joint_config(), workdir, on_update=interrupt)
    # The run stops after the update in flight when the signal arrives, then saves.
    stopped = checkpoint.list_steps(checkpoint.checkpoints_dir(workdir))[-1]
    assert 2 <= stopped < NUM_UPDATES and not os.path.exists(f"{workdir}/summary.json")
    train.train(joint_config(), workdir)
    summary, expected = read_summary(workdir), read_summary(reference)
    assert summary["params_checksum"] == expected["params_checksum"]
    assert summary["tasks"] == expected["tasks"]  # Every task's envs went on as before.


def test_joint_tasks_must_share_their_spaces():
    config = joint_config()
    config.env.ids = ("xminigrid:MiniGrid-Empty-5x5", "gymnax:CartPole-v1")
    with pytest.raises(ConfigError, match="env.ids: tasks .* have different action spaces"):
        run_plan.plan(config)


def test_seeds_of_a_joint_run_hold_uneven_task_blocks_as_the_single_runner(tmp_path):
    from sebulba.anakin import seeds as seeds_lib

    # Blocks of 3 and 3 envs over two learner devices: replicated, as a single run holds
    # them (sharding them along the env axis cannot split 3 envs in two).
    config = joint_config(learner_device_ids=(0, 1))
    states = seeds_lib.train_seeds(config, str(tmp_path), (1, 2))
    assert len(states) == 2
    for seed in (1, 2):
        summary = read_summary(str(tmp_path / f"seed={seed}"))
        assert "learner_devices=[0, 1]" in summary["layout"]
        assert set(summary["tasks"]) == set(TASKS)
