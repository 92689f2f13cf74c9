"""An agent written outside the repository, as docs/agents.md teaches, plugs into sebulba.

tests/test_cli.py and tests/test_pipeline.py already train `tests.minimal_agent` by
dotted path through the CLI and `train.train`; here the agent is the worked example of
docs/agents.md itself, copied into a directory outside the repository, and selected by
overriding `agent.name` on the command line of a built-in config.
"""

import importlib
import os
import re
import sys

import jax
import numpy as np
import pytest

import sebulba
from sebulba import train
from sebulba.agents.api import Discrete
from sebulba.agents.networks import make_network
from tests.helpers import read_metrics, read_summary
from tests.test_cli import run_cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AGENT_METRICS = {"actor_loss", "critic_loss", "entropy"}


def documented_files() -> dict[str, str]:
    """The python blocks of docs/agents.md whose first line names their file."""
    with open(os.path.join(ROOT, "docs", "agents.md"), encoding="utf-8") as f:
        blocks = re.findall(r"```python\n# (\S+\.py)\n(.*?)```", f.read(), flags=re.DOTALL)
    return dict(blocks)


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """The documented `my_lab` package, in a directory on sys.path and PYTHONPATH."""
    files = documented_files()
    assert {"my_lab/a2c.py", "my_lab/a2c_cartpole.py", "my_lab/recurrent_a2c.py"} <= set(files)
    package = tmp_path / "lab"
    (package / "my_lab").mkdir(parents=True)
    (package / "my_lab" / "__init__.py").write_text("")
    for name, text in files.items():
        (package / name).write_text(text)
    monkeypatch.syspath_prepend(str(package))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(package), os.environ.get("PYTHONPATH", "")])
    )
    yield package
    for name in [m for m in sys.modules if m == "my_lab" or m.startswith("my_lab.")]:
        del sys.modules[name]


def test_documented_agent_trains_through_train_train(lab, tmp_path):
    config = importlib.import_module("my_lab.a2c_cartpole").get_config()
    config.total_timesteps = 8 * 16 * 6
    config.mesh.learner_device_ids = (1, 2)
    config.log.tensorboard = False
    setup = train.prepare(config)
    for pool in setup.envs_per_thread:
        pool.close()
    before = jax.device_get(setup.agent.policy_params(train.init_learner_state(setup)))
    state = train.train(config, str(tmp_path / "run"))
    summary = read_summary(str(tmp_path / "run"))
    assert summary["agent"] == "my_lab.a2c" and summary["updates"] == 6
    lines = read_metrics(str(tmp_path / "run"))
    assert [line["update"] for line in lines] == list(range(1, 7))
    assert all(AGENT_METRICS <= set(line) for line in lines)
    pairs = zip(jax.tree.leaves(before), jax.tree.leaves(state.params), strict=True)
    assert any(not np.allclose(a, b) for a, b in pairs)
    # The documented optional act_greedy serves sebulba.load_policy.
    policy = sebulba.load_policy(str(tmp_path / "run"), greedy=True)
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    logits, _ = make_network("mlp", Discrete(2)).apply(policy.params, obs)
    assert np.array_equal(policy(obs), np.argmax(logits, axis=-1))


def test_documented_recurrent_agent_trains_and_evaluates_with_its_carry(lab, tmp_path):
    config = importlib.import_module("my_lab.recurrent_a2c_memory").get_config()
    config.total_timesteps = 8 * 16 * 4
    config.mesh.learner_device_ids = (1, 2)
    config.log.tensorboard = False
    state = train.train(config, str(tmp_path / "run"))
    assert [line["update"] for line in read_metrics(str(tmp_path / "run"))] == [1, 2, 3, 4]
    assert "core" in state.params["params"]  # The LSTM is there and was trained.
    policy = sebulba.load_policy(str(tmp_path / "run"), greedy=True)
    obs = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    first = policy(obs)
    assert first.shape == (3,) and policy.env_spec.observation.shape == (2,)
    # The carry persists between calls and restarts on reset().
    policy.reset()
    assert np.array_equal(policy(obs), first)


def test_agent_name_on_the_command_line_swaps_the_agent(lab, tmp_path):
    # PPO's agent section defines every key the example's get_config() has.
    workdir = tmp_path / "run"
    result = run_cli(
        workdir,
        "--config.agent.name=my_lab.a2c",
        "--config.env.num_envs=8",
        "--config.total_timesteps=4096",
        "--config.log.every_updates=1",
        "--config.log.tensorboard=False",
        config=os.path.join(ROOT, "configs", "ppo_cartpole.py"),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = read_metrics(str(workdir))
    assert [line["update"] for line in lines] == [1, 2, 3, 4]  # 4096 / (8 envs x 128 steps).
    for line in lines:
        assert AGENT_METRICS <= set(line) and "approx_kl" not in line  # A2C ran, not PPO.
    assert read_summary(str(workdir))["agent"] == "my_lab.a2c"


def test_an_agent_section_that_lacks_the_agents_keys_fails_in_one_line(tmp_path):
    workdir = tmp_path / "run"
    result = run_cli(
        workdir,
        "--config.agent.name=impala",
        config=os.path.join(ROOT, "configs", "ppo_cartpole.py"),
    )
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "this config's agent section holds ppo's hyperparameters" in lines[0]
    assert "agent.clip_pg_rho_threshold" in lines[0] and "agent.vtrace_lambda" in lines[0]
    # Points to the files that hold IMPALA's section, not to writing Python.
    assert "configs/impala_cartpole.py" in lines[0] and "get_config()" not in lines[0]
    assert not workdir.exists()
