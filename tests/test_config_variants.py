"""Config variants (`--config=FILE:ARG`): one parser for every config file."""

import os

import pytest

from sebulba import train
from sebulba.config import parse_variant
from tests.helpers import ROOT, config_module, load_config, read_metrics

CONFIGS = sorted(f[:-3] for f in os.listdir(os.path.join(ROOT, "configs")) if f.endswith(".py"))


def _minigrid(task):
    # XLand-MiniGrid's XLand tasks need a downloaded ruleset: the adapter refuses them.
    return task.startswith("MiniGrid-")


def test_parse_variant_takes_keywords_and_one_task_in_any_order():
    def is_task(option):
        return option.endswith("-v4")

    variant = parse_variant("Hopper-v4,smoke", "x", ("smoke", "lstm"), is_task, "TASK")
    assert variant.task == "Hopper-v4" and "smoke" in variant and "lstm" not in variant
    assert parse_variant("smoke, Hopper-v4", "x", ("smoke",), is_task) == variant.__class__(
        frozenset({"smoke"}), "Hopper-v4"
    )
    assert parse_variant(None, "x").task is None and "smoke" not in parse_variant(None, "x")
    with pytest.raises(ValueError, match=r"unknown variant 'fast' of x \(known: smoke, or TASK\)"):
        parse_variant("fast", "x", ("smoke",), is_task, "TASK")
    with pytest.raises(ValueError, match="unknown variant 'Ant-v4' of x"):
        parse_variant("Hopper-v4,Ant-v4", "x", ("smoke",), is_task, "TASK")  # Two tasks.
    with pytest.raises(ValueError, match=r"unknown variant 'Hopper-v4' of x \(known: smoke\)"):
        parse_variant("Hopper-v4", "x")  # A config that names its own task.


@pytest.mark.parametrize("name", CONFIGS)
def test_every_config_reads_smoke_through_the_shared_parser(name):
    smoke, full = load_config(name, "smoke"), load_config(name)
    assert smoke.total_timesteps < full.total_timesteps
    with pytest.raises(ValueError, match=f"unknown variant 'smok' of {name} "):
        load_config(name, "smok")


@pytest.mark.parametrize(
    "name, arg, env_id",
    [
        ("ppo_mujoco", "BipedalWalker-v3", "BipedalWalker-v3"),
        ("ppo_mujoco", "Pendulum-v1", "Pendulum-v1"),
        ("ppo_mujoco", "LunarLanderContinuous-v2", "LunarLanderContinuous-v2"),
        ("ppo_mujoco", "Hopper-v4,smoke", "Hopper-v4"),
        ("ppo_mujoco", "smoke,Walker2d-v4", "Walker2d-v4"),
        ("ppo_dmc", "WalkerWalk-v1,smoke", "WalkerWalk-v1"),
        ("ppo_minigrid", "MiniGrid-Empty-5x5-v0,smoke", "MiniGrid-Empty-5x5-v0"),
        ("ppo_atari", "Pong-v5,smoke", "Pong-v5"),
        ("impala_atari", "lstm,Pong-v5,smoke", "Pong-v5"),
        ("pqn_atari", "Pong-v5,purejaxql,smoke", "Pong-v5"),
        ("pqn_minatar", "Asterix,smoke", "gymnax:Asterix-MinAtar"),
        ("pqn_minatar", "Seaquest", "gymnax:Seaquest-MinAtar"),
        ("sac_mujoco", "Pendulum-v1,smoke", "Pendulum-v1"),
        ("sac_mujoco", "Hopper-v4", "Hopper-v4"),
        ("sac_brax", "hopper,smoke", "brax:hopper"),
        ("alphazero_pgx", "connect_four,smoke", "pgx:connect_four"),
        ("alphazero_pgx", "smoke", "pgx:tic_tac_toe"),
    ],
)
def test_a_task_shortcut_selects_the_task_and_combines_with_smoke(name, arg, env_id):
    config = load_config(name, arg)
    assert config.env.id == env_id
    smoke = load_config(name, "smoke")
    if "smoke" in arg.split(","):
        assert config.total_timesteps == smoke.total_timesteps
        assert config.agent.num_steps == smoke.agent.num_steps
    else:
        assert config.total_timesteps == load_config(name).total_timesteps


@pytest.mark.parametrize(
    "task", ["CartPole-v1", "LunarLander-v2", "CarRacing-v2", "CheetahRun-v1", "Pong-v5"]
)
def test_the_continuous_config_refuses_tasks_without_box_actions_or_vectors(task):
    with pytest.raises(ValueError, match=f"unknown variant '{task}' of ppo_mujoco .*BipedalWalker"):
        load_config("ppo_mujoco", task)


def test_the_continuous_config_trains_a_box2d_task_as_a_smoke_run(tmp_path):
    config = load_config("ppo_mujoco", "BipedalWalker-v3,smoke")
    config.log.tensorboard = False
    train.train(config, str(tmp_path))
    assert [line["update"] for line in read_metrics(str(tmp_path))] == [1, 2, 3, 4]


def _searchable_two_player_game(task):
    # Two players, no dice and no hidden cards: the games a search over the state can play.
    import pgx

    return pgx.make(task).num_players == 2 and task not in (
        "backgammon",
        "kuhn_poker",
        "leduc_holdem",
    )


@pytest.mark.parametrize(
    "name, suite, keep",
    [
        ("ppo_brax", "brax", lambda task: True),
        ("sac_brax", "brax", lambda task: True),
        ("ppo_xminigrid", "xminigrid", _minigrid),
        ("alphazero_pgx", "pgx", _searchable_two_player_game),
    ],
)
def test_an_anakin_config_lists_the_tasks_its_suite_offers(name, suite, keep):
    """The task list an Anakin config parses its variants with is its suite's registry
    (the tasks the adapter makes), so no task is missing and none is invented."""
    from sebulba.anakin import suites
    from sebulba.errors import ConfigError

    try:
        offered = suites.task_ids(suite)
    except ConfigError:
        pytest.skip(f"the {suite} suite is not installed")
    module = config_module(name)
    assert set(module.TASKS) == {task for task in offered if keep(task)}
    for task in module.TASKS:
        assert load_config(name, f"{task},smoke").env.id == f"{suite}:{task}"
