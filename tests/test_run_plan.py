"""The one validation pass: every entry point refuses a bad field with the line `plan` gives.

`sebulba.config.run_plan.plan` is the only place a config is checked; each command
reports its `ConfigError` in its own frame (`sebulba: config error: ...`, a sweep's run,
`load_policy`'s config.json), before any env is stepped or program compiled.
"""

import json
import os

import jax.numpy as jnp
import pytest

import sebulba
from sebulba import check, evaluate, policy, sweep, train
from sebulba import checkpoint as ckpt_lib
from sebulba.anakin import seeds
from sebulba.config import run_plan
from sebulba.errors import ConfigError
from tests.helpers import ROOT, load_config, run_python
from tests.test_cli import cli_env

CONFIG = "configs/ppo_cartpole.py"

# One bad field per step of the pass: sizes, a built-in agent's ranges, the env id, the
# network against the observation.
BAD_FIELDS = {
    "sizes": ("env.num_envs", 0),
    "agent ranges": ("agent.learning_rate", -1.0),
    "env id": ("env.id", "CartPol-v1"),
    "network": ("agent.network", "nature_cnn"),
}
# What `sebulba.sweep` checks before any run: what needs neither JAX nor envpool.
VALUES_ONLY = ("sizes", "agent ranges")


def bad_config(case):
    key, value = BAD_FIELDS[case]
    config = load_config("ppo_cartpole")
    section, name = key.split(".")
    config[section][name] = value
    return config


def planned_error(case) -> str:
    with pytest.raises(ConfigError) as error:
        run_plan.plan(bad_config(case))
    return str(error.value)


def workdir_with_checkpoint(workdir, config):
    """A workdir as a run leaves it, `config` as its config.json: `load_policy` checks the
    config before it reads the checkpoint, so any state stands in for the run's."""
    workdir.mkdir()
    (workdir / "config.json").write_text(json.dumps(config.to_dict()))
    saver = ckpt_lib.Checkpointer(str(workdir), max_to_keep=1, async_save=False)
    saver.save(1, {"params": jnp.zeros(2)}, None, {"num_processes": 1})
    saver.close()
    return workdir


def error_through(entry_point, case, tmp_path, capsys) -> str:
    """The one line the entry point reports for the bad field of `case`."""
    key, value = BAD_FIELDS[case]
    workdir = tmp_path / "run"
    if entry_point == "main":
        result = run_python(
            "-m",
            "sebulba.main",
            f"--config={CONFIG}",
            f"--workdir={workdir}",
            f"--config.{key}={value}",
            env=cli_env(devices=1),
        )
        assert result.returncode == 2
        assert not workdir.exists()
        return result.stderr
    if entry_point == "sweep":
        argv = [f"--config={CONFIG}", f"--workdir={workdir}", "--set", f"{key}={value}"]
        argv.append("--dry-run")  # Were the check to pass, nothing would run.
        assert sweep.main(argv) == 2
        assert not workdir.exists()
        return capsys.readouterr().err
    if entry_point in ("load_policy", "evaluate"):
        workdir_with_checkpoint(workdir, bad_config(case))
        refusal = policy.PolicyError if entry_point == "load_policy" else evaluate.EvaluationError
        run = policy.load_policy if entry_point == "load_policy" else evaluate.evaluate
        with pytest.raises(refusal) as error:
            run(str(workdir))
        assert not (workdir / "eval.json").exists()
        return str(error.value)
    calls = {
        "train": lambda config: train.train(config, str(workdir)),
        "check": lambda config: check.check(config, "h100:4"),
        "--seeds": lambda config: seeds.train_seeds(config, str(workdir), (1, 2)),
    }
    with pytest.raises(ConfigError) as error:
        calls[entry_point](bad_config(case))
    assert not workdir.exists()
    return str(error.value)


@pytest.mark.parametrize("case", list(BAD_FIELDS))
@pytest.mark.parametrize(
    "entry_point", ["main", "train", "check", "--seeds", "evaluate", "load_policy", "sweep"]
)
def test_a_bad_field_is_one_line_naming_it_through_every_entry_point(
    entry_point, case, tmp_path, capsys, monkeypatch
):
    if entry_point == "sweep" and case not in VALUES_ONLY:
        pytest.skip("a sweep leaves what needs JAX or envpool to each run")
    monkeypatch.chdir(ROOT)  # The commands' relative config path.
    expected = planned_error(case)
    assert "\n" not in expected and BAD_FIELDS[case][0] in expected
    message = error_through(entry_point, case, tmp_path, capsys)
    assert message.count("\n") <= 1 and "Traceback" not in message, message
    frames = {
        "main": "sebulba: config error: ",
        "sweep": "sebulba.sweep: error: run seed=1: ",
        "load_policy": "cannot rebuild the agent from config.json: ",
        "evaluate": "cannot rebuild the agent from config.json: ",
    }
    assert message.strip() == frames.get(entry_point, "") + expected


def test_plan_is_public_api():
    assert sebulba.plan is run_plan.plan and sebulba.RunPlan is run_plan.RunPlan


def test_the_values_alone_are_checked_without_devices_or_envs():
    config = bad_config("sizes")
    with pytest.raises(ConfigError, match="env.num_envs must be a positive integer, got 0"):
        run_plan.plan(config, num_processes=1, values_only=True)
    # The env id needs envpool's registry, which the values alone do not read.
    checked = run_plan.plan(bad_config("env id"), num_processes=2, values_only=True)
    assert checked.sizes.num_processes == 2 and checked.agent is None


def test_a_joint_run_whose_processes_are_unknown_leaves_the_env_per_task_rule_to_the_run():
    config = load_config("ppo_cartpole")
    config.env.ids = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0")
    config.env.num_envs = 2
    config.total_timesteps = 10**6
    with pytest.raises(ConfigError, match="env.ids names 3 tasks but the run has 2 envs"):
        run_plan.plan(config, num_processes=1, values_only=True)
    run_plan.plan(config, num_processes=None, values_only=True)  # A SLURM sweep's run.
    assert run_plan.plan(config, num_processes=2, values_only=True).sizes.num_envs == 4


def test_the_sweep_checks_every_run_before_starting_any(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    workdir = tmp_path / "sweep"
    argv = [f"--config={CONFIG}", f"--workdir={workdir}", "--seeds=1,2"]
    # env.num_envs 3 does not split over two learner devices; 4 does.
    argv += ["--set", "mesh.learner_device_ids=(0,1)", "--set", "env.num_envs=4,3"]
    assert sweep.main([*argv, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sebulba.sweep: error: run env.num_envs=3/seed=1: env.num_envs (3)")
    # Every seed too: envpool seeds are C ints.
    assert sweep.main([*argv[:2], "--seeds=1,-1", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "run seed=-1: seed must be an integer in [0, 1073741824], got -1" in err
    assert not os.path.exists(workdir)


def test_seeds_refuse_an_envpool_run_before_building_its_envs(tmp_path, monkeypatch):
    def no_envs(*args, **kwargs):
        raise AssertionError("envs were built before the refusal")

    monkeypatch.setattr(train, "make_env_pools", no_envs)
    with pytest.raises(ConfigError, match=r"--seeds .* needs a JAX env .*'CartPole-v1' is an env"):
        seeds.train_seeds(load_config("ppo_cartpole"), str(tmp_path / "runs"), (1, 2))
    assert not (tmp_path / "runs").exists()
