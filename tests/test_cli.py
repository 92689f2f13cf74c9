"""The command line: a good run leaves the documented workdir; bad input fails in one line."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST_CONFIG = os.path.join(ROOT, "tests", "configs", "minimal_cartpole.py")


def run_cli(workdir, *overrides, config=TEST_CONFIG, devices=2, timeout=120):
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "sebulba.main",
            f"--config={config}",
            f"--workdir={workdir}",
            *overrides,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )


def test_run_leaves_the_documented_workdir(tmp_path):
    workdir = tmp_path / "run"
    result = run_cli(
        workdir,
        "--config.seed=2",
        "--config.log.tensorboard=True",
        "--config.mesh.learner_device_ids=(0,1)",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    config = json.loads((workdir / "config.json").read_text())
    assert config["seed"] == 2 and config["mesh"]["learner_device_ids"] == [0, 1]
    lines = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert [line["update"] for line in lines] == list(range(1, 7))
    required = {
        "global_step",
        "update",
        "sps",
        "episodic_return",
        "actor_policy_version",
        "learner_policy_version",
        "rollout_wait_s",
        "params_wait_s",
        "loss",
    }
    for line in lines:
        assert required <= set(line)
    assert lines[-1]["global_step"] == 6 * 8 * 16
    assert [line["learner_policy_version"] - line["actor_policy_version"] for line in lines] == [
        1,
        2,
        2,
        2,
        2,
        2,
    ]
    summary = json.loads((workdir / "summary.json").read_text())
    for key in (
        "global_step",
        "updates",
        "wall_time_s",
        "sps",
        "mean_return",
        "params_checksum",
        "policy_lag",
        "layout",
        "jax_version",
    ):
        assert key in summary
    assert summary["updates"] == 6 and len(summary["params_checksum"]) == 64
    assert summary["mean_return"] > 5
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(workdir))
    # Progress is visible on the console.
    assert "update 6/6" in result.stdout


@pytest.mark.parametrize(
    "override, field",
    [
        ("--config.sede=3", "sede"),
        ("--config.env.num_envs=7", "env.num_envs"),
        ("--config.env.id=Pitfall-v99", "env.id"),
        ("--config.agent.name=no_such_agent", "agent.name"),
        ("--config.agent.name=tests.no_such_module", "agent.name"),
        ("--config.mesh.learner_device_ids=(5,)", "mesh.learner_device_ids"),
        ("--config.mesh.actor_device_ids=()", "mesh.actor_device_ids"),
        ("--config.total_timesteps=10", "total_timesteps"),
        ("--config.pipeline.policy_lag=2", "pipeline.policy_lag"),
        ("--config.pipeline.num_actor_threads=0", "pipeline.num_actor_threads"),
        ("--config.env.num_envs=banana", "env.num_envs"),
        ("--config.log.console=sideways", "log.console"),
        ("--config.env.repeat_action_probability=1.5", "env.repeat_action_probability"),
    ],
)
def test_bad_config_fails_in_one_line_before_any_work(tmp_path, override, field):
    workdir = tmp_path / "run"
    extra = ["--config.mesh.learner_device_ids=(0,1)"] if field == "env.num_envs" else []
    result = run_cli(workdir, override, *extra)
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert field in lines[0]
    assert "Traceback" not in result.stderr
    assert not workdir.exists()


def test_a_url_workdir_is_refused_in_one_line():
    # Outputs are written with ordinary file I/O: a gs:// "path" would silently become a
    # local directory named "gs:".
    result = run_cli("gs://my-bucket/run")
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("sebulba: config error: workdir gs://my-bucket/run: URLs are not")
    assert not os.path.exists(os.path.join(ROOT, "gs:"))


@pytest.mark.parametrize(
    "override, expected",
    [
        ("--config.agent.learning_rate=-1", "agent.learning_rate must be a number > 0, got -1.0"),
        (
            "--config.env.id=Breakout-v5",
            "agent.network 'mlp' takes a flat feature vector [D], but env.id 'Breakout-v5' "
            "observes uint8 [4, 84, 84]",
        ),
        (
            "--config.env.id=HalfCheetah-v9",
            "env.id 'HalfCheetah-v9' is not an envpool task: did you mean 'HalfCheetah-v5' or "
            "'HalfCheetah-v4'",
        ),
    ],
)
def test_impossible_hyperparameters_and_networks_are_refused_in_one_line(
    tmp_path, override, expected
):
    workdir = tmp_path / "run"
    result = run_cli(workdir, override, config=os.path.join(ROOT, "configs", "ppo_cartpole.py"))
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert expected in lines[0]
    assert not workdir.exists()
