"""Procgen and `env.kwargs`: settings reach envpool, are checked first, stay fixed on resume;
the Procgen config trains, and evaluation plays training and held-out levels."""

import json
import os

import ml_collections
import numpy as np
import pytest

from sebulba import evaluate, train
from sebulba.config import base_config, check_run_config
from sebulba.config import flag as config_flag
from sebulba.config import resume as resume_config
from sebulba.environments import envpool_pools, system_libraries, task_checks
from sebulba.errors import ConfigError
from sebulba.experiments import sweep_plan
from tests import minimal_agent
from tests.helpers import ROOT, load_config
from tests.test_cli import run_cli

PROCGEN = os.path.join(ROOT, "configs", "ppo_procgen.py:Starpilot")


def env_section(env_id, **kwargs):
    env = base_config(minimal_agent.get_config()).env
    env.id = env_id
    env.kwargs = ml_collections.ConfigDict(kwargs)
    return env


def one_line_error(call, *args):
    with pytest.raises(ConfigError) as error:
        call(*args)
    message = str(error.value)
    assert "\n" not in message
    return message


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """configs/ppo_procgen.py:smoke trained to its end (2 updates of 4 envs x 16 steps)."""
    workdir = str(tmp_path_factory.mktemp("procgen") / "run")
    config = load_config("ppo_procgen", "smoke")
    config.log.tensorboard = False
    train.train(config, workdir)
    return workdir


def test_env_kwargs_reach_the_envs_and_the_spec_a_run_sees():
    # num_levels and start_level bound the level seeds envpool draws.
    pool = envpool_pools.make_envs(
        env_section("BigfishEasy-v0", num_levels=5, start_level=1000), 8, 0
    )
    _, info = pool.reset()
    pool.close()
    assert set(info["level_seed"].tolist()) <= set(range(1000, 1005))
    # channel_first changes the observation: the spec a run (and load_policy) builds too.
    env = env_section("BigfishEasy-v0", channel_first=False)
    assert envpool_pools.task_env_specs(env, ["BigfishEasy-v0"])[
        "BigfishEasy-v0"
    ].observation.shape == (
        64,
        64,
        3,
    )
    assert envpool_pools.task_spaces("BigfishEasy-v0", {"channel_first": False})[0].shape == (
        64,
        64,
        3,
    )
    assert envpool_pools.envpool_config("BigfishEasy-v0", {"num_levels": 200})["num_levels"] == 200
    # A classic-control setting: episodes capped at 7 steps.
    pool = envpool_pools.make_envs(env_section("CartPole-v1", max_episode_steps=7), 1, 0)
    pool.reset()
    ends = [pool.step(np.zeros(1, np.int32))[3][0] for _ in range(7)]
    pool.close()
    assert ends == [False] * 6 + [True]


def test_an_unknown_setting_is_one_line_naming_it_with_close_matches():
    message = one_line_error(
        task_checks.check_env_kwargs, env_section("BigfishEasy-v0", num_level=3)
    )
    assert message.startswith("env.kwargs.num_level is not an envpool setting of BigfishEasy-v0")
    assert "did you mean 'num_levels'" in message and "start_level" in message
    message = one_line_error(
        task_checks.check_env_kwargs, env_section("BigfishEasy-v0", num_levels="9")
    )
    assert message.startswith("env.kwargs.num_levels must be an integer")
    message = one_line_error(
        task_checks.check_env_kwargs, env_section("BigfishEasy-v0", num_levels=-5)
    )
    assert message == (
        "env.kwargs.num_levels must be >= 0 (envpool's default for BigfishEasy-v0: 0), got -5"
    )


def test_settings_sebulba_makes_are_refused_naming_the_key_to_use():
    config = base_config(minimal_agent.get_config())
    config.env.kwargs = ml_collections.ConfigDict({"seed": 3})
    # Before JAX or envpool is imported by the command line (check_run_config).
    message = one_line_error(check_run_config, config)
    assert message == (
        "env.kwargs.seed is set by sebulba for every task: use seed (env i of a run is "
        "seeded seed + i) instead"
    )
    message = one_line_error(task_checks.check_env_kwargs, env_section("Pong-v5", stack_num=2))
    assert (
        message
        == "env.kwargs.stack_num is set by sebulba for Atari tasks: use env.frame_stack instead"
    )
    message = one_line_error(task_checks.check_env_kwargs, env_section("Pong-v5", frame_skip=2))
    assert "Atari protocol fixes it" in message
    message = one_line_error(
        task_checks.check_env_kwargs, env_section("StarpilotEasy-v0", distribution_mode=1)
    )
    assert "use env.id (a task per game and mode, e.g. StarpilotHard-v0)" in message


def test_a_missing_qt_runtime_is_one_line_naming_the_packages(monkeypatch):
    monkeypatch.setattr(system_libraries, "_qt_missing", lambda: True)
    expected = (
        "env.id 'StarpilotEasy-v0': envpool's Procgen needs the system Qt 5 runtime, which is "
        "not installed (apt-get install -y libqt5core5a libqt5gui5)"
    )
    assert one_line_error(task_checks.check_env_id, "StarpilotEasy-v0") == expected
    # Every way in stops there, before envpool's ImportError: a run's plan, a listing.
    config = load_config("ppo_procgen", "smoke")
    assert one_line_error(train.plan, config) == expected
    with pytest.raises(ConfigError, match="libqt5gui5"):
        envpool_pools.task_spaces("BigfishEasy-v0")
    task_checks.check_env_id("CartPole-v1")  # Other families do not need Qt.


def test_a_setting_given_as_key_value_says_to_write_a_dict(tmp_path):
    result = run_cli(tmp_path / "run", "--config.env.kwargs=num_levels=200", config=PROCGEN)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "sebulba: config error: --config.env.kwargs=num_levels=200: env.kwargs takes a dict "
        "literal, e.g. --config.env.kwargs=\"{'num_levels': 200}\" (or "
        "--config.env.kwargs.KEY=VALUE for a key the config file sets)"
    )


def test_env_kwargs_on_the_command_line():
    # A key the config file sets is overridden as any key; a new one as a dict literal,
    # which replaces the file's dict.
    set_keys = sweep_plan.load_config(
        "configs/ppo_procgen.py", ["--config.env.kwargs.num_levels=500"]
    )
    assert set_keys.env.kwargs.to_dict() == {"num_levels": 500, "start_level": 0}
    whole = sweep_plan.load_config(
        "configs/ppo_procgen.py",
        ["--config.env.kwargs={'num_levels': 0, 'use_backgrounds': False}"],
    )
    assert whole.env.kwargs.to_dict() == {"num_levels": 0, "use_backgrounds": False}
    argv = [
        "sebulba.main",
        "--config=configs/ppo_cartpole.py",
        "--config.env.kwargs.max_episode_steps=9",
    ]
    assert config_flag._unknown_override(argv) == (
        "--config.env.kwargs.max_episode_steps: the config file sets no "
        "env.kwargs.max_episode_steps; give the whole dict, e.g. "
        "--config.env.kwargs=\"{'max_episode_steps': 9}\" (it replaces the file's env.kwargs, "
        "so repeat any key the file sets)"
    )


def test_config_variants_name_a_game_or_a_task():
    assert load_config("ppo_procgen").env.id == "StarpilotEasy-v0"
    assert load_config("ppo_procgen", "Bigfish,smoke").env.id == "BigfishEasy-v0"
    assert load_config("ppo_procgen", "coinrun").env.id == "CoinrunEasy-v0"
    assert load_config("ppo_procgen", "StarpilotHard-v0").env.id == "StarpilotHard-v0"
    with pytest.raises(ValueError, match="unknown variant 'Pong-v5' of ppo_procgen"):
        load_config("ppo_procgen", "Pong-v5")


def test_the_smoke_config_trains_to_its_end(smoke_run):
    with open(os.path.join(smoke_run, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    assert summary["global_step"] == 128 and summary["env_id"] == "StarpilotEasy-v0"
    with open(os.path.join(smoke_run, "config.json"), encoding="utf-8") as f:
        assert json.load(f)["env"]["kwargs"] == {"num_levels": 200, "start_level": 0}


def test_a_resume_with_a_changed_setting_is_refused_in_one_line(smoke_run):
    config = load_config("ppo_procgen", "smoke")
    config.log.tensorboard = False
    resume_config.check(config, smoke_run)  # Unchanged: accepted.
    config.env.kwargs.num_levels = 500
    message = one_line_error(resume_config.check, config, smoke_run)
    assert "env.kwargs.num_levels (stored 200, requested 500)" in message
    config.env.kwargs = ml_collections.ConfigDict({"num_levels": 200})
    message = one_line_error(resume_config.check, config, smoke_run)
    assert "env.kwargs.start_level (stored 0, requested: not set)" in message


def test_evaluation_plays_training_and_held_out_levels_side_by_side(smoke_run):
    result = evaluate.evaluate(smoke_run, episodes=2, max_steps=20, levels=("train", "test"))
    with open(os.path.join(smoke_run, "eval.json"), encoding="utf-8") as f:
        assert json.load(f) == json.loads(json.dumps(result))
    train_levels, test_levels = result["levels"]["train"], result["levels"]["test"]
    assert (train_levels["start_level"], train_levels["num_levels"]) == (0, 200)
    assert (test_levels["start_level"], test_levels["num_levels"]) == (200, 2**31 - 1 - 200)
    for fields in (train_levels, test_levels):
        assert fields["episodes"] == len(fields["returns"]) == 2
    assert result["generalization_gap"] == pytest.approx(
        train_levels["mean_return"] - test_levels["mean_return"]
    )
    assert result["mean_return"] == test_levels["mean_return"] and result["episodes"] == 4
    # The held-out set draws its levels above the training ones.
    held_out, _, _ = evaluate.level_env_config(
        env_section("StarpilotEasy-v0", num_levels=200), "test"
    )
    pool = envpool_pools.make_envs(held_out, 4, 0)
    _, info = pool.reset()
    pool.close()
    assert (info["level_seed"] >= 200).all()
    # Without --levels, eval.json is as it always was.
    plain = evaluate.evaluate(smoke_run, episodes=2, max_steps=5)
    assert "levels" not in plain and plain["episodes"] == 2 and len(plain["returns"]) == 2


def test_levels_a_run_does_not_have_are_refused_in_one_line():
    every_level = env_section("StarpilotEasy-v0")
    with pytest.raises(evaluate.EvaluationError, match="on every level .* none is held out"):
        evaluate.level_env_config(every_level, "test")
    with pytest.raises(evaluate.EvaluationError, match="CartPole-v1 is not a Procgen task"):
        evaluate.level_env_config(env_section("CartPole-v1"), "train")
    with pytest.raises(evaluate.EvaluationError, match="unknown level set 'tset'"):
        evaluate.evaluate("/nonexistent", levels=("tset",))


def test_the_set_up_installs_the_qt_packages_the_message_names():
    for path in ("README.md", ".ci/run"):
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            text = f.read()
        assert all(package in text for package in system_libraries.QT_APT_PACKAGES.split()), path
