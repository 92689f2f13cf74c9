"""Checkpoints: preemption and resume, exact lag schedule, layouts, crash safety."""

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time

import jax
import numpy as np
import pytest

from sebulba import checkpoint, random_streams, train
from sebulba.agents import ppo
from sebulba.errors import ConfigError
from sebulba.experiments.sweep_plan import load_config
from sebulba.runtime.metrics import MetricsLogger
from tests import minimal_agent, probe_agent
from tests.helpers import (
    agent_config,
    assert_rollouts_came_from_the_lagged_version,
    normalized_continuous_overrides,
    popen_python,
    process_env,
    read_metrics,
    read_summary,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST_CONFIG = os.path.join(ROOT, "tests", "configs", "minimal_cartpole.py")
STEPS_PER_UPDATE = 8 * 16  # minimal_cartpole: 8 envs x 16 steps.

# Runs sebulba.main with orbax's final commit of every save after the first hanging
# (after writing a marker file), so the test can SIGKILL it in the middle of a save.
_HANG_IN_SAVE = """
import asyncio, os, runpy, sys
from orbax.checkpoint._src.path import atomicity
original = atomicity.AtomicRenameTemporaryPath.finalize
async def finalize(self):
    if self.get_final().name.isdigit() and self.get_final().name != "2":
        with open(os.environ["SEBULBA_TEST_MARKER"], "w") as f:
            f.write(str(self.get()))
        await asyncio.sleep(3600)
    return await original(self)
atomicity.AtomicRenameTemporaryPath.finalize = finalize
sys.argv = ["sebulba.main", *sys.argv[1:]]
runpy.run_module("sebulba.main", run_name="__main__")
"""


def _cli(workdir, *overrides, script=None, env_extra=None):
    """Starts `python -m sebulba.main` (or `script` with the same flags) on 2 devices."""
    env = process_env(devices=2)
    env.update(env_extra or {})
    program = ["-c", script] if script else ["-m", "sebulba.main"]
    args = [f"--config={TEST_CONFIG}", f"--workdir={workdir}", *overrides]
    return popen_python(
        *program, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def _cli_processes(workdir, num_processes, *overrides):
    """Starts one multi-process run of `sebulba.main`, one device pair per process."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    distributed = [f"--coordinator_address=127.0.0.1:{port}", f"--num_processes={num_processes}"]
    return [
        _cli(workdir, *overrides, *distributed, f"--process_id={i}") for i in range(num_processes)
    ]


def _wait_for(predicate, timeout=90.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _progress_lines(out):
    """The console's progress lines: not the `sebulba: ...` lines around them (what
    compiles, what trains, how it ended)."""
    return [line for line in out.splitlines() if not line.startswith("sebulba: ")]


def _metric_lines(workdir):
    path = os.path.join(workdir, "metrics.jsonl")
    return read_metrics(workdir) if os.path.exists(path) else []


def _assert_continuous(lines, num_updates):
    assert [line["update"] for line in lines] == list(range(1, num_updates + 1))
    assert [line["global_step"] for line in lines] == [
        k * STEPS_PER_UPDATE for k in range(1, num_updates + 1)
    ]


def test_sigterm_saves_and_the_same_command_resumes_to_completion(tmp_path):
    workdir = str(tmp_path / "run")
    flags = ["--config.total_timesteps=1536", "--config.ckpt.every_updates=4"]
    slow = ["--config.debug.learner_delay_s=0.25"]  # Time to signal mid-run.
    first = _cli(workdir, *flags, *slow)
    _wait_for(lambda: len(_metric_lines(workdir)) >= 2)
    first.send_signal(signal.SIGTERM)
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err[-2000:]
    stopped = _metric_lines(workdir)[-1]["update"]
    assert 2 <= stopped < 12
    saved = os.path.join(workdir, "checkpoints", str(stopped))
    assert f"stopped by SIGTERM after update {stopped}/12" in out
    assert f"checkpoint saved to {saved}" in out
    assert checkpoint.list_steps(os.path.join(workdir, "checkpoints"))[-1] == stopped
    assert not os.path.exists(os.path.join(workdir, "summary.json"))

    second = _cli(workdir, *flags, *slow)
    out, err = second.communicate(timeout=90)
    assert second.returncode == 0, err[-2000:]
    assert _progress_lines(out)[0].startswith(f"update {stopped + 1}/12 ")
    _assert_continuous(read_metrics(workdir), 12)
    summary = read_summary(workdir)
    assert summary["updates"] == 12 and summary["global_step"] == 12 * STEPS_PER_UPDATE


def test_a_signal_to_one_process_stops_every_process_after_the_same_update(tmp_path):
    workdir = str(tmp_path / "run")
    flags = [
        "--config.mesh.actor_device_ids=(0,)",
        "--config.mesh.learner_device_ids=(1,)",
        "--config.env.num_envs=4",  # 2 processes x 4 envs x 16 steps = 128 per update.
        "--config.total_timesteps=1536",
        "--config.ckpt.every_updates=5",
    ]
    slow = ["--config.debug.learner_delay_s=0.25"]
    processes = _cli_processes(workdir, 2, *flags, *slow)
    _wait_for(lambda: len(_metric_lines(workdir)) >= 2)
    processes[1].send_signal(signal.SIGTERM)  # Not the process that writes metrics.
    outputs = [p.communicate(timeout=60) for p in processes]
    assert [p.returncode for p in processes] == [0, 0], outputs[0][1][-2000:]
    stopped = _metric_lines(workdir)[-1]["update"]
    assert 2 <= stopped < 12
    assert f"stopped by a signal to another process after update {stopped}/12" in outputs[0][0]
    assert checkpoint.list_steps(os.path.join(workdir, "checkpoints"))[-1] == stopped

    processes = _cli_processes(workdir, 2, *flags)
    outputs = [p.communicate(timeout=120) for p in processes]
    assert [p.returncode for p in processes] == [0, 0], outputs[0][1][-2000:]
    _assert_continuous(read_metrics(workdir), 12)
    assert read_summary(workdir)["updates"] == 12


def test_sigint_finishes_the_current_update_then_saves(tmp_path):
    config = agent_config(minimal_agent, total_timesteps=STEPS_PER_UPDATE * 8, log__every_updates=3)
    previous_handler = signal.getsignal(signal.SIGINT)

    def interrupt_at_update_3(report, state):
        if report.update == 3:
            os.kill(os.getpid(), signal.SIGINT)

    # The signal lands during update 4's bookkeeping: that update finishes, then saves.
    state = train.train(config, str(tmp_path), on_update=interrupt_at_update_3)
    assert int(state.updates) == 4
    assert checkpoint.list_steps(checkpoint.checkpoints_dir(str(tmp_path))) == [4]
    # Logged every 3 updates; the stop flushes update 4's line so none is lost.
    assert [line["update"] for line in read_metrics(str(tmp_path))] == [3, 4]
    assert not os.path.exists(tmp_path / "summary.json")
    assert signal.getsignal(signal.SIGINT) is previous_handler


def test_a_stop_saves_once_an_update_s_metrics_line_can_be_seen(tmp_path, monkeypatch):
    # A user (or a script) who sees update 1's line and presses Ctrl-C gets a checkpoint,
    # not the immediate exit of a run with nothing to save.
    signals = checkpoint.StopSignals()
    saveable_when_recorded = []
    record = MetricsLogger.record

    def recording(self, report, state=None):
        saveable_when_recorded.append(signals.saveable)
        record(self, report, state)

    monkeypatch.setattr(MetricsLogger, "record", recording)
    train.train(agent_config(minimal_agent), str(tmp_path), stop_signals=signals)
    assert saveable_when_recorded == [True] * 6


def test_resumed_env_seeds_follow_seed_and_resume_update():
    assert random_streams.env_seed_base(7, 1) == 7  # A fresh run: env g gets seed + g.
    bases = {random_streams.env_seed_base(seed, k) for seed in (7, 8) for k in (2, 3, 50)}
    assert len(bases) == 6 and all(0 <= b < 2**30 for b in bases)
    assert random_streams.env_seed_base(7, 3) == random_streams.env_seed_base(7, 3)
    # Evaluation's env seeds are another stream: none equals a resumed run's base.
    evaluation = {random_streams.evaluation_env_seed_base(seed) for seed in (7, 8)}
    assert not evaluation & bases


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """A 6-update run on learner devices [1, 2] with checkpoints after updates 3 and 6."""
    workdir = str(tmp_path_factory.mktemp("saved") / "run")
    config = agent_config(minimal_agent, mesh__learner_device_ids=[1, 2], ckpt__every_updates=3)
    state = train.train(config, workdir)
    return workdir, jax.device_get(state)


def _resume(tmp_path, name, source, **overrides):
    config = agent_config(minimal_agent, ckpt__resume_from=source, **overrides)
    workdir = str(tmp_path / name)
    return workdir, train.train(config, workdir)


def test_two_resumes_of_one_checkpoint_agree(saved_run, tmp_path, capsys):
    workdir, _ = saved_run
    source = os.path.join(workdir, "checkpoints", "3")
    a, _ = _resume(tmp_path, "a", source, mesh__learner_device_ids=[1, 2])
    b, _ = _resume(tmp_path, "b", source, mesh__learner_device_ids=[1, 2])
    assert read_summary(a)["params_checksum"] == read_summary(b)["params_checksum"]
    assert [line["update"] for line in read_metrics(a)] == [4, 5, 6]
    assert read_summary(a)["updates"] == 6
    # The resumed envs are re-seeded (envpool cannot snapshot them), so the result is
    # not the uninterrupted run's; equality here would mean the resume was ignored.
    assert read_summary(a)["params_checksum"] != read_summary(workdir)["params_checksum"]
    # Rerunning a finished run changes nothing.
    capsys.readouterr()
    _resume(tmp_path, "a", source, mesh__learner_device_ids=[1, 2])
    assert "nothing to do" in capsys.readouterr().out
    assert [line["update"] for line in read_metrics(a)] == [4, 5, 6]


@pytest.mark.parametrize("policy_lag", [0, 1, 3])
def test_resumed_lag_schedule_continues_exactly(tmp_path, policy_lag):
    kwargs = dict(pipeline__policy_lag=policy_lag, ckpt__every_updates=3)
    train.train(agent_config(probe_agent, **kwargs), str(tmp_path / "first"))
    source = str(tmp_path / "first" / "checkpoints" / "3")
    train.train(agent_config(probe_agent, ckpt__resume_from=source, **kwargs), str(tmp_path / "b"))
    lines = read_metrics(str(tmp_path / "b"))
    assert [line["update"] for line in lines] == [4, 5, 6]
    for line in lines:
        k = line["update"]
        # Rollout k is collected by version max(1, k - lag), from the restored params.
        assert line["behaviour_version_min"] == line["behaviour_version_max"] == k - policy_lag
        assert line["learner_version_in"] == k
        assert line["actor_policy_version"] == k - policy_lag


def test_a_checkpoint_of_the_one_version_form_resumes_a_one_step_lag_run(tmp_path):
    # Before lags beyond one, a checkpoint held version u itself as previous_params, not
    # a tuple of the lagged versions; such a checkpoint still resumes the schedule.
    kwargs = dict(pipeline__policy_lag=1, ckpt__every_updates=3)
    train.train(agent_config(probe_agent, **kwargs), str(tmp_path / "first"))
    config = agent_config(probe_agent, ckpt__resume_from=str(tmp_path / "first"), **kwargs)
    start = train.restore_or_init(train.prepare(config), str(tmp_path / "unused"))
    (version_6,) = start.previous_params
    meta = dict(start.meta)
    del meta["previous_params_form"]
    meta["checksums"] = {
        **meta["checksums"],
        "previous_params": checkpoint.tree_checksum(version_6),
    }
    old = str(tmp_path / "old" / "checkpoints")
    manager = checkpoint._manager(old, create=True)
    items = {
        "state": checkpoint.ocp.args.StandardSave(start.state),
        "previous_params": checkpoint.ocp.args.StandardSave(version_6),
        "meta": checkpoint.ocp.args.JsonSave(meta),
    }
    manager.save(6, args=checkpoint.ocp.args.Composite(**items), force=True)
    manager.wait_until_finished()
    manager.close()
    more = dict(kwargs, total_timesteps=agent_config(probe_agent).total_timesteps * 3 // 2)
    resumed = agent_config(probe_agent, ckpt__resume_from=old, **more)
    train.train(resumed, str(tmp_path / "b"))
    lines = read_metrics(str(tmp_path / "b"))
    assert [line["update"] for line in lines] == [7, 8, 9]
    assert_rollouts_came_from_the_lagged_version(lines, 1)


@pytest.mark.parametrize("policy_lag", [0, 1, 3])
def test_a_chain_of_resumes_keeps_the_lag_schedule(tmp_path, policy_lag):
    # first saves after update 2; second resumes there and saves after every update,
    # the first of them on its first resumed update; third resumes from that checkpoint.
    def run(name, first_update, **overrides):
        config = agent_config(
            probe_agent, pipeline__policy_lag=policy_lag, ckpt__max_to_keep=10, **overrides
        )
        train.train(config, str(tmp_path / name))
        lines = read_metrics(str(tmp_path / name))
        assert [line["update"] for line in lines] == list(range(first_update, 7))
        return lines

    lines = run("first", 1, ckpt__every_updates=2)
    source = str(tmp_path / "first" / "checkpoints" / "2")
    lines += run("second", 3, ckpt__every_updates=1, ckpt__resume_from=source)
    source = str(tmp_path / "second" / "checkpoints" / "3")
    lines += run("third", 4, ckpt__resume_from=source)
    for line in lines:
        k = line["update"]
        expected = max(1, k - policy_lag)
        # The probe's parameters are its version: this is what really acted on rollout k.
        assert (line["behaviour_version_min"], line["behaviour_version_max"]) == (
            expected,
            expected,
        ), f"update {k}"
        assert line["actor_policy_version"] == expected
        assert line["learner_version_in"] == k


@pytest.mark.parametrize("learner_ids", [[0], [0, 1, 2, 3]], ids=["1-device", "4-devices"])
def test_checkpoint_restores_onto_another_learner_layout(saved_run, tmp_path, learner_ids):
    workdir, saved_state = saved_run
    config = agent_config(
        minimal_agent, mesh__learner_device_ids=learner_ids, ckpt__resume_from=workdir
    )
    setup = train.prepare(config)
    start = train.restore_or_init(setup, str(tmp_path / "new"))
    assert start.first_update == 7
    devices = set(setup.layout.learner_mesh.devices.flat)
    assert len(devices) == len(learner_ids)
    for restored, saved in zip(
        jax.tree.leaves(start.state), jax.tree.leaves(saved_state), strict=True
    ):
        assert restored.sharding.device_set == devices
        assert restored.sharding.is_fully_replicated
        np.testing.assert_array_equal(jax.device_get(restored), saved)  # Bit-exact.
    for restored in jax.tree.leaves(start.previous_params):
        assert restored.sharding.device_set == devices


def test_resume_on_another_layout_runs_to_completion(saved_run, tmp_path):
    workdir, _ = saved_run
    source = os.path.join(workdir, "checkpoints", "3")
    two, two_state = _resume(tmp_path, "two", source, mesh__learner_device_ids=[1, 2])
    four, four_state = _resume(tmp_path, "four", source, mesh__learner_device_ids=[0, 1, 2, 3])
    assert read_summary(four)["updates"] == 6
    for a, b in zip(jax.tree.leaves(two_state), jax.tree.leaves(four_state), strict=True):
        np.testing.assert_allclose(jax.device_get(a), jax.device_get(b), rtol=1e-5, atol=1e-7)


def test_resume_restores_the_normalization_statistics_exactly_and_restarts_env_returns(tmp_path):
    # PPO on Pendulum with both normalisations: 6 updates of 8 envs x 16 steps.
    overrides = normalized_continuous_overrides()
    samples_per_update = 8 * 16
    first = str(tmp_path / "first")
    saved = train.train(agent_config(ppo, ckpt__every_updates=3, **overrides), first)
    saved = jax.device_get(saved)
    setup = train.prepare(agent_config(ppo, ckpt__resume_from=first, **overrides))
    start = train.restore_or_init(setup, str(tmp_path / "new"))
    assert start.first_update == 7
    # Every env restarts its episode on resume, so each env's running discounted return
    # starts from zero again (as at any episode start); the statistics are bit-exact.
    assert np.any(np.asarray(saved.normalization.reward.returns) != 0)
    np.testing.assert_array_equal(jax.device_get(start.state.normalization.reward.returns), 0.0)
    restarted = saved.replace(
        normalization=saved.normalization.replace(
            reward=saved.normalization.reward.replace(
                returns=np.zeros_like(saved.normalization.reward.returns)
            )
        )
    )
    for restored, expected in zip(
        jax.tree.leaves(start.state), jax.tree.leaves(restarted), strict=True
    ):
        np.testing.assert_array_equal(jax.device_get(restored), expected)  # Bit-exact.
    stats = start.state.normalization
    assert float(stats.observation.count) == pytest.approx(6 * samples_per_update)
    # policy_lag 1: the actors' version 6 was normalised with the statistics of 5 updates.
    (previous,) = start.previous_params  # The one lagged version, 6.
    previous = previous["observation_stats"]
    assert float(previous.count) == pytest.approx(5 * samples_per_update)

    # Two resumes from update 3 agree, and continue the statistics of updates 1-3.
    source = os.path.join(first, "checkpoints", "3")
    results = []
    for name in ("a", "b"):
        config = agent_config(ppo, ckpt__resume_from=source, **overrides)
        state = train.train(config, str(tmp_path / name))
        assert float(state.normalization.observation.count) == pytest.approx(6 * samples_per_update)
        results.append(read_summary(str(tmp_path / name))["params_checksum"])
    assert results[0] == results[1]


def test_sigkill_during_a_save_leaves_the_previous_checkpoint(tmp_path, caplog):
    workdir = str(tmp_path / "run")
    marker = str(tmp_path / "saving")
    flags = ["--config.ckpt.every_updates=2"]
    killed = _cli(workdir, *flags, script=_HANG_IN_SAVE, env_extra={"SEBULBA_TEST_MARKER": marker})
    try:
        _wait_for(lambda: os.path.exists(marker))
        killed.send_signal(signal.SIGKILL)
    finally:
        killed.communicate(timeout=30)
    directory = os.path.join(workdir, "checkpoints")
    assert checkpoint.interrupted_saves(directory)  # Update 4's save, never committed.
    assert checkpoint.list_steps(directory) == [2]

    # The killed command's config resumed in this process, as sebulba.main would train it
    # (train.train): a second command would add its start-up (~4.5 s of imports).
    caplog.set_level(logging.INFO)
    train.train(load_config(TEST_CONFIG, flags), workdir)
    messages = caplog.messages
    assert any(m.startswith("skipping unfinished checkpoint") for m in messages), messages
    assert any(m.startswith("resuming after update 2 from") for m in messages), messages
    _assert_continuous(read_metrics(workdir), 6)  # Lines of the killed run were dropped.
    assert not checkpoint.interrupted_saves(directory)
    assert checkpoint.list_steps(directory) == [2, 4, 6]


def _truncate_state_files(step_dir):
    for root, _, files in os.walk(os.path.join(step_dir, "state")):
        for name in files:
            with open(os.path.join(root, name), "r+b") as f:
                f.truncate(0)


def _tamper_checksum(step_dir):
    path = os.path.join(step_dir, "meta", "metadata")
    with open(path, encoding="utf-8") as f:
        meta = json.load(f)
    meta["checksums"]["state"] = "0" * 64
    with open(path, "w", encoding="utf-8") as f:
        json.dump(meta, f)


@pytest.mark.parametrize("corrupt", [_truncate_state_files, _tamper_checksum])
def test_corrupt_checkpoint_is_skipped_with_a_warning(saved_run, tmp_path, caplog, corrupt):
    workdir = str(tmp_path / "run")
    shutil.copytree(saved_run[0], workdir)
    corrupt(os.path.join(workdir, "checkpoints", "6"))
    config = agent_config(minimal_agent, mesh__learner_device_ids=[1, 2], ckpt__every_updates=3)
    train.train(config, workdir)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("skipping checkpoint" in w and "/checkpoints/6" in w for w in warnings), warnings
    assert os.listdir(os.path.join(workdir, checkpoint.SKIPPED_DIRNAME))[0].startswith("6-")
    lines = read_metrics(workdir)
    _assert_continuous(lines, 6)  # Resumed after update 3: lines 4-6 were rewritten.
    assert read_summary(workdir)["updates"] == 6


def test_a_state_this_layout_cannot_checksum_restores_unchecked(saved_run, tmp_path, monkeypatch):
    # One process saved the checksum of a replay buffer; restored over two processes, the
    # buffer is spread and no process can hash it whole (`tree_checksum` gives None). That
    # is no corruption: the checkpoint restores, unchecked, instead of being skipped.
    workdir, saved_state = saved_run
    monkeypatch.setattr(checkpoint, "tree_checksum", lambda tree: None)
    config = agent_config(minimal_agent, ckpt__resume_from=workdir)
    start = train.restore_or_init(train.prepare(config), str(tmp_path / "new"))
    assert start.first_update == 7
    for restored, saved in zip(
        jax.tree.leaves(start.state), jax.tree.leaves(saved_state), strict=True
    ):
        np.testing.assert_array_equal(jax.device_get(restored), saved)


def test_a_run_none_of_whose_checkpoints_reads_stops_and_changes_nothing(saved_run, tmp_path):
    # A cause that passes (host memory, an I/O error) fails every checkpoint alike:
    # moving them all aside and training from update 1 would discard the run.
    workdir = str(tmp_path / "run")
    shutil.copytree(saved_run[0], workdir)
    for step in ("3", "6"):
        _truncate_state_files(os.path.join(workdir, "checkpoints", step))
    before = sorted(os.listdir(workdir)), read_metrics(workdir)
    config = agent_config(minimal_agent, mesh__learner_device_ids=[1, 2], ckpt__every_updates=3)
    with pytest.raises(checkpoint.NoReadableCheckpoint, match=r"no checkpoint in .* can be read"):
        train.train(config, workdir)
    assert (sorted(os.listdir(workdir)), read_metrics(workdir)) == before
    assert checkpoint.list_steps(os.path.join(workdir, "checkpoints")) == [3, 6]


def test_incompatible_or_missing_checkpoint_is_a_config_error(saved_run, tmp_path):
    workdir, _ = saved_run
    other = agent_config(minimal_agent, ckpt__resume_from=workdir, agent__num_steps=8)
    with pytest.raises(ConfigError, match=r"agent.num_steps \(stored 16, requested 8\)"):
        train.train(other, str(tmp_path / "a"))
    # Without the source's config.json, the checkpoint's own record refuses it.
    copied = str(tmp_path / "copied")
    shutil.copytree(os.path.join(workdir, "checkpoints"), copied)
    other = agent_config(minimal_agent, ckpt__resume_from=copied, agent__num_steps=8)
    with pytest.raises(ConfigError, match="steps_per_update=128.*steps_per_update=64"):
        train.train(other, str(tmp_path / "a"))
    missing = agent_config(minimal_agent, ckpt__resume_from=str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match="ckpt.resume_from"):
        train.train(missing, str(tmp_path / "b"))
    assert not os.path.exists(tmp_path / "a") and not os.path.exists(tmp_path / "b")


def test_an_error_closing_the_outputs_never_replaces_the_runs_own(tmp_path, monkeypatch):
    def failing_close(self):
        raise OSError("closing the metrics failed")

    monkeypatch.setattr(MetricsLogger, "close", failing_close)

    def fail_at_update_3(report, state):
        if report.update == 3:
            raise RuntimeError("the run's own error")

    config = agent_config(minimal_agent, ckpt__every_updates=1)
    with pytest.raises(RuntimeError, match="the run's own error"):
        train.train(config, str(tmp_path), on_update=fail_at_update_3)
    # The saver was still closed: the save started at update 3 reached the disk whole.
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["1", "2", "3"]


def test_a_complete_run_without_a_summary_gets_one_from_its_last_checkpoint(saved_run, tmp_path):
    # As after a kill between the last checkpoint and summary.json (a SLURM time limit):
    # a rerun had nothing to do, forever, and a sweep never counted the run done.
    workdir = str(tmp_path / "run")
    shutil.copytree(saved_run[0], workdir)
    finished = read_summary(workdir)
    os.remove(os.path.join(workdir, "summary.json"))
    config = agent_config(minimal_agent, mesh__learner_device_ids=[1, 2], ckpt__every_updates=3)
    train.train(config, workdir)
    rebuilt = read_summary(workdir)
    assert rebuilt["rebuilt_from_checkpoint"] == 6
    for key in ("params_checksum", "global_step", "updates", "mean_return", "episodes"):
        assert rebuilt[key] == finished[key], key
    assert rebuilt["sps"] > 0 and rebuilt["wall_time_s"] == pytest.approx(
        finished["wall_time_s"], rel=0.5
    )
    assert len(read_metrics(workdir)) == 6  # Nothing cut or added.
