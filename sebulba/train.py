"""`train(config, workdir)`: one training run, phase by phase.

Everything that can reject the config (a change from the run it resumes, sizes, devices,
env id, agent, an incompatible checkpoint) runs before the workdir is touched, so a bad
config leaves nothing behind.
A run resumes from the newest valid checkpoint in `workdir/checkpoints` (else from
`ckpt.resume_from`) and stops cleanly, with a checkpoint, on SIGTERM or SIGINT; see
`sebulba.checkpoint` and docs/checkpointing.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import jax
import ml_collections
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
from sebulba.mesh import DeviceLayout
from sebulba.pbt import settings as pbt_settings
from sebulba.pipeline import Pipeline, rollout_struct
from sebulba.preflight import memory, update_estimate
from sebulba.run_checkpoints import RunCheckpoints, restore_or_init
from sebulba.run_outputs import describe_run, finish_run, open_outputs, write_missing_summary
from sebulba.run_setup import RunSetup, compile_init
from sebulba.run_setup import init_learner_state as init_learner_state  # For library callers.
from sebulba.runtime import compile_progress, distributed, gpu_determinism
from sebulba.runtime import workdir as workdir_lib
from sebulba.update_report import UpdateReport


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
