"""`train(config, workdir)`: one training run, phase by phase.

Everything that can reject the config (a change from the run it resumes, sizes, devices,
env id, agent, an incompatible checkpoint) runs before the workdir is touched, so a bad
config leaves nothing behind.
A run resumes from the newest valid checkpoint in `workdir/checkpoints` (else from
`ckpt.resume_from`) and stops cleanly, with a checkpoint, on SIGTERM or SIGINT; see
`sebulba.checkpoint` and docs/checkpointing.md.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import jax
import ml_collections
import numpy as np
from absl import logging
from jax.experimental import multihost_utils

from sebulba import checkpoint as ckpt_lib
from sebulba import fused_step, random_streams
from sebulba.actors import scan_actor
from sebulba.agents.api import Agent, EnvSpec
from sebulba.anakin import runner as anakin_runner
from sebulba.anakin import suites as anakin_suites
from sebulba.anakin.env_api import BatchOfEnvs
from sebulba.config import resume as resume_config
from sebulba.config.run_plan import RunPlan, plan
from sebulba.config.sizes import Sizes
from sebulba.environments import tasks, thread_envs
from sebulba.errors import ConfigError
from sebulba.lag_schedule import advance_lagged, lagged_versions, required_policy_version
from sebulba.mesh import DeviceLayout
from sebulba.pbt import settings as pbt_settings
from sebulba.pipeline import Pipeline, rollout_struct
from sebulba.preflight import memory, update_estimate
from sebulba.runtime import compile_progress, distributed, gpu_determinism
from sebulba.runtime import workdir as workdir_lib
from sebulba.runtime.metrics import MetricsLogger, params_checksum, truncate_metrics, write_json
from sebulba.update_report import UpdateReport


@dataclasses.dataclass
class RunSetup:
    """Everything a run needs, built and checked before any output is written."""

    config: ml_collections.ConfigDict
    sizes: Sizes
    layout: DeviceLayout
    envs_per_thread: list[Any]
    env_spec: EnvSpec
    agent: Agent
    # "scan" or "step": `pipeline.actor_loop` resolved for these envs; "anakin" for a JAX
    # env, which the Anakin runner steps inside its one program.
    actor_loop: str
    actor_loop_reason: str  # Why that loop, for the log.
    # An Anakin run's env (a joint run's: one per task); None for envpool (Sebulba).
    jax_env: BatchOfEnvs | None = None
    # `pipeline.fused` resolved: update k and rollout k + 1 as one program, and why.
    fused: bool = False
    fused_reason: str = "an Anakin run acts and learns in one program already"

    @functools.cached_property
    def learner_state_shapes(self):
        """The learner state's shapes and dtypes, without computing it (traced once)."""
        return state_shapes(self.agent, self.config.seed)


def state_shapes(agent: Agent, seed: int):
    """The shapes and dtypes of the learner state `agent.init` makes for `seed`."""
    return jax.eval_shape(agent.init, random_streams.init_key(seed))


def prepare(config: ml_collections.ConfigDict, run: RunPlan | None = None) -> RunSetup:
    """Checks the config (`sebulba.config.run_plan.plan`: sizes, devices, envs, agent),
    then builds the envs and chooses the actor loop. `run`: the config's plan, where
    the caller has made it already.

    Raises:
      ConfigError: with one line naming the offending field.
    """
    run = plan(config) if run is None else run
    sizes, layout, env_spec = run.sizes, run.layout, run.env_spec
    if run.is_anakin:
        task_layout = tasks.task_layout(config, sizes.num_envs)
        jax_env = make_jax_env(config, sizes, env_spec)
        field = "env.ids name JAX envs" if task_layout.is_multitask else "env.id names a JAX env"
        why = f"{field}: acting, env steps and learning are one program"
        return RunSetup(config, sizes, layout, [], env_spec, run.agent, "anakin", why, jax_env)
    envs_per_thread = make_env_pools(config, sizes, first_update=1)
    actor_loop, why = choose_actor_loop(config, sizes, layout, envs_per_thread, env_spec)
    setup = RunSetup(config, sizes, layout, envs_per_thread, env_spec, run.agent, actor_loop, why)
    setup.fused, setup.fused_reason = choose_fused(setup)
    return setup


def choose_fused(setup: RunSetup) -> tuple[bool, str]:
    """`pipeline.fused` resolved for the run's devices, loop and agent, and why.

    Raises:
      ConfigError: "on" was asked for where it cannot run.
    """
    config = setup.config

    def unsupported() -> str | None:
        state_shapes = setup.learner_state_shapes
        return fused_step.unsupported_reason(
            setup.agent,
            setup.layout,
            setup.sizes,
            policy_lag=config.pipeline.policy_lag,
            actor_loop=setup.actor_loop,
            state_shapes=state_shapes,
            rollout_shapes=rollout_struct(
                setup.agent, setup.env_spec, setup.sizes, setup.layout, state_shapes
            ),
        )

    platform = setup.layout.actor_devices[0].platform
    return fused_step.choose_fused(config.pipeline.fused, unsupported, platform)


def make_jax_env(config: ml_collections.ConfigDict, sizes: Sizes, env_spec: EnvSpec):
    """An Anakin run's JAX env (a joint run's: one per task, each on its block of envs)."""
    return anakin_suites.make_run_envs(tasks.task_layout(config, sizes.num_envs), env_spec)


def make_anakin_runner(
    config: ml_collections.ConfigDict,
    agent: Agent,
    layout: DeviceLayout,
    sizes: Sizes,
    jax_env: BatchOfEnvs,
    env_spec: EnvSpec,
) -> anakin_runner.AnakinRunner:
    """The Anakin runner of a run (`sebulba.check` costs the program it compiles)."""
    return anakin_runner.AnakinRunner(
        agent,
        layout,
        sizes,
        jax_env,
        env_spec,
        seed=config.seed,
        policy_lag=config.pipeline.policy_lag,
        clip_rewards=config.env.clip_rewards,
        updates_per_call=config.pipeline.updates_per_call,
    )


def make_pipeline(setup: RunSetup, **options) -> Pipeline:
    """The Sebulba pipeline of a run, every setting from its config and the actor loop
    `prepare` chose; `options` replace `Pipeline` arguments (a benchmark picks the loop)."""
    config = setup.config
    settings = {
        "seed": config.seed,
        "policy_lag": config.pipeline.policy_lag,
        "clip_rewards": config.env.clip_rewards,
        "learner_delay_s": config.debug.learner_delay_s,
        "actor_delay_s": config.debug.actor_delay_s,
        "actor_delay_jitter_s": config.debug.get("actor_delay_jitter_s", 0.0),
        "transfer_guard": config.debug.transfer_guard,
        "consistency_checks": config.debug.consistency_checks,
        "actor_loop": setup.actor_loop,
        "fused": setup.fused,
        **options,
    }
    return Pipeline(
        setup.agent,
        setup.layout,
        setup.sizes,
        setup.envs_per_thread,
        env_spec=setup.env_spec,
        **settings,
    )


def choose_actor_loop(
    config, sizes: Sizes, layout: DeviceLayout, envs_per_thread, env_spec
) -> tuple[str, str]:
    """`pipeline.actor_loop` resolved for the threads' envs and actor devices, and why.

    Raises:
      ConfigError: "scan" was requested where it cannot run.
    """
    # Thread i runs on actor device i mod (number of actor devices), as in the pipeline.
    devices = [
        layout.actor_devices[i % len(layout.actor_devices)] for i in range(sizes.num_actor_threads)
    ]
    groups = [thread_envs.step_groups(envs) for envs in envs_per_thread]
    try:
        return scan_actor.choose_actor_loop(
            config.pipeline.actor_loop, groups, devices, env_spec.action
        )
    except ValueError as error:
        raise ConfigError(str(error)) from None


def make_env_pools(config: ml_collections.ConfigDict, sizes: Sizes, first_update: int) -> list:
    """The envs of each actor thread of this process; env g is seeded `base + g`.

    One envpool pool per thread and task block (`sebulba.environments.tasks`), joined into one set
    of envs, or two halves of them (`thread_envs.SplitPool`) with
    `pipeline.overlap_env_steps`. `base` is the seed for a fresh run and is re-derived for
    a resumed one (`random_streams.env_seed_base`), since envpool cannot restore env state.
    """
    base = random_streams.env_seed_base(config.seed, first_update)
    layout_of_tasks = tasks.task_layout(config, sizes.num_envs)
    split = config.pipeline.overlap_env_steps
    first_envs = [
        (jax.process_index() * sizes.num_actor_threads + thread) * sizes.envs_per_thread
        for thread in range(sizes.num_actor_threads)
    ]
    pool_sizes = [
        size
        for first in first_envs
        for size in thread_envs.thread_pool_sizes(
            layout_of_tasks, first, sizes.envs_per_thread, split=split
        )
    ]
    workers, why = thread_envs.worker_threads(config.env.num_threads, pool_sizes)
    logging.info(
        "envpool: %d pool(s), %d worker thread(s) each (%s)", len(pool_sizes), workers, why
    )
    return [
        thread_envs.make_thread_envs(
            config.env,
            layout_of_tasks,
            first,
            sizes.envs_per_thread,
            base,
            split=split,
            num_threads=workers,
        )
        for first in first_envs
    ]


def start_compiling(pipeline: Pipeline | anakin_runner.AnakinRunner, setup: RunSetup) -> Future:
    """Compiles the run's update program on a thread of its own, from the state's shapes.

    The main thread meanwhile compiles the learner state's init program (`compile_init`),
    which runs, as a restore does, only after the memory check has passed on the compiled
    update; XLA compiles without holding the GIL, so on two cores or more the two
    overlap: the largest part of a cold start-up that is not imports. `Future.result()`
    returns the compiled program or raises what compiling raised. Process 0's console says
    when compiling starts, that it goes on, and how long it took (`compile_progress`).
    """
    what = "the act-and-learn program" if setup.jax_env is not None else "the learner update"

    def compile_update():
        with compile_progress.announced(what, show=jax.process_index() == 0):
            return pipeline.compile_update(setup.learner_state_shapes)

    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sebulba-compile")
    future = executor.submit(compile_update)
    executor.shutdown(wait=False)
    return future


def compile_init(setup: RunSetup) -> Callable[[], Any]:
    """The learner state's init program, compiled but not run (nothing of the state exists
    yet); calling the result creates the state already placed on the learner mesh
    (`Agent.partition_specs`)."""
    shapes = setup.learner_state_shapes
    shardings = setup.agent.state_shardings(shapes, setup.layout.sharding)
    key = random_streams.init_key(setup.config.seed)
    init = jax.jit(setup.agent.init, out_shardings=shardings).lower(key).compile()
    return functools.partial(init, key)


def init_learner_state(setup: RunSetup):
    """Creates the learner state already placed on the learner mesh (`Agent.partition_specs`)."""
    return compile_init(setup)()


def _log_compiled(compiled) -> None:
    try:
        memory = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 - not every backend reports memory.
        memory = None
    if memory is not None:
        logging.info(
            "learner update compiled: arguments %.1f MiB, outputs %.1f MiB, temporaries %.1f MiB",
            memory.argument_size_in_bytes / 2**20,
            memory.output_size_in_bytes / 2**20,
            memory.temp_size_in_bytes / 2**20,
        )


@dataclasses.dataclass
class StartPoint:
    """Where a run (segment) starts: from scratch, or after a restored checkpoint.

    Attributes:
      state: learner state (version `first_update`), replicated on the learner mesh.
      first_update: the first update to run.
      previous_params: the lagged parameters (policy_lag L > 0): versions
        `lagged_versions(first_update, L)`, oldest first; None for a fresh run.
      meta: the restored checkpoint's metadata (empty for a fresh run).
      env_state: an Anakin run's restored env state (None: fresh envs, or Sebulba).
    """

    state: Any
    first_update: int = 1
    previous_params: Any = None
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    env_state: Any = None


def schedule_meta(config: ml_collections.ConfigDict, sizes: Sizes) -> dict[str, Any]:
    """Values a resumed run must share with its checkpoint, so its schedule continues."""
    ids = tasks.task_ids(config.env)
    return {
        "agent": config.agent.name,
        "env_id": ids[0],
        # A joint run's tasks; None for one task, as in checkpoints older than env.ids.
        "env_ids": list(ids) if len(ids) > 1 else None,
        "policy_lag": config.pipeline.policy_lag,
        "num_envs": sizes.num_envs,  # Global envs; threads and processes may change.
        "steps_per_update": sizes.steps_per_update,
    }


def restore_or_init(
    setup: RunSetup,
    workdir: str,
    abstract_env_state: Any = None,
    fresh_state: Callable[[], Any] | None = None,
) -> StartPoint:
    """Restores the run's own newest valid checkpoint, else `ckpt.resume_from`, else inits.

    Restored arrays take the shardings of the current layout, whatever layout saved them.
    Reads only; unreadable checkpoints of this run are moved aside with a warning.
    `abstract_env_state` (an Anakin run's) restores the JAX envs' state too; their
    episodes then continue, so nothing restarts. `fresh_state` makes the state of a run
    that restores none (default: `init_learner_state`).

    Raises:
      ConfigError: `ckpt.resume_from` holds no usable checkpoint, or a checkpoint holds a
        run this config cannot continue.
    """
    config, layout = setup.config, setup.layout
    shapes = setup.learner_state_shapes
    abstract = jax.tree.map(
        lambda x, sharding: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
        shapes,
        setup.agent.state_shardings(shapes, layout.sharding),
    )
    abstract_previous = None
    if config.pipeline.policy_lag:
        params = jax.eval_shape(setup.agent.policy_params, shapes)
        one = ckpt_lib.abstract_replicated(params, layout.replicated)
        abstract_previous = (one,) * config.pipeline.policy_lag
    kwargs = dict(
        expect=schedule_meta(config, setup.sizes),
        layout=layout,
        abstract_env_state=abstract_env_state,
    )
    restored = ckpt_lib.restore(
        ckpt_lib.checkpoints_dir(workdir),
        abstract,
        abstract_previous,
        skipped_dir=os.path.join(os.path.abspath(workdir), ckpt_lib.SKIPPED_DIRNAME),
        **kwargs,
    )
    if restored is None and config.ckpt.resume_from:
        directory, step = ckpt_lib.resolve_source(config.ckpt.resume_from)
        try:
            restored = ckpt_lib.restore(directory, abstract, abstract_previous, step=step, **kwargs)
        except ValueError as error:
            raise ConfigError(f"ckpt.resume_from: {error}") from None
        if restored is None:
            raise ConfigError(f"ckpt.resume_from {directory!r} holds no valid checkpoint")
    if restored is None:
        return StartPoint(fresh_state() if fresh_state is not None else init_learner_state(setup))
    logging.info("resuming after update %d from %s", restored.step, restored.path)
    # Columns split along envs follow the saving layout's env order; this one's may differ.
    state = ckpt_lib.reorder_envs(
        restored.state, restored.meta.get("env_order"), setup.sizes.env_order(), restored.path
    )
    if setup.agent.restart_envs is not None and restored.env_state is None:
        # Every env starts a new episode on resume; what follows live episodes starts too.
        shardings = setup.agent.state_shardings(shapes, layout.sharding)
        state = jax.jit(setup.agent.restart_envs, out_shardings=shardings)(state)
    return StartPoint(
        state, restored.step + 1, restored.previous_params, restored.meta, restored.env_state
    )


class RunCheckpoints:
    """The checkpoint side of the learner loop: when to save, what, and stopping.

    Saves after every `ckpt.every_updates`-th update, after the last one, and after the
    update during which SIGTERM/SIGINT arrived (then asks the pipeline to stop). With
    policy_lag L > 0 a checkpoint after update u must also hold the lagged parameters,
    versions `lagged_versions(u + 1, L)` (up to version u), which collect rollouts u + 1 ..
    u + L: the newest is the policy parameters of the state *before* update u. That update
    donated the state, so this keeps copies of them.
    """

    def __init__(
        self,
        setup: RunSetup,
        workdir: str,
        metrics: MetricsLogger,
        signals: ckpt_lib.StopSignals,
        start: StartPoint,
        env_state: Callable[[], Any] | None = None,
        previous_params: Callable[[], Any] | None = None,
        extra_meta: Callable[[], dict[str, Any]] | None = None,
    ):
        self.setup, self.metrics, self.signals = setup, metrics, signals
        # More metadata for every checkpoint, read as it is saved (a population's state).
        self.extra_meta = extra_meta
        # An Anakin run's current env state, saved with every checkpoint.
        self.env_state = env_state
        # Where the lagged parameters are at hand already (an Anakin runner's), they are
        # read from there instead of copied after every update.
        self.previous_params = previous_params
        self.saver = ckpt_lib.Checkpointer(
            workdir,
            max_to_keep=setup.config.ckpt.max_to_keep,
            async_save=setup.config.ckpt.async_save,
        )
        self.stopping = False
        self.last_update = start.first_update - 1
        self.saved_path: str | None = None
        # Before update u: version u (the state's, which that update donates) and the
        # lagged versions `lagged_versions(u, L)`; after it, the newest is appended.
        self._params_before_update = None
        self._lagged = None
        lag = setup.config.pipeline.policy_lag
        if lag and previous_params is None:
            self._params_before_update = self._copy(setup.agent.policy_params(start.state))
            # A fresh run's lagged versions are all version 1 (no copy: nothing donates them).
            fresh = (self._params_before_update,) * lag
            self._lagged = start.previous_params if start.previous_params is not None else fresh

    def _copy(self, params):
        # A real copy: the next update donates the state these parameters belong to.
        return jax.device_put(params, self.setup.layout.replicated, may_alias=False)

    def is_due(self, update: int) -> bool:
        """Whether `ckpt.every_updates` asks for a checkpoint after `update`, or
        `ckpt.stop_after_update` a stop."""
        every = self.setup.config.ckpt.every_updates
        return (bool(every) and update % every == 0) or update == self.stop_after

    @property
    def stop_after(self) -> int:
        """`ckpt.stop_after_update` (0: none; a config from before the key has none)."""
        return self.setup.config.ckpt.get("stop_after_update", 0)

    def on_update(self, report: UpdateReport, state) -> None:
        """Records metrics, then saves if due; runs on the learner thread after each update.

        `state` is the learner state after the update, or a function that returns it
        (called only to save it). None marks an update of an Anakin block
        (`pipeline.updates_per_call`) whose state is not at hand: one inside the block, or
        the last of a block whose state the next block, already running, took. Its
        metrics are recorded; at a block's end every process decides whether to stop;
        saving waits for a block that keeps its state (the runner ends a block at every
        due checkpoint, and after a stop finishes the block in flight and reports it).
        """
        sizes = self.setup.sizes
        distributed.report_progress(report.update)  # Feeds the multi-process watchdog.
        # Before the update's metrics line can be seen: a Ctrl-C sent once a line is
        # visible must save a checkpoint, not end the run as one with nothing to save.
        self.signals.mark_saveable()
        self.metrics.record(report)
        self.last_update = report.update
        if state is None and not report.call_ends_here:
            return
        # Every process must stop after the same update: the update is a collective.
        self.stopping = ckpt_lib.any_process(self.signals.received is not None, self.setup.layout)
        # Asked for by the config, as a preemption at a known update (`python -m sebulba.pbt`).
        self.stopping = self.stopping or report.update == self.stop_after
        if state is None:
            # An Anakin block whose state went to the next block, already running: a stop
            # saves once that one returns (`AnakinRunner.run`).
            return
        last = report.update == sizes.num_updates
        if self.stopping or last or self.is_due(report.update):
            if self.stopping and not last:
                self.metrics.flush()
            previous = None
            if self._lagged is not None:
                previous = advance_lagged(self._lagged, self._params_before_update)
            if self.previous_params is not None:
                previous = self.previous_params()
            self.saved_path = self.saver.save(
                report.update,
                state() if callable(state) else state,
                previous,
                self._meta(report),
                env_state=None if self.env_state is None else self.env_state(),
            )
        if self._params_before_update is not None:
            self._lagged = advance_lagged(self._lagged, self._params_before_update)
            self._params_before_update = self._copy(self.setup.agent.policy_params(state))

    def should_stop(self) -> bool:
        return self.stopping

    def _meta(self, report: UpdateReport) -> dict[str, Any]:
        config, sizes = self.setup.config, self.setup.sizes
        return {
            **schedule_meta(config, sizes),
            "global_step": report.global_step,
            "num_updates": sizes.num_updates,
            "seed": config.seed,
            "num_processes": sizes.num_processes,
            "num_envs": sizes.num_envs,
            "layout": self.setup.layout.describe(),
            # Global env id of each column of state split along envs (a replay buffer).
            "env_order": sizes.env_order().tolist(),
            "learner_policy_version": report.learner_policy_version,
            "actor_policy_version": required_policy_version(
                report.update + 1, config.pipeline.policy_lag
            ),
            # What the saved lagged parameters are, oldest first.
            "lagged_versions": lagged_versions(report.update + 1, config.pipeline.policy_lag),
            "episodes_finished": self.metrics.episodes_finished,
            "task_episodes": self.metrics.task_episodes.state(),
            "wall_time_s": self.metrics.wall_time_s(),
            "rng": "none saved: keys derive from seed, update counter, step and env index",
            "jax_version": jax.__version__,
            "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **(self.extra_meta() if self.extra_meta is not None else {}),
        }


def _summary_extra(config, layout, actor_loop: str, fused: bool = False) -> dict[str, Any]:
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


def _final_report(summary: dict[str, Any], label: str = "") -> str:
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


def train(
    config: ml_collections.ConfigDict,
    workdir: str,
    on_update: Callable[[UpdateReport, Any], None] | None = None,
    shared_workdir_timeout_s: float = 60.0,
    stop_signals: ckpt_lib.StopSignals | None = None,
):
    """Trains the configured agent; returns the final learner state.

    Writes (process 0 only) `config.json`, `metrics.jsonl`, TensorBoard events and
    `summary.json` into `workdir`; every process takes part in writing `checkpoints/`.
    Resumes from the newest valid checkpoint in `workdir/checkpoints`, else from
    `ckpt.resume_from`, after checking the config against that run's `config.json`
    (`sebulba.config.resume`: only documented keys may change; `config.json` then holds
    this segment's config). On SIGTERM or SIGINT it saves after the current update and
    returns that state without writing `summary.json`; calling it again resumes.
    `on_update(report, state)`, if given, runs on the learner thread after each update
    (e.g. a watchdog's heartbeat); `state` is None for the updates inside an Anakin
    block (`pipeline.updates_per_call`), whose state only existed inside the program.
    In a multi-process run every process must see the same `workdir`; a process that
    cannot see process 0's files in it within `shared_workdir_timeout_s` raises
    `ConfigError`. `stop_signals`, if given, is the
    `StopSignals` the run uses (the command line enters it before start-up as well, so
    that no Ctrl-C is lost); its `received` tells the caller which signal stopped the
    run (the command line's exit status).

    Raises:
      ConfigError: before any work, for a bad config or a workdir that is a file, lies
        below a file, is not writable or is in use by another run (process 0 holds the
        workdir from its first write to the end: `sebulba.runtime.workdir.hold`).
    """
    # The run's wall time counts from here: start-up and compiling are part of it.
    started_at = time.perf_counter()
    if pbt_settings.in_one_program(config):
        raise ConfigError(
            "pbt.population trains a population, not one run: call "
            "sebulba.anakin.population.train_population (python -m sebulba.main does)"
        )
    # Before envs and compiling: a path that cannot hold the outputs fails in seconds,
    # and so does a resume with a config the stored run did not use.
    workdir_lib.check_workdir(workdir)
    resume_config.check(config, workdir)
    # For library callers; a no-op after sebulba.main, which did it before JAX started.
    gpu_determinism.configure(config.debug.deterministic_gpu)
    # Process 0 writes: it holds the workdir (open_outputs).
    with workdir_lib.reserved([workdir], check=jax.process_index() == 0):
        return _train_phases(
            config, workdir, on_update, shared_workdir_timeout_s, stop_signals, started_at
        )


def _train_phases(
    config: ml_collections.ConfigDict,
    workdir: str,
    on_update: Callable[[UpdateReport, Any], None] | None,
    shared_workdir_timeout_s: float,
    stop_signals: ckpt_lib.StopSignals | None,
    started_at: float,
):
    """`train` once its workdir and config have passed the checks that need no JAX."""
    # Entered here even when the caller entered it already: JAX's distributed runtime
    # may have installed its own SIGTERM handler since.
    with stop_signals or ckpt_lib.StopSignals() as signals:
        setup = prepare(config)
        sizes, layout = setup.sizes, setup.layout
        logging.info("compilation cache: %s", jax.config.jax_compilation_cache_dir or "off")
        logging.info(
            "actor loop: %s (pipeline.actor_loop=%s: %s)",
            setup.actor_loop,
            config.pipeline.actor_loop,
            setup.actor_loop_reason,
        )
        if setup.jax_env is None:
            logging.info(
                "fused step: %s (pipeline.fused=%s: %s)",
                "on" if setup.fused else "off",
                config.pipeline.fused,
                setup.fused_reason,
            )
        if sizes.global_steps != config.total_timesteps:
            logging.info(
                "total_timesteps %s is %s updates of %s env steps: the run trains %s steps "
                "(the remaining %s make no whole update)",
                f"{config.total_timesteps:,}",
                f"{sizes.num_updates:,}",
                f"{sizes.steps_per_update:,}",
                f"{sizes.global_steps:,}",
                f"{config.total_timesteps - sizes.global_steps:,}",
            )
        is_main_process = jax.process_index() == 0
        distributed.check_workdir_shared(workdir, shared_workdir_timeout_s)
        runner = None
        if setup.jax_env is not None:
            runner = make_anakin_runner(
                config, setup.agent, layout, sizes, setup.jax_env, setup.env_spec
            )
        abstract_env_state = None if runner is None else runner.abstract_acting_state()
        pipeline = runner or make_pipeline(setup)
        compiling = start_compiling(pipeline, setup)
        # Compiled while the update compiles, run only once the update is known to fit:
        # the state (a replay buffer above all) is part of what the memory check counts.
        fresh_state = compile_init(setup)
        compiled = compiling.result()
        _log_compiled(compiled)
        # On a CPU learner, how long an update will take: an accelerator's config can
        # take minutes per update there, which the console says before it starts.
        estimated = update_estimate.estimate(compiled, layout.local_learner_devices)
        slow = estimated is not None and estimated.seconds >= update_estimate.SLOW_UPDATE_S
        if not config.debug.skip_memory_check:
            memory.check_update_fits(
                compiled,
                # Anakin's rollout lives inside its program (counted in its temporaries);
                # the pipeline's next rollout arrives while the update runs.
                () if runner is not None else pipeline.rollout_struct(setup.learner_state_shapes),
                layout.local_learner_devices,
                agent=config.agent,
                rollouts_in_flight=max(1, config.pipeline.policy_lag),
            )
        start = restore_or_init(setup, workdir, abstract_env_state, fresh_state)
        if jax.process_count() > 1:
            # Every process has looked for checkpoints before any may create their
            # directory (RunCheckpoints): one that looked later would find it, take the
            # restore branch alone and issue other collectives than the rest.
            multihost_utils.sync_global_devices("sebulba:restored-or-initialised")
        if start.first_update > sizes.num_updates:
            if is_main_process:
                done = f"{start.first_update - 1}/{sizes.num_updates}"
                print(f"sebulba: nothing to do, {workdir} is complete at update {done}")
            write_missing_summary(setup, workdir, start)
            return start.state
        if runner is not None:
            runner.acting = start.env_state
            if runner.acting is None:
                runner.acting = runner.initial_acting_state()
        elif start.first_update > 1:
            for pool in setup.envs_per_thread:
                pool.close()
            setup.envs_per_thread = make_env_pools(config, sizes, start.first_update)
            pipeline.replace_envs(setup.envs_per_thread)
        logging.info(
            "process %d/%d: %s; %d envs, updates %d..%d of %d steps",
            jax.process_index(),
            jax.process_count(),
            layout.describe(),
            sizes.num_envs,
            start.first_update,
            sizes.num_updates,
            sizes.steps_per_update,
        )

        metrics = open_outputs(
            setup,
            workdir,
            start,
            started_at=started_at,
            update_estimate_s=estimated.seconds if slow else None,
        )
        metrics.print(describe_run(config, sizes, workdir))
        if slow:
            metrics.print(
                update_estimate.describe(
                    estimated, sizes.num_updates - start.first_update + 1, sizes.steps_per_update
                )
            )
        checkpoints = RunCheckpoints(
            setup,
            workdir,
            metrics,
            signals,
            start,
            env_state=None if runner is None else (lambda: runner.acting),
            # policy_lag L > 0: the runner holds the lagged parameters after update u
            # (they collect the next L rollouts), so nothing is copied per update.
            previous_params=(
                (lambda: runner.behaviour)
                if runner is not None and config.pipeline.policy_lag
                else None
            ),
        )

        def after_update(report: UpdateReport, state) -> None:
            checkpoints.on_update(report, state)
            if on_update is not None:
                on_update(report, state)

        try:
            state = pipeline.run(
                start.state,
                first_update=start.first_update,
                previous_params=start.previous_params,
                on_update=after_update,
                should_stop=checkpoints.should_stop,
                # An Anakin block (`pipeline.updates_per_call`) ends where one is due.
                ends_block=checkpoints.is_due,
            )
        except BaseException:
            # The run's own error is the one to report: one from closing the outputs
            # is logged, and the saver still waits for the saves it started.
            _close_after_an_error(metrics.close, checkpoints.saver.close)
            raise
        try:
            metrics.close()
        finally:
            checkpoints.saver.close()  # Waits for the last save to reach the disk.
    finish_run(setup, workdir, metrics, checkpoints, state, signals)
    return state


def _close_after_an_error(*closers: Callable[[], None]) -> None:
    """Calls every closer; logs what one raises instead of letting it replace the error
    that stopped the run."""
    for close in closers:
        try:
            close()
        except Exception:
            logging.exception("while closing the run's outputs after an error")


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
        extra=_summary_extra(config, setup.layout, setup.actor_loop, setup.fused),
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
    print(_final_report(summary), flush=True)


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
            **_summary_extra(config, layout, setup.actor_loop, setup.fused),
            **(summary_extra or {}),
        },
    )
    if is_main_process:
        write_json(os.path.join(workdir, "summary.json"), summary)
        # A population member's lineage is the population's, in summary.json; not logged.
        logged = {key: value for key, value in summary.items() if key != "pbt"}
        logging.info("finished: %s; checkpoint %s", logged, checkpoints.saved_path)
        print(_final_report(summary, label), flush=True)
    return summary
