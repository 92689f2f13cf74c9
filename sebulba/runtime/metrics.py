"""Run outputs: metrics.jsonl, TensorBoard events, console progress and summary.json.

The learner-wait (`rollout_wait_s`) against actor-wait (`params_wait_s`) pair is the
throughput diagnosis of the Cleanba paper (Huang et al. 2023): a learner that waits for
rollouts is starved by its actors, actors that wait for parameters are held by the
learner. Side effects happen on process 0 only. Joint multi-task runs also report every
task's episodes (`sebulba.environments.task_metrics`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from sebulba.config.sizes import Sizes
from sebulba.environments.task_metrics import TaskEpisodes
from sebulba.environments.tasks import TaskLayout
from sebulba.errors import TrainingDivergedError
from sebulba.runtime.progress import ConsoleProgress, progress_line
from sebulba.update_report import UpdateReport

# Namespaces of the TensorBoard tags, by metrics.jsonl key (per-task keys such as
# "episodic_return/Pong-v5" by the part before the slash).
_TB_NAMESPACE = {
    "episodic_return": "charts",
    "episodic_length": "charts",
    "atari_median_hns": "charts",
    "atari_mean_hns": "charts",
    "sps": "perf",
    "wall_time_s": "perf",
    "rollout_wait_s": "pipeline",
    "params_wait_s": "pipeline",
    "learner_wait_fraction": "pipeline",
    "actor_wait_fraction": "pipeline",
    "host_cpu_fraction": "perf",
    "search_simulations_per_s": "perf",
    "actor_policy_version": "pipeline",
    "learner_policy_version": "pipeline",
}


# Characters a TensorBoard tag may not hold (a JAX env's task id has a colon): TensorBoard
# would replace them itself, logging a warning for every scalar of every log step.
_ILLEGAL_TAG_CHARACTERS = re.compile(r"[^-/\w.]")


def scalar_tag(name: str) -> str:
    """The TensorBoard / wandb tag of a metrics.jsonl key, e.g. "charts/episodic_return";
    characters a tag may not hold become "_" ("episodic_return/gymnax:CartPole-v1" ->
    "charts/episodic_return/gymnax_CartPole-v1")."""
    tag = f"{_TB_NAMESPACE.get(name.split('/', 1)[0], 'losses')}/{name}"
    return _ILLEGAL_TAG_CHARACTERS.sub("_", tag)


def params_checksum(params) -> str:
    """SHA-256 hex of the raw bytes of every leaf, in tree-flatten order."""
    digest = hashlib.sha256()
    for leaf in jax.tree.leaves(params):
        local = leaf.addressable_shards[0].data if isinstance(leaf, jax.Array) else leaf
        digest.update(np.ascontiguousarray(jax.device_get(local)).tobytes())
    return digest.hexdigest()


def write_json(path: str, payload: dict[str, Any]) -> None:
    """Writes JSON atomically, so a reader never sees half a file."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def truncate_metrics(workdir: str, last_update: int) -> None:
    """Drops metrics lines after `last_update`, so a resumed run continues the file.

    Lines written after the checkpoint a run resumes from (a crash between saves) would
    otherwise appear twice; a line cut short by a crash is dropped too.
    """
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        return
    kept = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                if json.loads(line)["update"] <= last_update:
                    kept.append(line if line.endswith("\n") else line + "\n")
            except (ValueError, KeyError, TypeError):
                continue
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(kept)
    os.replace(tmp, path)


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def check_finite_metrics(update: int, agent_metrics: dict[str, Any]) -> None:
    """Raises TrainingDivergedError if any agent metric of this update is NaN or infinite.

    The losses, and every statistic beside them: data the losses hide can show there
    first (a PPO rollout with an impossible action keeps finite losses, its `approx_kl`
    turns infinite).
    """
    values = jax.device_get(agent_metrics)
    bad = {name: value for name, value in values.items() if not np.all(np.isfinite(value))}
    if bad:
        kind = "loss" if all("loss" in name for name in bad) else "metric"
        listed = ", ".join(
            f"{name}={np.asarray(value).tolist()}" for name, value in sorted(bad.items())
        )
        raise TrainingDivergedError(
            f"non-finite {kind} at update {update}: {listed}; the run stopped before saving it "
            "(lower agent.learning_rate, or check rewards and observations)"
        )


# Below this wait fraction on both sides, neither actors nor learner idle noticeably.
_BALANCED_WAIT_FRACTION = 0.05
# From this share of its cores on, a process leaves its host's CPUs no room: more actor
# threads or envs would contend for them (envpool's workers step the envs on them).
_SATURATED_CPU_FRACTION = 0.9


def cpu_fraction(cpu_s: float, wall_s: float, cores: int) -> float:
    """The share of `cores` that `cpu_s` of process CPU time (all its threads: envpool's
    workers, XLA's, Python's) kept busy over `wall_s`."""
    return min(cpu_s / max(wall_s * cores, 1e-9), 1.0)


# The agent keys, of those an agent has, that set its learner's work per update: passes
# over each rollout, minibatches (optimizer steps) per pass, gradient steps per env step
# and their batch.
LEARNER_WORK_KEYS = ("update_epochs", "num_minibatches", "replay_ratio", "batch_size")


def diagnose_bottleneck(
    learner_wait_s: float,
    actor_wait_s: float,
    wall_s: float,
    actors_share_an_accelerator: bool = False,
    deterministic_gpu_kernels: bool = False,
    cpu_s: float | None = None,
    cores: int | None = None,
    agent_keys: Collection[str] = (),
) -> dict:
    """Which side limited throughput, from the Cleanba paper's pair of wait times.

    A learner that waits for rollouts is starved by its actors; actors that wait for
    parameters are held back by the learner. The wait times are totals over the same
    updates. `actors_share_an_accelerator`: an actor device is also a learner device
    and not a CPU, so the actors' policy calls queue behind the learner's updates and
    the advice for actor-bound runs differs. `deterministic_gpu_kernels`: the learner
    updates on GPUs under `debug.deterministic_gpu`, whose kernels cost time wherever
    the learner's update is what the run waits for. `cpu_s` and `cores`: the process's
    CPU time over the same updates and the cores it may run on; they add how busy it
    kept them, and actors that wait on saturated CPUs are told that more actor threads
    or envs would not help. `agent_keys`: the keys of the run's `agent` section; a
    learner-bound run is advised to lower only those of them that set the learner's work.
    """
    if wall_s <= 0:
        return {"limited_by": "unknown", "detail": "no steady-state update was measured"}
    learner = min(learner_wait_s / wall_s, 1.0)
    actors = min(actor_wait_s / wall_s, 1.0)
    waits = (
        f"the learner waited for rollouts {100 * learner:.0f}% of the time, "
        f"the actors waited for parameters {100 * actors:.0f}%"
    )
    host = None
    if cpu_s is not None and cores:
        host = cpu_fraction(cpu_s, wall_s, cores)
        cores_named = f"{cores} CPU core{'s' if cores != 1 else ''}"
        waits += f", this process kept its {cores_named} {100 * host:.0f}% busy"
    if max(learner, actors) < _BALANCED_WAIT_FRACTION:
        limited_by, advice = "neither", "both sides stayed busy"
    elif learner >= actors:
        limited_by = "actors"
        advice = "more actor threads, envs or actor devices would raise throughput"
        if host is not None and host >= _SATURATED_CPU_FRACTION:
            advice = (
                "the CPUs had no time to spare, so more actor threads or envs would contend "
                "for them; more cores, or processes on more hosts, would raise throughput"
            )
        elif actors_share_an_accelerator:
            # Measured on one GPU: more threads added envs but no GPU time
            # (docs/architecture.md, "Acting on the host's CPUs").
            advice = (
                "the actors share their accelerator with the learner, so more actor threads "
                "would queue behind its updates; a cheap (MLP) policy acts faster on the "
                "host's CPUs (mesh.actor_platform=cpu), any policy on actor devices of its own"
            )
    else:
        limited_by = "learner"
        advice = "more learner devices"
        lowering = [f"agent.{key}" for key in LEARNER_WORK_KEYS if key in agent_keys]
        if lowering:
            advice += f" or a lower {' or '.join(lowering)}"
        advice += " would raise throughput"
    if deterministic_gpu_kernels and (limited_by == "learner" or actors_share_an_accelerator):
        # Measured on one H200: PPO Atari's update ran 2.6x faster without them
        # (docs/benchmarks.md, "What deterministic GPU execution costs").
        advice += (
            "; the learner's update runs XLA's deterministic GPU kernels, and "
            "debug.deterministic_gpu=False trades the same-seed-same-result guarantee "
            "for faster ones"
        )
    verdict = {
        "limited_by": limited_by,
        "learner_wait_fraction": learner,
        "actor_wait_fraction": actors,
        "detail": f"{waits}; {advice}",
    }
    if host is not None:
        verdict["host_cpu_fraction"] = host
    return verdict


def flat_settings(settings: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config dict as dotted keys, e.g. {"agent.learning_rate": 0.00025}."""
    flat = {}
    for key, value in settings.items():
        if isinstance(value, Mapping):
            flat.update(flat_settings(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def hyperparameter_table(settings: Mapping[str, Any]) -> str:
    """A config dict as a markdown table of dotted keys and values (TensorBoard's text
    tab renders it as a table, as CleanRL writes its "hyperparameters")."""
    rows = [f"|{key}|{value!r}|" for key, value in sorted(flat_settings(settings).items())]
    return "\n".join(["|key|value|", "|-|-|", *rows])


class _TensorBoardSink:
    """TensorBoard scalars (x-axis: env steps), written on the caller's thread.

    tensorboardX's SummaryWriter writes from a thread of its own, fed by a queue of ten
    events: one failed write (a full disk) ends that thread, and the learner then blocks
    for good on the full queue, as does closing it. Written here, such an error stops
    the run as itself.
    """

    def __init__(self, workdir: str):
        # Imported here: TensorBoard is an optional extra.
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.summary import scalar, text

        self._event, self._scalar, self._text = Event, scalar, text
        # The file SummaryWriter would write: events.out.tfevents.<time>.<host>.
        self._events = EventsWriter(os.path.join(workdir, "events"))

    def log(self, line: dict[str, Any]) -> None:
        now, step = time.time(), line["global_step"]
        for name, value in line.items():
            if value is None or name in ("global_step", "update"):
                continue
            summary = self._scalar(scalar_tag(name), value)
            self._events.write_event(self._event(wall_time=now, step=step, summary=summary))
        self._events.flush()

    def log_settings(self, settings: Mapping[str, Any], step: int) -> None:
        """The run's config as the text "hyperparameters" (one table) at `step`."""
        summary = self._text("hyperparameters", hyperparameter_table(settings))
        self._events.write_event(self._event(wall_time=time.time(), step=step, summary=summary))
        self._events.flush()

    def close(self) -> None:
        self._events.close()


class _WandbSink:
    """Optional Weights & Biases logging of the metrics lines (process 0, opt-in)."""

    def __init__(self, config: Any, workdir: str, first_update: int):
        import wandb

        self._wandb = wandb
        workdir = os.path.abspath(workdir)
        # One wandb run per workdir: a resumed run continues the same curves.
        run_id = hashlib.sha256(workdir.encode()).hexdigest()[:16]
        self._run = wandb.init(
            project=config.log.wandb_project,
            entity=config.log.wandb_entity or None,
            name=os.path.basename(workdir),
            id=run_id,
            resume="allow" if first_update > 1 else None,
            dir=workdir,
            config=config.to_dict(),
        )

    def log(self, line: dict[str, Any]) -> None:
        scalars = {
            scalar_tag(name): value
            for name, value in line.items()
            if value is not None and name not in ("global_step", "update")
        }
        self._run.log(scalars, step=line["global_step"])

    def close(self) -> None:
        self._run.finish()


class MetricsLogger:
    """Aggregates `UpdateReport`s and writes one metrics line every `every_updates`.

    Every update: checks the metrics are finite and redraws the console bar. Every log
    step: a line in metrics.jsonl, TensorBoard scalars (x-axis: env steps) and optional
    wandb scalars; a console progress line too, but at most one per `console_every_s`
    seconds (the first and the last line of a run, and the line of a run that stops
    early or diverges, always print), so a short run with a line per update does not
    flood the terminal or a notebook. A resumed run passes `first_update`, the
    episode statistics (per task: `task_episodes`; `recent_returns` only from a
    checkpoint written before those existed) and the wall time of the run so far (from
    its checkpoint), so lines, summary and step counts continue. `show_progress` False
    writes every file but nothing to the console. `actors_share_an_accelerator`,
    `deterministic_gpu_kernels` and `agent_keys` (the run's `agent` section's keys): see
    `diagnose_bottleneck`. `host_cores`, the cores the process may run on, adds
    `host_cpu_fraction` to the lines and the bottleneck report: the process's CPU time
    over that many cores' wall time. `started_at`
    (`time.perf_counter()`) is when this run (segment) started, before its start-up and
    compiling, which its wall time and `sps_including_compile` count; default: now.
    `settings` (the resolved config as a dict) is written once to TensorBoard, as the
    text "hyperparameters" at the segment's first step. `learning_starts`: an off-policy
    agent's env steps before learning, from which the console's ETA measures its rate.
    `update_estimate_s`: a floor on an update's time, repeated by the console's notices
    while an update runs long. `simulations_per_step` (`Agent.simulations_per_step`) over
    `acting_devices` (every device that runs `act`, all processes' together) adds the
    search's throughput, `search_simulations_per_s` per acting device, to the lines, the
    console and the summary. `updates_per_call`: an Anakin run's updates per program call,
    which the console's stall notices name. `line_fields` go into every line as they are
    (a population member run's index and hyperparameters,
    `sebulba.pbt.settings.member_line_fields`).

    Episodes are attributed to the tasks of `task_layout` by their global env index;
    multi-task lines carry per-task fields and summary.json always has `tasks`
    (`sebulba.environments.task_metrics`).
    """

    def __init__(
        self,
        workdir: str,
        sizes: Sizes,
        *,
        task_layout: TaskLayout,
        every_updates: int,
        tensorboard: bool,
        is_main_process: bool,
        console: str = "auto",
        console_every_s: float = 0.0,
        wandb_config: Any = None,
        first_update: int = 1,
        recent_returns: Sequence[float] = (),
        episodes_finished: int = 0,
        task_episodes: Mapping[str, Any] | None = None,
        elapsed_s: float = 0.0,
        show_progress: bool = True,
        actors_share_an_accelerator: bool = False,
        deterministic_gpu_kernels: bool = False,
        host_cores: int | None = None,
        started_at: float | None = None,
        settings: Mapping[str, Any] | None = None,
        agent_keys: Collection[str] = (),
        learning_starts: int = 0,
        update_estimate_s: float | None = None,
        simulations_per_step: int = 0,
        acting_devices: int = 1,
        line_fields: Mapping[str, Any] | None = None,
        updates_per_call: int = 1,
    ):
        self.workdir = workdir
        # Written into every line as they are: a population member run's values.
        self.line_fields = dict(line_fields or {})
        # Search simulations per env step and acting device: times sps, their rate.
        self._simulations_per_step_and_device = simulations_per_step / max(acting_devices, 1)
        self.host_cores = host_cores
        self.agent_keys = tuple(agent_keys)
        self.actors_share_an_accelerator = actors_share_an_accelerator
        self.deterministic_gpu_kernels = deterministic_gpu_kernels
        self.sizes = sizes
        self.every_updates = every_updates
        self.console_every_s = console_every_s
        self._last_console_time: float | None = None
        self.is_main_process = is_main_process
        self.start_time = time.perf_counter() if started_at is None else started_at
        self.first_update = first_update
        self.elapsed_before_s = elapsed_s
        self.episodes_finished = episodes_finished
        if task_episodes is None and not task_layout.is_multitask:
            # A checkpoint written before per-task statistics existed holds a one-task
            # run: its task continues from the overall statistics.
            only = {"recent_returns": list(recent_returns), "episodes": episodes_finished}
            task_episodes = {task_layout.ids[0]: only}
        self.task_episodes = TaskEpisodes(task_layout, task_episodes)
        self.last_line: dict[str, Any] | None = None
        self._last_report: UpdateReport | None = None
        first_step = (first_update - 1) * sizes.steps_per_update
        self._window_reset(time.perf_counter(), first_step)
        # Steady-state totals for the bottleneck report; the first update of a run
        # includes compilation and the first rollout, so it is left out.
        self._last_record_time: float | None = None
        self._last_record_cpu = 0.0
        self._first_call_done = False
        self._steady_s = self._steady_rollout_wait = self._steady_params_wait = 0.0
        self._steady_cpu_s = 0.0
        self._steady_updates = 0
        self._tensorboard = self._jsonl = self._wandb = self._console = None
        if not is_main_process:
            return
        if tensorboard:
            self._tensorboard = _TensorBoardSink(workdir)
            if settings is not None:
                self._tensorboard.log_settings(settings, first_step)
        self._jsonl = open(os.path.join(workdir, "metrics.jsonl"), "a", encoding="utf-8")
        if wandb_config is not None:
            self._wandb = _WandbSink(wandb_config, workdir, first_update)
        if not show_progress:
            return
        self._console = ConsoleProgress(
            sizes.global_steps,
            sizes.num_updates,
            mode=console,
            # A long update says so as often as progress lines may appear (5 s when
            # every line is printed).
            stall_notice_s=console_every_s or 5.0,
            first_update=first_update,
            learning_starts=learning_starts,
            update_estimate_s=update_estimate_s,
            updates_per_call=updates_per_call,
        )

    def _window_reset(self, now: float, global_step: int) -> None:
        self._window_start = now
        # Process CPU time: every thread's, envpool's workers and XLA's included.
        self._window_cpu = time.process_time()
        self._window_step = global_step
        self._window_updates = 0
        self._window_returns: list[float] = []
        self._window_lengths: list[int] = []
        self._window_rollout_wait = 0.0
        self._window_params_wait = 0.0

    def record(self, report: UpdateReport, state: Any = None) -> None:
        """Accumulates one update; writes a line when the log interval is reached.

        Raises:
          TrainingDivergedError: a metric of this update is not finite (its line is
            written first, so the metrics show where it happened).
        """
        del state
        now = report.call_returned_at
        if now is None:
            now = time.perf_counter()
        cpu_now = time.process_time()
        if self._first_call_done:
            self._steady_s += now - self._last_record_time
            self._steady_cpu_s += cpu_now - self._last_record_cpu
            self._steady_updates += 1
            self._steady_rollout_wait += report.rollout_wait_s
            self._steady_params_wait += report.params_wait_s
        # The first program call (update 1, or an Anakin block from it) compiles and
        # starts up: the steady state begins once its last update is recorded.
        self._first_call_done = self._first_call_done or report.call_ends_here
        self._last_record_time = now
        self._last_record_cpu = cpu_now
        self._last_report = report
        self.episodes_finished += len(report.episode_returns)
        self._window_returns.extend(report.episode_returns)
        self._window_lengths.extend(report.episode_lengths)
        self.task_episodes.record(
            report.episode_returns, report.episode_lengths, report.episode_env_ids
        )
        self._window_updates += 1
        self._window_rollout_wait += report.rollout_wait_s
        self._window_params_wait += report.params_wait_s
        try:
            check_finite_metrics(report.update, report.agent_metrics)
        except TrainingDivergedError:
            self._write_line(report, always_print=True)
            raise
        if self._console is not None:
            self._console.on_update(report.update, report.global_step)
        last = report.update == self.sizes.num_updates
        if report.update % self.every_updates == 0 or last:
            self._write_line(report, always_print=last)

    def flush(self) -> None:
        """Writes the updates recorded since the last line (a run stopping early)."""
        if self._window_updates and self._last_report is not None:
            self._write_line(self._last_report, always_print=True)

    def wall_time_s(self) -> float:
        """Wall time of the whole run, including earlier segments of a resumed run."""
        return self.elapsed_before_s + time.perf_counter() - self.start_time

    def _write_line(self, report: UpdateReport, always_print: bool = False) -> None:
        now = time.perf_counter()
        agent_metrics = jax.device_get(report.agent_metrics)
        n = max(self._window_updates, 1)
        window_s = max(now - self._window_start, 1e-9)
        line: dict[str, Any] = {
            "global_step": report.global_step,
            "update": report.update,
            "sps": (report.global_step - self._window_step) / window_s,
            "episodic_return": (
                float(np.mean(self._window_returns)) if self._window_returns else None
            ),
            "episodic_length": (
                float(np.mean(self._window_lengths)) if self._window_lengths else None
            ),
            "actor_policy_version": report.actor_policy_version,
            "learner_policy_version": report.learner_policy_version,
            "rollout_wait_s": self._window_rollout_wait / n,
            "params_wait_s": self._window_params_wait / n,
            "learner_wait_fraction": min(self._window_rollout_wait / window_s, 1.0),
            "actor_wait_fraction": min(self._window_params_wait / window_s, 1.0),
            "wall_time_s": self.elapsed_before_s + now - self.start_time,
            **self.task_episodes.window_metrics(),
        }
        if self._simulations_per_step_and_device:
            line["search_simulations_per_s"] = line["sps"] * self._simulations_per_step_and_device
        if self.host_cores:
            cpu_s = time.process_time() - self._window_cpu
            line["host_cpu_fraction"] = cpu_fraction(cpu_s, window_s, self.host_cores)
        for name, value in sorted(agent_metrics.items()):
            line[name] = _finite_or_none(float(value))
        line.update(self.line_fields)
        line.update(report.run_metrics or {})
        self.last_line = line
        self._window_reset(now, report.global_step)
        if not self.is_main_process:
            return
        self._jsonl.write(json.dumps(line) + "\n")
        self._jsonl.flush()
        if self._tensorboard is not None:
            self._tensorboard.log(line)
        if self._wandb is not None:
            self._wandb.log(line)
        due = (
            self._last_console_time is None or now - self._last_console_time >= self.console_every_s
        )
        if self._console is not None and (always_print or due):
            self._last_console_time = now
            self._console.write_line(
                progress_line(
                    line,
                    self.sizes.global_steps,
                    self.sizes.num_updates,
                    self._console.eta_text(report.global_step),
                )
            )

    def bottleneck(self) -> dict[str, Any]:
        """`diagnose_bottleneck` over this run's updates after its first."""
        return diagnose_bottleneck(
            self._steady_rollout_wait,
            self._steady_params_wait,
            self._steady_s,
            self.actors_share_an_accelerator,
            self.deterministic_gpu_kernels,
            cpu_s=self._steady_cpu_s if self.host_cores else None,
            cores=self.host_cores,
            agent_keys=self.agent_keys,
        )

    def summary(self, global_step: int, updates: int, checksum: str, extra: dict) -> dict:
        """The end-of-run summary (written to summary.json by the caller)."""
        wall = time.perf_counter() - self.start_time
        steps_this_run = global_step - (self.first_update - 1) * self.sizes.steps_per_update
        sps_including_compile = steps_this_run / max(wall, 1e-9)
        # Steady state: the updates after this segment's first, which compiles the actor
        # step and waits for the first rollout; a one-update run has no steady state.
        sps = sps_including_compile
        if self._steady_updates:
            sps = self._steady_updates * self.sizes.steps_per_update / max(self._steady_s, 1e-9)
        search = {}
        if self._simulations_per_step_and_device:
            search["search_simulations_per_s"] = sps * self._simulations_per_step_and_device
        return {
            "global_step": global_step,
            "updates": updates,
            "wall_time_s": self.elapsed_before_s + wall,
            "sps": sps,
            "sps_including_compile": sps_including_compile,
            "mean_return": self.task_episodes.mean_recent_return(),
            "episodes": self.episodes_finished,
            "params_checksum": checksum,
            "bottleneck": self.bottleneck(),
            **search,
            **self.task_episodes.summary(),
            **extra,
        }

    def print(self, text: str) -> None:
        """A console line on process 0 (kept clear of the progress bar)."""
        if self._console is not None:
            self._console.write_line(text)

    def close(self) -> None:
        if self._console is not None:
            self._console.close()
        if self._tensorboard is not None:
            self._tensorboard.close()
        if self._jsonl is not None:
            self._jsonl.close()
        if self._wandb is not None:
            self._wandb.close()
