"""What a researcher watches: console progress, TensorBoard tags, the bottleneck report,
a diverging run stopping itself, and the optional wandb sink."""

import dataclasses
import importlib.machinery
import io
import os
import re
import sys
import threading
import time
import types

import pytest

from sebulba import checkpoint, train
from sebulba.errors import ConfigError, TrainingDivergedError
from sebulba.mesh import DeviceLayout
from sebulba.runtime.metrics import diagnose_bottleneck
from sebulba.runtime.progress import ConsoleProgress
from tests import diverging_agent, minimal_agent
from tests.helpers import (
    agent_config,
    load_config,
    read_metrics,
    read_summary,
    tensorboard_scalars,
    tensorboard_texts,
)
from tests.test_cli import TEST_CONFIG, run_cli

PROGRESS_LINE = re.compile(
    r"^update (\d+)/6 step ([\d,]+)/768 \(\d+%\) [\d,]+ sps ETA (\d+:\d\d:\d\d|\?) "
    r"return (-|[\d.]+) versions actor=\d+ learner=\d+ waiting learner=\d+% actors=\d+%$"
)


def test_progress_is_plain_lines_when_not_a_terminal(tmp_path):
    result = run_cli(tmp_path / "run")  # stdout is a pipe, as in CI or under SLURM.
    assert result.returncode == 0, result.stderr[-2000:]
    assert "\r" not in result.stdout and "\x1b" not in result.stdout
    updates = [
        int(match.group(1))
        for match in map(PROGRESS_LINE.match, result.stdout.splitlines())
        if match
    ]
    assert updates == [1, 2, 3, 4, 5, 6]
    assert "throughput limited by:" in result.stdout.splitlines()[-1]


def test_progress_lines_are_rate_limited_by_time(tmp_path):
    # Every update writes a metrics line; the console gets the first and the last only.
    result = run_cli(tmp_path / "run", "--config.log.console_every_s=3600")
    assert result.returncode == 0, result.stderr[-2000:]
    updates = [
        int(match.group(1))
        for match in map(PROGRESS_LINE.match, result.stdout.splitlines())
        if match
    ]
    assert updates == [1, 6]
    assert [line["update"] for line in read_metrics(str(tmp_path / "run"))] == [1, 2, 3, 4, 5, 6]


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_terminal_gets_a_live_bar_that_lines_do_not_overwrite():
    terminal = _Terminal()
    progress = ConsoleProgress(total_steps=400, num_updates=4, mode="auto", stream=terminal)
    progress.on_update(1, 100)
    progress.write_line("update 1/4 ...")
    progress.on_update(2, 200)
    progress.close()
    out = terminal.getvalue()
    assert out.startswith("\r\x1b[K[######------------------]  25% update 1/4")
    # The bar is erased before a line is printed, then redrawn below it.
    assert "\r\x1b[Kupdate 1/4 ...\n\r\x1b[K[############------------]  50% update 2/4" in out
    assert out.endswith("\n")

    pipe = io.StringIO()
    progress = ConsoleProgress(total_steps=400, num_updates=4, mode="auto", stream=pipe)
    progress.on_update(1, 100)
    progress.write_line("update 1/4 ...")
    progress.close()
    assert pipe.getvalue() == "update 1/4 ...\n"


def test_tensorboard_tags_are_namespaced_with_env_steps_on_the_x_axis(tmp_path):
    workdir = str(tmp_path / "run")
    train.train(agent_config(minimal_agent, log__tensorboard=True), workdir)
    scalars = tensorboard_scalars(workdir)
    for tag in (
        "charts/episodic_return",
        "charts/episodic_length",
        "perf/sps",
        "pipeline/rollout_wait_s",
        "pipeline/params_wait_s",
        "pipeline/learner_wait_fraction",
        "pipeline/actor_policy_version",
        "losses/loss",
    ):
        assert tag in scalars, sorted(scalars)
    steps = [line["global_step"] for line in read_metrics(workdir)]
    assert [step for step, _ in scalars["losses/loss"]] == steps
    assert [v for _, v in scalars["pipeline/actor_policy_version"]] == [1, 1, 2, 3, 4, 5]


def test_the_hyperparameters_go_to_tensorboard_once_and_the_console_says_where_they_are(
    tmp_path, capsys
):
    workdir = str(tmp_path / "run")
    config = agent_config(minimal_agent, log__tensorboard=True, seed=3)
    train.train(config, workdir)
    texts = tensorboard_texts(workdir)
    ((tag, written),) = texts.items()
    assert tag.startswith("hyperparameters") and len(written) == 1
    step, table = written[0]
    rows = table.splitlines()
    assert step == 0 and rows[:2] == ["|key|value|", "|-|-|"]
    assert "|seed|3|" in rows and "|env.id|'CartPole-v1'|" in rows
    assert f"|env.num_envs|{config.env.num_envs}|" in rows
    said = capsys.readouterr().out.splitlines()
    assert said[0] == "sebulba: compiling the learner update ..."
    assert (
        "sebulba: tests.minimal_agent on CartPole-v1, seed 3: 6 updates of 128 env steps "
        f"(8 envs); every setting in {os.path.join(workdir, 'config.json')}"
    ) in said


def test_a_failing_tensorboard_write_stops_the_run_with_its_own_error(tmp_path, monkeypatch):
    # tensorboardX's own writer thread died on such an error and the learner then
    # blocked for good on its full queue of events.
    from tensorboardX.event_file_writer import EventsWriter

    write_event, written = EventsWriter.write_event, []

    def write_or_fail(self, event):
        written.append(event)
        if len(written) == 40:
            raise OSError(28, "No space left on device")
        return write_event(self, event)

    monkeypatch.setattr(EventsWriter, "write_event", write_or_fail)
    config = agent_config(minimal_agent, log__tensorboard=True)
    outcome = []

    def run():
        try:
            train.train(config, str(tmp_path / "run"))
        except BaseException as error:  # noqa: BLE001 - the test inspects it.
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=120)
    assert not thread.is_alive(), "the run hung after a failed TensorBoard write"
    assert len(outcome) == 1 and isinstance(outcome[0], OSError), outcome
    assert "No space left on device" in str(outcome[0])


@pytest.mark.parametrize(
    "delay, limited_by", [("learner_delay_s", "learner"), ("actor_delay_s", "actors")]
)
def test_the_bottleneck_report_names_the_slow_side(tmp_path, delay, limited_by):
    config = agent_config(minimal_agent, **{f"debug__{delay}": 0.3})
    train.train(config, str(tmp_path))
    bottleneck = read_summary(str(tmp_path))["bottleneck"]
    assert bottleneck["limited_by"] == limited_by, bottleneck
    waiting_side = "actor" if limited_by == "learner" else "learner"
    assert bottleneck[f"{waiting_side}_wait_fraction"] > 0.5
    if limited_by == "learner":  # The minimal agent has no epochs, minibatches or replay.
        assert bottleneck["detail"].endswith("; more learner devices would raise throughput")
    lines = read_metrics(str(tmp_path))
    assert all(0 <= line[f"{waiting_side}_wait_fraction"] <= 1 for line in lines)


@dataclasses.dataclass(frozen=True)
class _Device:
    platform: str
    id: int


def test_actors_sharing_an_accelerator_are_advised_to_act_on_the_cpus_not_to_add_threads():
    gpu, other_gpu, cpu = _Device("gpu", 0), _Device("gpu", 1), _Device("cpu", 0)

    def shares(actors, learners):
        return DeviceLayout(
            tuple(actors), tuple(learners), learner_mesh=None
        ).actors_share_an_accelerator

    assert shares([gpu], [gpu])
    assert not shares([gpu], [other_gpu])  # Actor devices of their own.
    assert not shares([cpu], [gpu])  # mesh.actor_platform="cpu".
    assert not shares([cpu], [cpu])  # A CPU run: its devices do not queue programs so.
    own = diagnose_bottleneck(8.0, 0.0, 10.0)
    shared = diagnose_bottleneck(8.0, 0.0, 10.0, actors_share_an_accelerator=True)
    assert own["limited_by"] == shared["limited_by"] == "actors"
    assert "more actor threads" in own["detail"] and "actor_platform" not in own["detail"]
    assert "more actor threads would queue behind its updates" in shared["detail"]
    assert "mesh.actor_platform=cpu" in shared["detail"]
    # A learner-bound run gets the same advice either way.
    assert diagnose_bottleneck(0.0, 8.0, 10.0, True) == diagnose_bottleneck(0.0, 8.0, 10.0)


def test_a_learner_bound_run_is_advised_to_lower_only_keys_its_agent_has():
    def advice(config_name):
        keys = load_config(config_name).agent.keys()
        return diagnose_bottleneck(0.0, 8.0, 10.0, agent_keys=keys)["detail"].split("; ")[-1]

    assert advice("ppo_cartpole") == (
        "more learner devices or a lower agent.update_epochs or agent.num_minibatches would "
        "raise throughput"
    )
    # Replay agents have no epochs or minibatches: their gradient steps and batch instead.
    for config_name in ("dqn_cartpole", "sac_mujoco"):
        assert advice(config_name) == (
            "more learner devices or a lower agent.replay_ratio or agent.batch_size would "
            "raise throughput"
        )


def test_actors_on_saturated_cpus_are_not_advised_to_add_threads():
    contend = "more actor threads or envs would contend for them"
    saturated = diagnose_bottleneck(8.0, 0.0, 10.0, cpu_s=19.0, cores=2)
    assert saturated["limited_by"] == "actors"
    assert saturated["host_cpu_fraction"] == pytest.approx(0.95)
    assert "this process kept its 2 CPU cores 95% busy" in saturated["detail"]
    assert contend in saturated["detail"] and "more actor threads, envs" not in saturated["detail"]
    # CPUs with time to spare: the actors wait on something else (latency, a shared GPU).
    spare = diagnose_bottleneck(8.0, 0.0, 10.0, cpu_s=10.0, cores=2)
    assert "50% busy" in spare["detail"] and contend not in spare["detail"]
    assert "more actor threads, envs or actor devices" in spare["detail"]
    # A learner-bound run keeps its advice; without the CPU time nothing is said of it.
    assert (
        "more learner devices" in diagnose_bottleneck(0.0, 8.0, 10.0, cpu_s=20.0, cores=2)["detail"]
    )
    assert "host_cpu_fraction" not in diagnose_bottleneck(8.0, 0.0, 10.0)


def test_gpu_runs_waiting_on_deterministic_kernels_are_told_what_turning_them_off_trades():
    trade = "debug.deterministic_gpu=False trades the same-seed-same-result guarantee"
    learner_bound = diagnose_bottleneck(0.0, 8.0, 10.0, deterministic_gpu_kernels=True)
    assert learner_bound["limited_by"] == "learner" and trade in learner_bound["detail"]
    # Actors on the learner's GPU wait for its update too; on devices of their own they
    # do not, and nor do actors of a CPU run (no GPU kernels: the flag is False there).
    shared = diagnose_bottleneck(8.0, 0.0, 10.0, True, deterministic_gpu_kernels=True)
    assert "mesh.actor_platform=cpu" in shared["detail"] and trade in shared["detail"]
    own = diagnose_bottleneck(8.0, 0.0, 10.0, False, deterministic_gpu_kernels=True)
    assert own == diagnose_bottleneck(8.0, 0.0, 10.0)
    assert trade not in diagnose_bottleneck(0.0, 8.0, 10.0)["detail"]


def test_a_non_finite_loss_stops_the_run_at_that_update(tmp_path):
    config = agent_config(diverging_agent, ckpt__every_updates=1)
    with pytest.raises(TrainingDivergedError, match="non-finite loss at update 3: loss=nan"):
        train.train(config, str(tmp_path))
    lines = read_metrics(str(tmp_path))
    assert [line["update"] for line in lines] == [1, 2, 3]
    assert lines[-1]["loss"] is None and lines[1]["loss"] is not None
    # The NaN parameters never reach a checkpoint.
    assert checkpoint.list_steps(os.path.join(tmp_path, "checkpoints")) == [1, 2]


def test_any_non_finite_metric_stops_the_run_as_a_loss_does(tmp_path):
    config = agent_config(diverging_agent, agent__diverging_metric="approx_kl")
    message = "non-finite metric at update 3: approx_kl=inf; the run stopped before saving it"
    with pytest.raises(TrainingDivergedError, match=message):
        train.train(config, str(tmp_path))
    lines = read_metrics(str(tmp_path))
    assert [line["update"] for line in lines] == [1, 2, 3]
    assert lines[-1]["approx_kl"] is None and lines[-1]["loss"] is not None


def test_a_diverging_run_exits_with_one_line(tmp_path):
    result = run_cli(tmp_path / "run", config=f"{TEST_CONFIG}:diverging")
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("sebulba: training diverged: non-finite loss at update")
    assert "Traceback" not in result.stderr


def test_wandb_is_refused_with_one_line_when_not_installed(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # Makes the import fail.
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    with pytest.raises(ConfigError, match="log.wandb is True but wandb is not installed"):
        train.train(agent_config(minimal_agent, log__wandb=True), str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_wandb_gets_the_metrics_lines_when_enabled(tmp_path, monkeypatch):
    calls = []

    class Run:
        def log(self, scalars, step):
            calls.append(("log", step, scalars))

        def finish(self):
            calls.append(("finish",))

    fake = types.ModuleType("wandb")
    fake.__spec__ = importlib.machinery.ModuleSpec("wandb", None)
    fake.init = lambda **kwargs: calls.append(("init", kwargs)) or Run()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    workdir = str(tmp_path / "run")
    train.train(agent_config(minimal_agent, log__wandb=True, log__wandb_project="p"), workdir)
    assert calls[0][0] == "init" and calls[0][1]["project"] == "p"
    assert calls[-1] == ("finish",)
    logged = [call for call in calls if call[0] == "log"]
    assert [step for _, step, _ in logged] == [x["global_step"] for x in read_metrics(workdir)]
    assert "charts/episodic_return" in logged[-1][2] and "losses/loss" in logged[-1][2]


def test_a_long_call_of_several_updates_names_how_many_it_may_hold():
    stream = io.StringIO()
    progress = ConsoleProgress(
        400, 6, mode="lines", stream=stream, stall_notice_s=0.2, updates_per_call=4
    )
    try:
        progress.on_update(4, 400)  # The first call ran updates 1-4; 5 and 6 are left.
        deadline = time.monotonic() + 10
        while "running for" not in stream.getvalue():
            assert time.monotonic() < deadline, stream.getvalue()
            time.sleep(0.05)
        assert (
            stream.getvalue()
            .splitlines()[0]
            .startswith("update 5/6 and up to 1 more in one call running for")
        )
    finally:
        progress.close()


def test_an_update_that_takes_long_says_so_while_it_runs():
    stream = io.StringIO()
    progress = ConsoleProgress(400, 4, mode="lines", stream=stream, stall_notice_s=0.2)
    try:
        deadline = time.monotonic() + 10
        while "running for" not in stream.getvalue():  # Update 1 has printed nothing yet.
            assert time.monotonic() < deadline, stream.getvalue()
            time.sleep(0.05)
        assert stream.getvalue().splitlines()[0] == "update 1/4 running for 0:00:00"
        progress.on_update(1, 100)
        stream.truncate(0)
        stream.seek(0)
        time.sleep(0.1)  # Update 2 has just begun: nothing to say yet.
        assert stream.getvalue() == ""
        while "running for" not in stream.getvalue():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert stream.getvalue().startswith("update 2/4 running for")
    finally:
        progress.close()
    stream.truncate(0)
    stream.seek(0)
    time.sleep(0.5)
    assert stream.getvalue() == ""  # Closed: no more notices.


def test_a_run_whose_update_is_slow_prints_a_line_before_the_update_ends(tmp_path):
    # Each update takes 3 s (an injected learner delay); lines are due every second, so
    # the console says which update is running before its progress line.
    result = run_cli(
        tmp_path / "run",
        "--config.debug.learner_delay_s=3",
        "--config.log.console_every_s=1",
        "--config.total_timesteps=256",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    notice = next(i for i, line in enumerate(lines) if re.match(r"update 2/2 running for", line))
    finished = next(i for i, line in enumerate(lines) if PROGRESS_LINE_2.match(line))
    assert notice < finished, lines


PROGRESS_LINE_2 = re.compile(r"^update 2/2 step ")


def test_a_long_compile_says_which_program_that_it_goes_on_and_how_long_it_took(monkeypatch):
    from sebulba.runtime import compile_progress

    monkeypatch.setattr(compile_progress, "HEARTBEAT_S", 0.2)
    monkeypatch.setattr(compile_progress, "XLA_ALARM_S", 0.5)
    monkeypatch.setattr(compile_progress, "_XLA_ALARM_EXPLAINED", threading.Event())
    stream = io.StringIO()
    with compile_progress.announced("the learner update", stream=stream):
        time.sleep(0.9)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "sebulba: compiling the learner update ..."
    beats = [line for line in lines if line.startswith("sebulba: still compiling the learner")]
    assert len(beats) >= 3, lines
    # XLA's own alarm, due at XLA_ALARM_S, is explained once, by the heartbeat before it.
    explained = [line for line in beats if "Very slow compile?" in line]
    assert len(explained) == 1 and "not an error" in explained[0], lines
    assert re.fullmatch(r"sebulba: compiled the learner update in 0:00:01", lines[-1]), lines

    stream = io.StringIO()
    with pytest.raises(RuntimeError, match="no memory"):
        with compile_progress.announced("the learner update", stream=stream):
            raise RuntimeError("no memory")
    assert stream.getvalue() == "sebulba: compiling the learner update ...\n"
    with compile_progress.announced("the learner update", show=False, stream=stream):
        pass  # Not process 0: nothing.
    assert stream.getvalue() == "sebulba: compiling the learner update ...\n"


def test_a_run_says_what_it_compiles_before_its_first_progress_line(tmp_path):
    result = run_cli(tmp_path / "run")
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    started = lines.index("sebulba: compiling the learner update ...")
    compiled = next(i for i, line in enumerate(lines) if line.startswith("sebulba: compiled the"))
    first = next(i for i, line in enumerate(lines) if PROGRESS_LINE.match(line))
    assert started < compiled < first, lines
    assert re.fullmatch(r"sebulba: compiled the learner update in \d:\d\d:\d\d", lines[compiled])


def test_a_long_update_is_noticed_less_often_as_it_goes_on_and_repeats_its_estimate():
    stream = io.StringIO()
    progress = ConsoleProgress(
        400, 4, mode="lines", stream=stream, stall_notice_s=0.1, update_estimate_s=660.0
    )
    try:
        time.sleep(1.3)
    finally:
        progress.close()
    notices = stream.getvalue().splitlines()
    # Every 0.1 s would be 13 lines; the gaps grow with the update's time instead.
    assert 3 <= len(notices) <= 8, notices
    assert notices[0] == (
        "update 1/4 running for 0:00:00 (estimated before training: at least 0:11:00 per "
        "update on this CPU)"
    )


def test_an_update_too_slow_for_the_cpu_is_estimated_before_training(tmp_path, monkeypatch, capsys):
    import jax
    import jax.numpy as jnp

    from sebulba.preflight import update_estimate

    # The floor: the compiled program's matrix FLOPs over the rate this CPU multiplies at.
    x = jnp.ones((256, 256), jnp.float32)
    compiled = jax.jit(lambda a, b: (a @ b) @ b).lower(x, x).compile()
    monkeypatch.setattr(update_estimate, "MIN_FLOPS", 0.0)
    found = update_estimate.estimate(compiled, jax.devices()[:1])
    assert found.flops == 2 * (2 * 256**3)
    assert found.seconds == found.flops / found.flops_per_s and found.flops_per_s > 1e8
    # A run whose updates are estimated slow says so, with what to change, before update 1.
    monkeypatch.setattr(update_estimate, "SLOW_UPDATE_S", 0.0)
    train.train(agent_config(minimal_agent), str(tmp_path / "run"))
    said = capsys.readouterr().out.splitlines()
    (line,) = [i for i, text in enumerate(said) if text.startswith("sebulba: one learner update")]
    assert re.fullmatch(
        r"sebulba: one learner update is [\d.]+ TFLOP and this CPU multiplies at [\d,]+ "
        r"GFLOP/s, so each update takes at least \d:\d\d:\d\d \(\d:\d\d:\d\d for 6 updates\); "
        r"128 env steps per update is sized for a GPU or TPU: .*",
        said[line],
    )
    first = next(i for i, text in enumerate(said) if PROGRESS_LINE.match(text))
    assert line < first
