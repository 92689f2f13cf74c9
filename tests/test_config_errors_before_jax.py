"""A bad config fails before JAX or envpool is imported (in a fraction of a second)."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs `python -m sebulba.main ARGS` with JAX and envpool made unimportable: any import
# of either fails the run with a traceback instead of the one-line config error.
_BLOCKED_MAIN = """
import importlib.abc, runpy, sys

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("jax", "jaxlib", "envpool"):
            raise ImportError(f"{name} imported before the config was checked")
        return None

sys.meta_path.insert(0, Blocked())
sys.argv = ["sebulba.main", *sys.argv[1:]]
runpy.run_module("sebulba.main", run_name="__main__", alter_sys=True)
"""


def run_blocked(*args):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run(
        [sys.executable, "-c", _BLOCKED_MAIN, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize(
    "config, override, message",
    [
        ("ppo_cartpole.py", "env.num_envs=-1", "env.num_envs must be a positive integer, got -1"),
        (
            "ppo_cartpole.py",
            "total_timesteps=10",
            "total_timesteps (10) is smaller than one update",
        ),
        ("ppo_atari.py:smoke", "seed=-3", "seed must be an integer in [0, 1073741824], got -3"),
        ("impala_cartpole.py", "log.console=tty", "log.console 'tty' must be one of"),
        ("ppo_mujoco.py", "ckpt.max_to_keep=0", "ckpt.max_to_keep must be an integer >= 1"),
        ("ppo_cartpole.py", "agent.learning_rate=-1", "agent.learning_rate must be a number > 0"),
        ("impala_atari.py", "agent.rmsprop_decay=1.0", "agent.rmsprop_decay must be a number in"),
        (
            "pqn_cartpole.py",
            "agent.exploration_fraction=0.0",
            "agent.exploration_fraction must be a number in (0, 1]",
        ),
        ("ppo_joint.py:smoke", 'env.ids=("A-v0","A-v0")', "env.ids names 'A-v0' twice"),
        ("ppo_atari.py:smoke", "env.frame_stack=8", "env.frame_stack must be an integer in [1, 4]"),
        # Each built-in agent's size rules (sebulba.agents.size_rules).
        (
            "ppo_cartpole.py",
            "agent.gradient_accumulation_steps=3",
            "agent.gradient_accumulation_steps (3) must divide the time steps of a minibatch",
        ),
        (
            "impala_cartpole.py",
            "agent.num_minibatches=3",
            "env.num_envs per learner device (env.num_envs / len(mesh.learner_device_ids)) "
            "(64) must be a positive multiple of agent.num_minibatches (3)",
        ),
        ("pqn_cartpole.py", "agent.num_minibatches=3", "agent.num_steps (64) must be a pos"),
        ("dqn_cartpole.py", "agent.batch_size=7", "agent.batch_size (7) must be a positive mul"),
        (
            "dqn_cartpole.py",
            "agent.buffer_size=20000000000",
            "agent.buffer_size (20,000,000,000) holds 2,500,000,000 steps per env, more than "
            "the 2,147,483,647 (int32)",
        ),
        (
            "dqn_cartpole.py",
            "agent.batch_size=20000",
            "agent.batch_size (20,000) must be at most agent.buffer_size (10,000)",
        ),
        (
            "sac_mujoco.py",
            "agent.learning_starts=10000000",
            "agent.learning_starts (10000000) is more than the run's",
        ),
        # Durations: NaN and infinity would fail mid-run, in the clocks that wait on them.
        ("ppo_cartpole.py", "debug.actor_delay_s=nan", "debug.actor_delay_s must be a number"),
        ("ppo_cartpole.py", "debug.learner_delay_s=inf", "debug.learner_delay_s must be a num"),
        ("impala_cartpole.py", "log.console_every_s=nan", "log.console_every_s must be a number"),
    ],
)
def test_a_config_error_is_one_line_before_jax_and_envpool(tmp_path, config, override, message):
    workdir = tmp_path / "run"
    result = run_blocked(
        f"--config=configs/{config}", f"--workdir={workdir}", f"--config.{override}"
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.startswith(f"sebulba: config error: {message}"), result.stderr
    assert result.stderr.count("\n") == 1
    assert not workdir.exists()


def test_an_empty_workdir_is_one_line_before_jax():
    # As from `--workdir=$WORKDIR` with the variable unset.
    result = run_blocked("--config=configs/ppo_cartpole.py:smoke", "--workdir=")
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr == "sebulba: config error: workdir is empty: give the run's directory\n"


def test_a_valid_config_does_reach_jax(tmp_path):
    # The check above can fail: a config without errors goes on to import JAX.
    result = run_blocked("--config=configs/ppo_cartpole.py:smoke", f"--workdir={tmp_path / 'run'}")
    assert result.returncode != 0
    assert "imported before the config was checked" in result.stderr
