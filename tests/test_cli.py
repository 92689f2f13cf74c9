"""The command line: a good run leaves the documented workdir; bad input fails in one line."""

import json
import os
import signal
import subprocess
import time

import pytest

from tests.helpers import popen_python, process_env, run_python, workdir_held_by_another_process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST_CONFIG = os.path.join(ROOT, "tests", "configs", "minimal_cartpole.py")


def cli_env(devices=2):
    """The environment of a `python -m sebulba.main` subprocess: `devices` virtual CPUs."""
    return process_env(devices)


def run_cli(workdir, *overrides, config=TEST_CONFIG, devices=2, timeout=120):
    flags = [f"--config={config}", f"--workdir={workdir}", *overrides]
    return run_python("-m", "sebulba.main", *flags, env=cli_env(devices), timeout=timeout)


def test_run_leaves_the_documented_workdir(tmp_path):
    workdir = tmp_path / "run"
    result = run_cli(
        workdir,
        "--config.seed=2",
        "--config.log.tensorboard=True",
        "--config.mesh.learner_device_ids=(0,1)",
        "--config.total_timesteps=800",  # 6 updates of 8 envs x 16 steps, 32 steps over.
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (
        "total_timesteps 800 is 6 updates of 128 env steps: the run trains 768 steps "
        "(the remaining 32 make no whole update)"
    ) in result.stderr
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
        ("--config.pipeline.policy_lag=17", "pipeline.policy_lag"),
        ("--config.pipeline.num_actor_threads=0", "pipeline.num_actor_threads"),
        ("--config.env.num_envs=banana", "env.num_envs"),
        ("--config.log.console=sideways", "log.console"),
        ("--config.env.repeat_action_probability=1.5", "env.repeat_action_probability"),
        ("--config.env.num_threads=100000", "env.num_threads"),  # envpool aborted on it.
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
            "agent.network 'mlp' takes one array of any shape, flattened (no uint8 image or "
            "discrete entry), but env.id 'Breakout-v5' observes uint8 [4, 84, 84]",
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


def _one_stderr_line(result):
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    return lines[0]


def _unwritable_dir():
    """A directory no process can create files in, not even root's: sysfs."""
    if not os.path.isdir("/sys/kernel"):
        pytest.skip("needs Linux's sysfs for a directory that even root cannot write")
    return "/sys/kernel"


@pytest.mark.parametrize("case", ["is a file", "below a file", "not writable"])
def test_an_unusable_workdir_fails_in_one_line_before_any_work(tmp_path, case):
    blocker = tmp_path / "notes.txt"
    blocker.write_text("not a directory\n")
    workdir = {
        "is a file": str(blocker),
        "below a file": str(blocker / "run"),
        "not writable": os.path.join(_unwritable_dir(), "sebulba-run"),
    }[case]
    result = run_cli(workdir)
    assert result.returncode == 2
    line = _one_stderr_line(result)
    assert line.startswith(f"sebulba: config error: workdir {workdir}")
    expected = {"is a file": "is a file", "below a file": "lies below", "not writable": "writable"}
    assert expected[case] in line
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]
    assert blocker.read_text() == "not a directory\n"


def test_train_checks_the_workdir_before_building_anything(tmp_path, monkeypatch):
    from sebulba import train
    from sebulba.errors import ConfigError
    from tests import minimal_agent
    from tests.helpers import agent_config

    def must_not_run(config):
        raise AssertionError("train.prepare ran before the workdir was checked")

    monkeypatch.setattr(train, "prepare", must_not_run)
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="lies below"):
        train.train(agent_config(minimal_agent), str(tmp_path / "file" / "run"))


def test_a_refused_run_leaves_no_trace_next_to_its_workdir(tmp_path):
    odd = ["--config.env.num_envs=7", "--config.mesh.learner_device_ids=(0,1)"]
    result = run_cli(tmp_path / "run", *odd)
    assert result.returncode == 2, result.stderr[-2000:]
    assert os.listdir(tmp_path) == []  # Neither the workdir nor a writability probe.


def test_a_second_run_on_a_workdir_in_use_is_refused_in_one_line(tmp_path):
    workdir = tmp_path / "run"
    with workdir_held_by_another_process(workdir) as pid:
        result = run_cli(workdir)
    assert result.returncode == 2, result.stderr[-2000:]
    line = _one_stderr_line(result)
    assert line.startswith(
        f"sebulba: config error: workdir {workdir} is in use by another run: pid {pid} "
    ), line
    assert "wait for it to end, stop it, or choose another --workdir" in line
    assert os.listdir(workdir) == [".sebulba-lock"]  # The holder's; nothing of this run.


def test_ctrl_c_saves_a_checkpoint_and_exits_130(tmp_path):
    workdir = tmp_path / "run"
    env = cli_env()
    process = popen_python(
        "-m",
        "sebulba.main",
        f"--config={TEST_CONFIG}",
        f"--workdir={workdir}",
        "--config.total_timesteps=1536",
        "--config.debug.learner_delay_s=0.25",  # Time to interrupt mid-run.
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    metrics = workdir / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.exists() and metrics.read_text().count("\n") >= 1):
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err[-2000:]
    assert "stopped by SIGINT after update" in out
    assert os.listdir(workdir / "checkpoints")
    assert not (workdir / "summary.json").exists()


@pytest.mark.parametrize(
    "flag, expected",
    [
        (
            "--config.total_timesteps=abc",
            "--config.total_timesteps=abc: expected an integer, got 'abc'",
        ),
        (
            "--config.log.tensorboard=maybe",
            "--config.log.tensorboard=maybe: expected true or false, got 'maybe'",
        ),
        (
            "--config.agent=ppo",
            "--config.agent=ppo: agent is a section of the config, not a value; set its "
            "fields one by one, e.g. --config.agent.name=VALUE",
        ),
        ("--total_timesteps=1000", "did you mean --config.total_timesteps?"),
        ("--num_envs=4", "did you mean --config.env.num_envs?"),
        ("--process_id=one", "--process_id=one: expected an integer, got 'one'"),
        ("--watchdog_timeout_s=nan", "--watchdog_timeout_s must be a number >= 0, got nan"),
        (
            "--shared_workdir_timeout_s=0",
            "--shared_workdir_timeout_s must be a number > 0, got 0.0",
        ),
    ],
)
def test_flag_mistakes_are_explained_in_the_users_words(tmp_path, flag, expected):
    result = run_cli(tmp_path / "run", flag)
    assert result.returncode == 2
    line = _one_stderr_line(result)
    assert expected in line
    assert "invalid literal" not in line and "Unknown command line flag" not in line


@pytest.mark.parametrize(
    "flags_, expected",
    [
        (["--workdir=x", "--checkpoint=abc"], "--checkpoint=abc: expected an integer, got 'abc'"),
        (["--episodes=10"], "--workdir is required"),
        (["--workdir=x", "extra"], "unexpected arguments: extra"),
    ],
)
def test_evaluate_flag_errors_are_one_line(tmp_path, flags_, expected):
    result = run_python("-m", "sebulba.evaluate", *flags_, env=process_env(), cwd=tmp_path)
    assert result.returncode == 2
    assert _one_stderr_line(result) == f"sebulba.evaluate: {expected}"


@pytest.mark.parametrize("content", ["{bad", "[]", '{"agent": {}}'])
def test_evaluate_of_a_damaged_config_json_is_one_line(tmp_path, content):
    (tmp_path / "config.json").write_text(content)
    result = run_python("-m", "sebulba.evaluate", f"--workdir={tmp_path}", env=process_env())
    assert result.returncode != 0
    line = _one_stderr_line(result)
    assert line.startswith(f"sebulba.evaluate: {tmp_path / 'config.json'} is not a run's config")


def _catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (Python installs none by itself)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


def test_ctrl_c_during_start_up_stops_at_once_without_a_checkpoint_and_exits_130(tmp_path):
    if not os.path.exists("/proc/self/status"):
        pytest.skip("needs Linux's /proc to see when the stop handler is installed")
    workdir = tmp_path / "run"
    env = cli_env()
    process = popen_python(
        "-m",
        "sebulba.main",
        f"--config={TEST_CONFIG}",
        f"--workdir={workdir}",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 60
    while not _catches_sigterm(process.pid):  # The first moment a signal is handled.
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
        time.sleep(0.005)
    process.send_signal(signal.SIGINT)  # While JAX is still being imported or started.
    # Start-up (importing JAX, envs, compiling) takes longer than this on 2 cores; the
    # old behaviour ran through it and the first update, then saved a checkpoint.
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err[-2000:]
    assert "SIGINT received before the first update finished: stopping at once" in err
    assert "stopped by SIGINT after update" not in out
    assert not (workdir / "checkpoints").exists() or not os.listdir(workdir / "checkpoints")
    # Nothing was saved, so the same command starts the run from the beginning.


def test_help_lists_the_config_flag_and_keeps_the_usage_lines():
    result = run_python("-m", "sebulba.main", "--help", env=cli_env(), timeout=60)
    text = result.stdout  # absl's --help exits 1, as for every absl program.
    assert "  --config: The run's config: a file of configs/ that defines get_config(arg)," in text
    # The docstring's continued command is two lines, as written.
    assert (
        "--config=configs/ppo_atari.py:smoke --workdir=/tmp/x \\\n        --config.seed=2" in text
    )
    assert "  --[no]print_config: Print the resolved config" in text


def test_print_config_shows_the_resolved_config_and_trains_nothing(tmp_path):
    workdir = tmp_path / "run"
    result = run_cli(workdir, "--print_config", "--config.seed=7", "--config.agent.num_steps=8")
    assert result.returncode == 0, result.stderr[-2000:]
    config = json.loads(result.stdout)
    assert config["seed"] == 7 and config["agent"]["num_steps"] == 8  # The overrides...
    assert config["log"]["console"] == "auto"  # ...and base_config's defaults.
    assert not workdir.exists() and not os.listdir(tmp_path)
    # No --workdir is needed to look; a run still needs one.
    flags = ["-m", "sebulba.main", f"--config={TEST_CONFIG}"]
    looked = run_python(*flags, "--print_config", env=cli_env(), timeout=60)
    assert looked.returncode == 0 and json.loads(looked.stdout)["seed"] == 1  # The default.
    refused = run_python(*flags, env=cli_env(), timeout=60)
    assert refused.returncode == 2
    assert refused.stderr.strip() == "sebulba: config error: --workdir is required"
