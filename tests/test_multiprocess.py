"""Multi-process runs: local processes joined by `jax.distributed` over gloo.

Each process gets two virtual CPU devices (actor device 0, learner device 1), so two
processes have the global env count and learner device count of one process with two
actor threads and two learner devices; the runs must agree up to float reduction order.
Failures are injected by killing, stopping or hanging one process.
"""

import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import time

import jax
import numpy as np
import pytest

from sebulba.errors import ConfigError
from sebulba.mesh import build_layout
from sebulba.runtime import distributed
from tests.helpers import popen_python, process_env, read_metrics, read_summary, run_python

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST_CONFIG = os.path.join(ROOT, "tests", "configs", "minimal_cartpole.py")
# 16 global envs x 16 steps x 6 updates (the probe agent's rollouts are 4 steps long).
GLOBAL_ENVS = 16
UPDATES = 6
# Short runtime timeouts keep the failure tests fast; they are flags, not test hooks.
FAST_TIMEOUTS = ("--heartbeat_timeout_s=10", "--initialization_timeout_s=60")
# Each process: actor device 0, learner device 1.
TWO_PROCESS_LAYOUT = (
    "--config.mesh.actor_device_ids=(0,)",
    "--config.mesh.learner_device_ids=(1,)",
    "--config.pipeline.num_actor_threads=1",
    f"--config.env.num_envs={GLOBAL_ENVS // 2}",
)
# One process: actor device 0, learner devices 1 and 2, one actor thread per old process.
ONE_PROCESS_LAYOUT = (
    "--config.mesh.actor_device_ids=(0,)",
    "--config.mesh.learner_device_ids=(1,2)",
    "--config.pipeline.num_actor_threads=2",
    f"--config.env.num_envs={GLOBAL_ENVS // 2}",
)
# A learner that hangs in Python on SIGUSR1 while the runtime's threads keep going.
HANG_ON_SIGUSR1 = (
    "import runpy, signal, time\n"
    "signal.signal(signal.SIGUSR1, lambda *_: time.sleep(10**6))\n"
    "runpy.run_module('sebulba.main', run_name='__main__', alter_sys=True)\n"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclasses.dataclass
class Process:
    index: int
    popen: subprocess.Popen
    stdout_path: str
    stderr_path: str

    @property
    def stdout(self) -> str:
        with open(self.stdout_path, encoding="utf-8") as f:
            return f.read()

    @property
    def stderr(self) -> str:
        with open(self.stderr_path, encoding="utf-8") as f:
            return f.read()


def launch(
    tmp_path,
    name,
    *args,
    num_processes=2,
    devices=2,
    per_process=None,
    python_code=None,
    config=TEST_CONFIG,
):
    """Starts `num_processes` CLI processes of one run (explicit coordinator if > 1)."""
    workdir = tmp_path / name
    logs = tmp_path / f"{name}-logs"
    logs.mkdir()
    port = free_port()
    env = process_env(devices)
    processes = []
    for i in range(num_processes):
        flags = [f"--config={config}", f"--workdir={workdir}", *args]
        if num_processes > 1:
            flags += [
                f"--coordinator_address=127.0.0.1:{port}",
                f"--num_processes={num_processes}",
                f"--process_id={i}",
                *FAST_TIMEOUTS,
            ]
        flags += list((per_process or {}).get(i, ()))
        code = (python_code or {}).get(i)
        program = ["-c", code] if code else ["-m", "sebulba.main"]
        out, err = str(logs / f"p{i}.out"), str(logs / f"p{i}.err")
        with open(out, "w") as stdout, open(err, "w") as stderr:
            popen = popen_python(*program, *flags, env=env, stdout=stdout, stderr=stderr)
        processes.append(Process(i, popen, out, err))
    return workdir, processes


def wait_all(processes, timeout):
    """Return codes of all processes; kills them all and fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    try:
        for p in processes:
            p.popen.wait(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"processes still running after {timeout}s:\n"
            + "\n".join(f"--- p{p.index} stderr:\n{p.stderr[-3000:]}" for p in processes)
        )
    finally:
        for p in processes:
            if p.popen.poll() is None:
                p.popen.kill()
                p.popen.wait()
    return [p.popen.returncode for p in processes]


def wait_until(predicate, timeout, processes):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline or any(p.popen.poll() is not None for p in processes):
            wait_all(processes, 0.1)
            pytest.fail("the run did not reach the awaited state:\n" + processes[0].stderr[-3000:])
        time.sleep(0.2)


def state_checksum(process):
    found = re.findall(r"finished; learner state checksum ([0-9a-f]{64})", process.stderr)
    assert len(found) == 1, process.stderr[-3000:]
    return found[0]


def saved_state(workdir, update):
    """The learner state a run saved after `update`, as numpy arrays."""
    import orbax.checkpoint as ocp

    path = os.path.join(workdir, "checkpoints", str(update), "state")
    checkpointer = ocp.PyTreeCheckpointer()
    tree = checkpointer.metadata(path).item_metadata.tree
    as_numpy = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
    return checkpointer.restore(path, restore_args=as_numpy)


def train_in_this_process(tmp_path, name, *flags, config=TEST_CONFIG, beside=()):
    """The one-process reference of a comparison: `sebulba.main --config=CONFIG FLAGS`
    trained by `train.train` in the test's own process, as sebulba.main trains a run of one
    process (the test process has 8 virtual CPU devices; the references use devices 0-2).
    A subprocess would add its ~4.5 s of imports to every comparison. Called once the
    processes `beside` (the run compared) are launched, so that their start-up overlaps
    this training; they are killed if it fails."""
    from sebulba import train
    from sebulba.experiments.sweep_plan import load_config

    workdir = tmp_path / name
    try:
        train.train(load_config(config, list(flags)), str(workdir))
    except BaseException:
        for p in beside:
            p.popen.kill()
            p.popen.wait()
        raise
    return workdir


def assert_all_succeeded(processes, timeout=180):
    codes = wait_all(processes, timeout)
    for p, code in zip(processes, codes, strict=True):
        assert code == 0, f"p{p.index} exited {code}:\n{p.stderr[-3000:]}"


# ----- in-process units ------------------------------------------------------------


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(coordinator_address="h:1"), "--num_processes, --process_id missing"),
        (dict(num_processes=2, process_id=0), "--coordinator_address missing"),
        (dict(coordinator_address="h", num_processes=2, process_id=0), "must be HOST:PORT"),
        (dict(coordinator_address="h:1", num_processes=2, process_id=2), "--process_id=2"),
        (dict(coordinator_address="h:1", num_processes=0, process_id=0), "--num_processes"),
        (dict(auto_detect=True, heartbeat_timeout_s=0), "--heartbeat_timeout_s"),
    ],
)
def test_inconsistent_distributed_flags_are_rejected(options, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        distributed.DistributedOptions(**options).validate()


def test_auto_detection_keeps_every_local_device_and_bounds_the_runtime(monkeypatch):
    calls = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: calls.append(kw))
    for name, value in {"SLURM_JOB_ID": "7", "SLURM_PROCID": "1", "SLURM_NTASKS": "2"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("JAX_LOCAL_DEVICE_IDS", raising=False)
    options = distributed.DistributedOptions(
        auto_detect=True, heartbeat_timeout_s=30, initialization_timeout_s=40
    )
    assert distributed.initialize(options) == "SLURM"
    # JAX would otherwise show a one-task-per-node SLURM process only its first GPU.
    assert calls[0]["local_device_ids"] == []
    assert calls[0]["heartbeat_timeout_seconds"] == 30
    assert calls[0]["initialization_timeout"] == 40
    assert calls[0]["shutdown_timeout_seconds"] == options.shutdown_timeout_s
    assert calls[0]["coordinator_address"] is None  # Left to JAX's SLURM detector.
    monkeypatch.setenv("JAX_LOCAL_DEVICE_IDS", "0,1")
    distributed.initialize(options)
    assert calls[1]["local_device_ids"] is None  # JAX reads the variable itself.
    assert distributed.initialize(distributed.DistributedOptions()) == "single process"
    assert len(calls) == 2


SLURM_TASK = {
    "SLURM_JOB_ID": "7",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_STEP_NODELIST": "localhost",
}


@pytest.mark.parametrize(
    "tasks, flags, joins",
    [
        ("1", {}, False),  # A one-node job or array task: the whole run.
        ("2", {}, True),
        # Explicit flags are the user's word, even for one process.
        ("1", dict(coordinator_address="h:1", num_processes=1, process_id=0), True),
    ],
)
def test_a_slurm_step_of_one_task_runs_as_a_single_process(monkeypatch, tasks, flags, joins):
    for name, value in {**SLURM_TASK, "SLURM_NTASKS": tasks}.items():
        monkeypatch.setenv(name, value)
    options = distributed.DistributedOptions(auto_detect=True, **flags)
    assert distributed.without_lone_slurm_task(options).enabled == joins
    monkeypatch.delenv("SLURM_JOB_ID")  # Not under SLURM: left to JAX's other detectors.
    assert distributed.without_lone_slurm_task(options).enabled


def test_a_one_task_slurm_run_needs_no_coordinator_port(tmp_path):
    # JAX's SLURM detector puts the coordinator on port 61440 + SLURM_JOB_ID % 4096. Another
    # job's array task on this node holds that port: a lone task must not need it.
    with socket.socket() as taken:
        for job_id in range(4096):
            try:
                taken.bind(("", 61440 + job_id))
                break
            except OSError:
                continue
        else:
            pytest.skip("every port JAX's SLURM detector may choose is in use")
        taken.listen()
        env = {**process_env(devices=2), **SLURM_TASK, "SLURM_JOB_ID": str(job_id)}
        env["SLURM_NTASKS"] = "1"
        workdir = tmp_path / "array-task"
        flags = [f"--config={TEST_CONFIG}", f"--workdir={workdir}", "--distributed"]
        result = run_python("-m", "sebulba.main", *flags, "--initialization_timeout_s=30", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the SLURM step has one task, so this is a single-process run" in result.stderr
    assert read_summary(workdir)["updates"] == UPDATES


class FakeCoordinationClient:
    """The two key-value calls RunMonitor makes, over a dict (one per run)."""

    def __init__(self):
        self.store = {}

    def key_value_set(self, key, value, allow_overwrite=False):
        self.store[key] = value

    def key_value_dir_get(self, prefix):
        return [(k, v) for k, v in self.store.items() if k.startswith(prefix)]


def test_monitor_stops_a_process_when_another_posts_its_failure():
    client = FakeCoordinationClient()
    process0 = distributed.RunMonitor(0, 2, watchdog_timeout_s=0, client=client)
    process1 = distributed.RunMonitor(1, 2, watchdog_timeout_s=0, client=client)
    assert process0.check() is None
    process1.report_failure("config error: env.num_envs (7) must be ...")
    assert process1.check() is None  # Its own post does not stop the poster twice.
    status, message = process0.check()
    assert status == distributed.EXIT_FAILURE
    assert message == (
        "process 0/2: stopping because process 1 failed: config error: env.num_envs (7) must be ..."
    )


def test_a_broken_collective_is_explained_by_the_peer_post_that_preceded_it():
    client = FakeCoordinationClient()
    process0 = distributed.RunMonitor(0, 2, watchdog_timeout_s=0, client=client)
    assert process0.peer_failure() is None  # No post: the caller says "collective".
    process0.report_failure("process 0 is not a peer")
    assert process0.peer_failure() is None
    client.key_value_set("sebulba/failed/1", "process 1/2: no learner update finished")
    assert process0.peer_failure() == (
        "process 0/2: stopping because process 1 failed: process 1/2: no learner update finished"
    )


def test_watchdog_arms_on_the_first_update_and_fires_after_the_timeout():
    exits = []
    monitor = distributed.RunMonitor(
        0, 2, watchdog_timeout_s=0.3, poll_s=0.05, on_exit=lambda *a: exits.append(a)
    ).start()
    try:
        time.sleep(0.6)
        assert exits == []  # Compiling before update 1 may take any time.
        for update in range(1, 6):  # Steady progress keeps it quiet.
            distributed.report_progress(update)
            time.sleep(0.1)
        assert exits == []
        deadline = time.monotonic() + 5
        while not exits and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        monitor.stop()
    assert len(exits) == 1
    status, message = exits[0]
    assert status == distributed.EXIT_STALLED
    assert "no learner update finished within 0.3s after update 5" in message
    distributed.report_progress(6)  # No monitor any more: a no-op.


def test_episode_gatherer_is_exact_and_keeps_the_order():
    from ml_collections import ConfigDict

    layout = build_layout(ConfigDict({"actor_device_ids": (0,), "learner_device_ids": (1, 2)}))
    gather = distributed.EpisodeGatherer(layout, capacity=5)
    returns, lengths = [0.1, -3.5, 1e300, 500.0, 2.0 / 3.0], [7, 1, 2**31 - 1, 500, 3]
    env_ids = [3, 0, 2**31 - 1, 3, 1]  # Each episode's global env index travels with it.
    with jax.transfer_guard("disallow"):  # The learner loop runs under this guard.
        assert gather(returns, lengths, env_ids) == (returns, lengths, env_ids)
        assert gather([], [], []) == ([], [], [])
    with pytest.raises(ValueError, match="7 returns"):  # 5 slots, rounded up to 2 x 3.
        gather([1.0] * 7, [1] * 7, [0] * 7)
    with pytest.raises(ValueError, match="2 env indices"):
        gather([1.0] * 3, [1] * 3, [0] * 2)


# ----- two processes against one --------------------------------------------------


# Three tasks with CartPole's spaces (phys2d/ is envpool's second registration of
# CartPole): the 16 global envs form blocks [0, 6), [6, 11) and [11, 16), so each
# process's envs span two tasks. (The other multi-process runs train one task.)
JOINT_IDS = ["CartPole-v1", "CartPole-v0", "phys2d/CartPole-v1"]


@pytest.fixture(scope="module")
def minimal_runs(tmp_path_factory):
    """The minimal agent trained jointly on `JOINT_IDS`, on 2 processes x 1 learner and
    on 1 process x 2 learners."""
    tmp_path = tmp_path_factory.mktemp("minimal")
    flags = (
        f"--config.total_timesteps={GLOBAL_ENVS * 16 * UPDATES}",
        "--config.env.ids=(" + ",".join(f"'{task_id}'" for task_id in JOINT_IDS) + ")",
    )
    two, processes = launch(tmp_path, "two", *TWO_PROCESS_LAYOUT, *flags)
    one = train_in_this_process(tmp_path, "one", *ONE_PROCESS_LAYOUT, *flags, beside=processes)
    assert_all_succeeded(processes)
    return two, processes, one


def test_every_process_logs_its_index_and_local_devices(minimal_runs):
    _, processes, _ = minimal_runs
    for p in processes:
        started = [line for line in p.stderr.splitlines() if "started on host" in line]
        assert len(started) == 1, p.stderr[-3000:]
        assert f"[process {p.index}/2]" in started[0]
        # Two local CPU devices, listed by their local index.
        assert re.search(r"local devices 0=\S+, 1=\S+ \(platform cpu\)", started[0])
        assert "4 devices in the run" in started[0]


def test_two_processes_match_one_process_with_two_learner_devices(minimal_runs):
    two, _, one = minimal_runs
    lines, reference = read_metrics(two), read_metrics(one)
    # Process 0 alone writes: one line per update, not one per process.
    assert [line["update"] for line in lines] == list(range(1, UPDATES + 1))
    assert [line["update"] for line in reference] == list(range(1, UPDATES + 1))
    for line, ref in zip(lines, reference, strict=True):
        assert line["global_step"] == ref["global_step"] == line["update"] * GLOBAL_ENVS * 16
        # Same data, same parameters: only the float reduction order differs. The loss
        # is a mean of O(1) terms that nearly cancel, hence the absolute tolerance.
        np.testing.assert_allclose(line["loss"], ref["loss"], rtol=1e-5, atol=1e-6)
    assert len({line["loss"] for line in lines}) == UPDATES  # The parameters do change.
    final, final_ref = saved_state(two, UPDATES), saved_state(one, UPDATES)
    assert final["updates"] == final_ref["updates"] == UPDATES
    initial = np.zeros_like(final["params"]["b"])  # b starts at zero: it must have moved.
    assert np.abs(final["params"]["b"] - initial).max() > 1e-4
    for a, b in zip(jax.tree.leaves(final), jax.tree.leaves(final_ref), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    summary = read_summary(two)
    assert summary["updates"] == UPDATES
    assert summary["layout"].startswith("processes=2")


def test_both_processes_end_with_the_same_parameters(minimal_runs):
    _, processes, _ = minimal_runs
    assert state_checksum(processes[0]) == state_checksum(processes[1])


def test_the_workdir_holds_only_the_documented_outputs(minimal_runs):
    # The shared-workdir check's marker file is gone once every process has seen it.
    two = minimal_runs[0]
    names = {name for name in os.listdir(two) if not name.startswith("events.out.tfevents")}
    assert names == {
        ".sebulba-lock",  # Process 0 held the workdir (sebulba.runtime.workdir.hold).
        "checkpoints",
        "config.json",
        "metrics.jsonl",
        "summary.json",
    }


def test_metrics_count_the_episodes_of_every_process(minimal_runs):
    # Process 0 writes the metrics, but half of the envs step on process 1.
    two, one = minimal_runs[0], minimal_runs[2]
    summary, reference = read_summary(two), read_summary(one)
    assert summary["episodes"] == reference["episodes"] > 0
    assert summary["mean_return"] == pytest.approx(reference["mean_return"], rel=1e-12)
    for line, ref in zip(read_metrics(two), read_metrics(one), strict=True):
        assert line["episodic_return"] == pytest.approx(ref["episodic_return"], rel=1e-12)


def test_episodes_of_every_process_are_attributed_to_their_task(minimal_runs):
    # Process 1's episodes reach process 0's metrics with their global env indices.
    two, one = minimal_runs[0], minimal_runs[2]
    with open(os.path.join(two, "config.json"), encoding="utf-8") as f:
        assert json.load(f)["env"]["ids"] == JOINT_IDS  # The command line's tuple, stored.
    summary, reference = read_summary(two), read_summary(one)
    assert summary["env_ids"] == reference["env_ids"] == JOINT_IDS
    assert summary["tasks"] == reference["tasks"]
    assert all(task["episodes"] > 0 for task in summary["tasks"].values())
    assert sum(task["episodes"] for task in summary["tasks"].values()) == summary["episodes"]
    for line, ref in zip(read_metrics(two), read_metrics(one), strict=True):
        for task_id in JOINT_IDS:
            for name in ("episodic_return", "episodic_length"):
                key = f"{name}/{task_id}"
                assert line[key] == ref[key], (line["update"], key)


@pytest.mark.parametrize("policy_lag", [1, 3])
def test_lag_schedule_holds_across_processes(tmp_path, policy_lag):
    total = f"--config.total_timesteps={GLOBAL_ENVS * 4 * UPDATES}"
    lag = f"--config.pipeline.policy_lag={policy_lag}"
    # A slow learner on process 0 and a slow actor on process 1 change only the speed.
    probe = f"{TEST_CONFIG}:probe"
    _, processes = launch(
        tmp_path,
        "two",
        *TWO_PROCESS_LAYOUT,
        total,
        lag,
        config=probe,
        per_process={
            0: ["--config.debug.learner_delay_s=0.05"],
            1: ["--config.debug.actor_delay_s=0.05"],
        },
    )
    train_in_this_process(
        tmp_path, "one", *ONE_PROCESS_LAYOUT, total, lag, config=probe, beside=processes
    )
    assert_all_succeeded(processes)
    lines, ref_lines = read_metrics(tmp_path / "two"), read_metrics(tmp_path / "one")
    assert [line["update"] for line in lines] == list(range(1, UPDATES + 1))
    for line, ref in zip(lines, ref_lines, strict=True):
        k = line["update"]
        # The min and max run over the global rollout: both processes' data.
        expected = max(1, k - policy_lag)
        assert line["behaviour_version_min"] == line["behaviour_version_max"] == expected
        assert line["actor_policy_version"] == expected
        assert line["learner_version_in"] == k
        assert line["learner_policy_version"] == k + 1
        # Env seeds and sampling keys follow the global env index: identical rewards.
        assert line["reward_sum"] == ref["reward_sum"]
    assert state_checksum(processes[0]) == state_checksum(processes[1])


# ----- failures -------------------------------------------------------------------


def _endless_run(tmp_path, **kwargs):
    """Two processes training "forever"; returns once process 0 logged update 3."""
    _, processes = launch(
        tmp_path, "endless", *TWO_PROCESS_LAYOUT, "--config.total_timesteps=1000000000", **kwargs
    )
    wait_until(lambda: "update 3/" in processes[0].stdout, 120, processes)
    return processes


@pytest.mark.parametrize("victim", [0, 1], ids=["coordinator-killed", "worker-killed"])
def test_killing_one_process_makes_the_other_exit(tmp_path, victim):
    processes = _endless_run(tmp_path)
    survivor = processes[1 - victim]
    processes[victim].popen.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    code = wait_all([survivor], timeout=60)[0]
    elapsed = time.monotonic() - killed_at
    wait_all(processes, 10)
    assert code != 0, survivor.stderr[-3000:]
    # Its next collective fails at once; the heartbeat timeout (10s here) bounds the rest.
    assert elapsed < 20, (elapsed, survivor.stderr[-3000:])
    lines = [line for line in survivor.stderr.splitlines() if line.startswith("sebulba: ")]
    assert lines and f"process {1 - victim}/2 failed" in lines[-1], survivor.stderr[-3000:]
    assert "another process" in lines[-1]


HEARTBEAT_S = 5


def test_a_frozen_process_is_caught_by_the_heartbeat(tmp_path):
    # The heartbeat timeout is the test's wait: 5s, half of the other runs' (JAX's runtime
    # beats from a thread of its own, so a busy host misses no beat for that long).
    heartbeat = [f"--heartbeat_timeout_s={HEARTBEAT_S}"]
    processes = _endless_run(tmp_path, per_process={0: heartbeat, 1: heartbeat})
    processes[1].popen.send_signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        code = wait_all([processes[0]], timeout=60)[0]
    finally:
        processes[1].popen.send_signal(signal.SIGCONT)
        wait_all(processes, 30)
    elapsed = time.monotonic() - stopped_at
    assert code != 0
    assert elapsed < HEARTBEAT_S + 10, elapsed  # The timeout, plus detection slack.
    assert "another task died" in processes[0].stderr


def test_a_hung_process_is_caught_by_the_watchdog(tmp_path):
    # Process 1's learner hangs in Python: its runtime keeps heartbeating, so only a
    # watchdog can end the run. Process 1's (5s) fires first; process 0 learns why from its
    # post, whether its monitor reads it first or the collective process 1's exit breaks.
    processes = _endless_run(
        tmp_path,
        per_process={0: ["--watchdog_timeout_s=60"], 1: ["--watchdog_timeout_s=5"]},
        python_code={1: HANG_ON_SIGUSR1},
    )
    processes[1].popen.send_signal(signal.SIGUSR1)
    hung_at = time.monotonic()
    codes = wait_all(processes, timeout=60)
    elapsed = time.monotonic() - hung_at
    assert all(code != 0 for code in codes), codes
    assert elapsed < 5 + 10, elapsed
    # The healthy process names the stall.
    assert "no learner update finished within 5s" in processes[0].stderr, processes[0].stderr


def config_error_of_process_1(processes, timeout=60):
    """Process 1's one config-error line, after checking both processes stopped in time.

    Process 1 exits 2; process 0 learns why from the coordination service, long before
    any heartbeat timeout, and exits 1 naming it.
    """
    start = time.monotonic()
    codes = wait_all(processes, timeout=timeout)
    elapsed = time.monotonic() - start
    assert codes == [distributed.EXIT_FAILURE, 2], codes
    errors = [line for line in processes[1].stderr.splitlines() if "config error" in line]
    assert len(errors) == 1, processes[1].stderr[-3000:]
    reason = errors[0].removeprefix("sebulba: config error: ")
    assert f"stopping because process 1 failed: config error: {reason}" in processes[0].stderr
    assert elapsed < 40, elapsed
    return errors[0]


def test_a_config_error_on_one_process_stops_every_process(tmp_path):
    _, processes = launch(
        tmp_path,
        "bad",
        *TWO_PROCESS_LAYOUT,
        per_process={1: ["--config.mesh.learner_device_ids=(5,)"]},
    )
    assert config_error_of_process_1(processes) == (
        "sebulba: config error: mesh.learner_device_ids contains 5, but this process has "
        "2 local device(s) (valid indices 0..1)"
    )


def test_a_bad_config_fails_before_waiting_for_the_other_processes(tmp_path):
    # A lone process of a 2-process run (its peer not started yet, or never) with a value
    # that cannot run: refused in seconds, not after --initialization_timeout_s of waiting.
    workdir = tmp_path / "alone"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    flags = [
        f"--config={TEST_CONFIG}",
        f"--workdir={workdir}",
        "--config.total_timesteps=10",  # Less than one update of the two processes.
        f"--coordinator_address=127.0.0.1:{free_port()}",
        "--num_processes=2",
        "--process_id=1",
        "--initialization_timeout_s=300",
    ]
    start = time.monotonic()
    result = run_python("-m", "sebulba.main", *flags, env=env, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("sebulba: config error: total_timesteps"), lines
    assert time.monotonic() - start < 60
    assert not workdir.exists()


def test_a_workdir_the_hosts_do_not_share_stops_the_run_in_seconds(tmp_path):
    # Each process gets its own directory, as when every host writes to local disk.
    elsewhere = tmp_path / "process-1-local-disk"
    workdir, processes = launch(
        tmp_path,
        "unshared",
        *TWO_PROCESS_LAYOUT,
        per_process={1: [f"--workdir={elsewhere}", "--shared_workdir_timeout_s=3"]},
    )
    error = config_error_of_process_1(processes, timeout=90)
    assert error.startswith(
        f"sebulba: config error: --workdir={elsewhere} is not shared between the hosts"
    )
    # Stopped before anything was read or written: no checkpoint, no metrics.
    assert not (workdir / "checkpoints").exists()
    assert not (workdir / "metrics.jsonl").exists()


def test_normalization_statistics_agree_between_two_processes_and_one(tmp_path):
    # PPO on InvertedPendulum with both normalisations: the statistics are reduced over
    # the global env axis, and the reward scaler follows global env ids, so two processes
    # end where one process with two actor threads and two learner devices does.
    config = os.path.join(ROOT, "configs", "ppo_mujoco.py") + ":InvertedPendulum-v4"
    small = (
        f"--config.total_timesteps={GLOBAL_ENVS * 16 * 4}",
        "--config.agent.num_steps=16",
        "--config.agent.num_minibatches=2",
        "--config.agent.update_epochs=2",
        "--config.log.tensorboard=False",
    )
    # Both runs at once, as the other comparisons here run them: one's start-up and
    # compilation overlap the other's waits on the coordination service.
    two, processes = launch(tmp_path, "two", *TWO_PROCESS_LAYOUT, *small, config=config)
    one = train_in_this_process(
        tmp_path, "one", *ONE_PROCESS_LAYOUT, *small, config=config, beside=processes
    )
    assert_all_succeeded(processes)
    final, final_ref = saved_state(two, 4), saved_state(one, 4)
    stats = final["normalization"]
    assert stats["observation"]["count"] == pytest.approx(GLOBAL_ENVS * 16 * 4)
    assert stats["reward"]["returns"].shape == (GLOBAL_ENVS,)
    for a, b in zip(jax.tree.leaves(final), jax.tree.leaves(final_ref), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # A one-device policy of the two-process run restores its 16 envs' statistics.
    from sebulba import load_policy

    policy = load_policy(str(two), greedy=True)
    np.testing.assert_array_equal(
        policy.params["observation_stats"].mean, stats["observation"]["mean"]
    )


ANAKIN_CONFIG = os.path.join(ROOT, "configs", "ppo_cartpole_anakin.py") + ":smoke"
# DQN on gymnax's CartPole: a replay buffer split along envs across the two processes.
ANAKIN_REPLAY = (
    os.path.join(ROOT, "configs", "dqn_cartpole.py") + ":smoke",
    ("--config.env.id=gymnax:CartPole-v1",),
)


@pytest.mark.parametrize(
    "config, extra", [(ANAKIN_CONFIG, ()), ANAKIN_REPLAY], ids=["ppo", "dqn-replay"]
)
def test_an_anakin_run_on_two_processes_matches_one_process_with_two_learner_devices(
    tmp_path, config, extra
):
    """JAX envs sharded over a learner mesh that spans two processes (Anakin): the same
    global envs on one process with two learner devices give the same run, and the
    resumable env state (and a replay buffer) is saved from both processes' shards."""
    flags = ("--config.mesh.actor_device_ids=(0,)", "--config.log.tensorboard=False", *extra)
    two, processes = launch(
        tmp_path,
        "two",
        *flags,
        "--config.mesh.learner_device_ids=(1,)",
        "--config.env.num_envs=4",
        config=config,
    )
    one = train_in_this_process(
        tmp_path,
        "one",
        *flags,
        "--config.mesh.learner_device_ids=(1,2)",
        "--config.env.num_envs=8",
        config=config,
        beside=processes,
    )
    assert_all_succeeded(processes)
    assert state_checksum(processes[0]) == state_checksum(processes[1])
    summary, summary_ref = read_summary(two), read_summary(one)
    assert summary["architecture"] == summary_ref["architecture"] == "anakin"
    assert summary["layout"].startswith("processes=2")
    # Same envs and keys (global env index), so the same episodes end the same way.
    assert summary["episodes"] == summary_ref["episodes"]
    np.testing.assert_allclose(summary["mean_return"], summary_ref["mean_return"], rtol=1e-6)
    final, final_ref = saved_state(two, summary["updates"]), saved_state(one, summary["updates"])
    for a, b in zip(jax.tree.leaves(final), jax.tree.leaves(final_ref), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert os.path.isdir(os.path.join(two, "checkpoints", str(summary["updates"]), "env_state"))
