"""What a run writes and prints about itself: its outputs opened in the workdir, the line
that opens it, and the summary and closing lines that end it (or a stop's line)."""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import ml_collections
import numpy as np
from absl import logging
from jax.experimental import multihost_utils

from sebulba import checkpoint as ckpt_lib
from sebulba.anakin import runner as anakin_runner
from sebulba.config.sizes import Sizes
from sebulba.environments import tasks, thread_envs
from sebulba.pbt import settings as pbt_settings
from sebulba.run_checkpoints import RunCheckpoints
from sebulba.run_setup import RunSetup, StartPoint
from sebulba.runtime import gpu_determinism
from sebulba.runtime import workdir as workdir_lib
from sebulba.runtime.metrics import MetricsLogger, params_checksum, truncate_metrics, write_json


def summary_fields(config, layout, actor_loop: str, fused: bool = False) -> dict[str, Any]:
    extra = {}
    if actor_loop == "anakin":
        # Nothing waits in one program; the pipeline's wait-time diagnosis does not apply.
        extra["bottleneck"] = {
            "limited_by": "one program",
            "learner_wait_fraction": 0.0,
            "actor_wait_fraction": 0.0,
            "detail": "Anakin acts, steps the envs and learns in one program, so nothing "
            "waits; benchmarks/anakin.py measures the share of the env-only ceiling",
        }
    if fused:
        extra["bottleneck"] = {
            "limited_by": "one program",
            "learner_wait_fraction": 0.0,
            "actor_wait_fraction": 0.0,
            "detail": "the fused step runs each update with the next rollout as one program "
            "(pipeline.fused), so nothing waits; benchmarks/fused_step.py compares it with "
            "acting and learning in their own programs",
        }
    return {
        **extra,
        "architecture": "anakin" if actor_loop == "anakin" else "sebulba",
        "policy_lag": config.pipeline.policy_lag,
        "schedule": anakin_runner.describe_schedule(config.pipeline.policy_lag),
        "actor_loop": actor_loop,
        "fused": fused,
        "layout": layout.describe(),
        "jax_version": jax.__version__,
        "backend": jax.default_backend(),
        "gpu_determinism": gpu_determinism.describe(config.debug.deterministic_gpu),
        "agent": config.agent.name,
        "env_id": tasks.task_ids(config.env)[0],
    }


def final_report(summary: dict[str, Any], label: str = "") -> str:
    mean_return, episodes = summary["mean_return"], min(summary["episodes"], 100)
    bottleneck = summary["bottleneck"]
    if mean_return is None or episodes == 0:
        returns = "no episode has finished, so there is no mean return"
    elif len(summary["tasks"]) > 1:
        returns = f"mean return over tasks (each its last 100 episodes) {mean_return:.3g}"
    else:
        counted = "the episode" if episodes == 1 else f"the last {episodes} episodes"
        returns = f"mean return of {counted} {mean_return:.1f}"
    search = ""
    if "search_simulations_per_s" in summary:
        search = f"; search {summary['search_simulations_per_s']:,.0f} sims/s per acting device"
    return (
        f"sebulba: done{f' ({label})' if label else ''}, {summary['global_step']:,} steps in "
        f"{summary['wall_time_s']:.0f}s "
        f"({summary['sps']:,.0f} sps after update 1, {summary['sps_including_compile']:,.0f} "
        f"including start-up{search}), {returns}\n"
        f"sebulba: throughput limited by: {bottleneck['limited_by']} ({bottleneck['detail']})"
    )


def write_missing_summary(setup: RunSetup, workdir: str, start: StartPoint) -> None:
    """Writes summary.json for a complete run that has none: one killed after its last
    checkpoint but before its summary (a SLURM time limit, a full disk). Without it a
    rerun would have nothing to do forever, and a sweep counts a run done by its summary.

    The summary comes from the checkpoint (its parameters, episodes and wall time) and
    metrics.jsonl (the steady-state steps/s); every process takes part, as at the end of
    a run.
    """
    path = os.path.join(workdir, "summary.json")
    missing = np.bool_(jax.process_index() == 0 and not os.path.exists(path))
    if jax.process_count() > 1:  # Process 0 decides: the others follow it.
        missing = multihost_utils.broadcast_one_to_all(missing)
    if not missing:
        return
    config, sizes = setup.config, setup.sizes
    metrics = open_outputs(setup, workdir, start, show_progress=False, sinks=False)
    metrics.close()  # Only its restored episodes and wall time are read below.
    summary = metrics.summary(
        global_step=sizes.num_updates * sizes.steps_per_update,
        updates=sizes.num_updates,
        checksum=params_checksum(setup.agent.policy_params(start.state)),
        extra=summary_fields(config, setup.layout, setup.actor_loop, setup.fused),
    )
    if jax.process_index() != 0:
        return
    # This process ran no update: the rates come from what the run itself measured.
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    summary["sps_including_compile"] = summary["global_step"] / max(summary["wall_time_s"], 1e-9)
    summary["sps"] = summary["sps_including_compile"]
    if len(lines) > 1:  # From the end of the first logged window, as a run counts it.
        first, last = lines[0], lines[-1]
        seconds = last["wall_time_s"] - first["wall_time_s"]
        if seconds > 0:
            summary["sps"] = (last["global_step"] - first["global_step"]) / seconds
    summary["bottleneck"] = {
        "limited_by": "unknown",
        "detail": "the run stopped before its summary; this one was written later from its "
        "last checkpoint and metrics.jsonl",
    }
    summary["rebuilt_from_checkpoint"] = start.first_update - 1
    write_json(path, summary)
    logging.info("wrote the missing %s from checkpoint %d", path, start.first_update - 1)
    print(final_report(summary), flush=True)


def open_outputs(
    setup: RunSetup,
    workdir: str,
    start: StartPoint,
    show_progress: bool = True,
    sinks: bool = True,
    started_at: float | None = None,
    update_estimate_s: float | None = None,
) -> MetricsLogger:
    """Holds the workdir, writes config.json, cuts metrics.jsonl back to the start and
    opens the metrics.

    Process 0 writes (and holds the workdir until its caller releases it);
    `show_progress` False keeps the run off the console (the seeds of a vmapped Anakin
    run other than the first); `sinks` False opens no TensorBoard or wandb run.
    `started_at` (`time.perf_counter()`): when the run started, before its start-up and
    compiling, which its wall time counts (default: now). `update_estimate_s`: a floor on
    one update's time (`sebulba.preflight.update_estimate`) for the console's notices.
    """
    config, sizes = setup.config, setup.sizes
    is_main_process = jax.process_index() == 0
    if is_main_process:
        # The first write: from here to the caller's `workdir_lib.release`, a second
        # run on this workdir is refused.
        workdir_lib.hold(workdir)
        write_json(os.path.join(workdir, "config.json"), config.to_dict())
        truncate_metrics(workdir, start.first_update - 1)
    return MetricsLogger(
        workdir,
        sizes,
        task_layout=tasks.task_layout(config, sizes.num_envs),
        every_updates=config.log.every_updates,
        tensorboard=config.log.tensorboard and sinks,
        is_main_process=is_main_process,
        console=config.log.console,
        console_every_s=config.log.console_every_s,
        wandb_config=config if config.log.wandb and sinks else None,
        first_update=start.first_update,
        recent_returns=start.meta.get("recent_returns", ()),
        episodes_finished=start.meta.get("episodes_finished", 0),
        task_episodes=start.meta.get("task_episodes"),
        elapsed_s=start.meta.get("wall_time_s", 0.0),
        show_progress=show_progress,
        actors_share_an_accelerator=setup.layout.actors_share_an_accelerator,
        deterministic_gpu_kernels=config.debug.deterministic_gpu
        and any(device.platform == "gpu" for device in setup.layout.local_learner_devices),
        host_cores=thread_envs.available_cores(),
        agent_keys=tuple(config.agent.keys()),
        started_at=started_at,
        settings=config.to_dict(),
        # An off-policy agent's random-action phase would make the ETA minutes short.
        learning_starts=config.agent.get("learning_starts", 0),
        update_estimate_s=update_estimate_s,
        simulations_per_step=setup.agent.simulations_per_step,
        acting_devices=acting_devices(setup),
        line_fields=pbt_settings.member_line_fields(config),
        updates_per_call=config.pipeline.updates_per_call if setup.actor_loop == "anakin" else 1,
    )


def acting_devices(setup: RunSetup) -> int:
    """Every device that runs the policy, all processes' together: in Anakin every learner
    device acts; in Sebulba each process's actor devices."""
    if setup.actor_loop == "anakin":
        return setup.layout.learner_mesh.devices.size
    return len(setup.layout.actor_devices) * jax.process_count()


def describe_run(
    config: ml_collections.ConfigDict,
    sizes: Sizes,
    workdir: str,
    seeds: str | None = None,
    member_dirs: bool = False,
) -> str:
    """The line that opens a run: what trains, how much, and where every setting is.

    `seeds` names a vmapped run's seeds (each writes config.json in its own workdir,
    `seed=<seed>`, or with `member_dirs` a population's `member=<i>`).
    """
    subdir = ("member=*" if member_dirs else "seed=*") if seeds else ""
    where = os.path.join(workdir, subdir, "config.json")
    return (
        f"sebulba: {config.agent.name} on {', '.join(tasks.task_ids(config.env))}, "
        f"{seeds or f'seed {config.seed}'}: {sizes.num_updates:,} updates of "
        f"{sizes.steps_per_update:,} env steps ({sizes.num_envs:,} envs); every setting "
        f"in {where}"
    )


def finish_run(
    setup: RunSetup,
    workdir: str,
    metrics: MetricsLogger,
    checkpoints: RunCheckpoints,
    state,
    signals: ckpt_lib.StopSignals,
    label: str = "",
    summary_extra: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Reports a run that stopped early, or writes the summary of a finished one.

    `label` names the run in its final line where several finish together (`--seeds`);
    `summary_extra` adds sections to summary.json (a population member's `pbt`).
    Returns the summary (None for a run that stopped early).
    """
    config, sizes, layout = setup.config, setup.sizes, setup.layout
    is_main_process = jax.process_index() == 0
    if checkpoints.last_update < sizes.num_updates:
        reason = signals.received or "a signal to another process"
        if checkpoints.last_update == checkpoints.stop_after and signals.received is None:
            reason = "ckpt.stop_after_update"
        message = (
            f"sebulba: stopped by {reason} after "
            f"update {checkpoints.last_update}/"
            f"{sizes.num_updates}; checkpoint saved to {checkpoints.saved_path} "
            "(run the same command again to resume)"
        )
        # Once: the console's line on process 0 (its stdout is its log), the log elsewhere.
        if is_main_process:
            print(message, flush=True)
        else:
            logging.info(message)
        return None
    summary = metrics.summary(
        global_step=sizes.num_updates * sizes.steps_per_update,
        updates=sizes.num_updates,
        checksum=params_checksum(setup.agent.policy_params(state)),
        extra={
            **summary_fields(config, layout, setup.actor_loop, setup.fused),
            **(summary_extra or {}),
        },
    )
    if is_main_process:
        write_json(os.path.join(workdir, "summary.json"), summary)
        # A population member's lineage is the population's, in summary.json; not logged.
        logged = {key: value for key, value in summary.items() if key != "pbt"}
        logging.info("finished: %s; checkpoint %s", logged, checkpoints.saved_path)
        print(final_report(summary, label), flush=True)
    return summary
