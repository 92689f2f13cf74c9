"""A run's checkpoints: where it starts (its newest valid checkpoint, `ckpt.resume_from`,
or a fresh state) and, on the learner thread, when it saves, what, and when it stops
(docs/checkpointing.md)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import jax
import ml_collections
from absl import logging

from sebulba import checkpoint as ckpt_lib
from sebulba.config.sizes import Sizes
from sebulba.environments import tasks
from sebulba.errors import ConfigError
from sebulba.lag_schedule import advance_lagged, lagged_versions, required_policy_version
from sebulba.run_setup import RunSetup, StartPoint, init_learner_state
from sebulba.runtime import distributed
from sebulba.runtime.metrics import MetricsLogger
from sebulba.update_report import UpdateReport


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
