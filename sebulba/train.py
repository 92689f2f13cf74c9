"""`train(config, workdir)`: one training run, phase by phase.

Everything that can reject the config (sizes, devices, env id, agent) runs before the
workdir is touched, so a bad config leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

import jax
import ml_collections
from absl import logging

from sebulba import envs as envs_lib
from sebulba.agents import resolve_agent
from sebulba.agents.api import Agent, EnvSpec
from sebulba.errors import ConfigError
from sebulba.mesh import DeviceLayout, build_layout
from sebulba.metrics import MetricsLogger, params_checksum, write_json
from sebulba.pipeline import Pipeline
from sebulba.sizes import Sizes, derive_sizes

_TRANSFER_GUARD_LEVELS = ("allow", "log", "disallow", "log_explicit", "disallow_explicit")


@dataclasses.dataclass
class RunSetup:
    """Everything a run needs, built and checked before any output is written."""

    config: ml_collections.ConfigDict
    sizes: Sizes
    layout: DeviceLayout
    envs_per_thread: list[Any]
    env_spec: EnvSpec
    agent: Agent


def prepare(config: ml_collections.ConfigDict) -> RunSetup:
    """Validates the config and builds devices, envs and agent.

    Raises:
      ConfigError: with one line naming the offending field.
    """
    sizes = derive_sizes(config, num_processes=jax.process_count())
    if config.debug.transfer_guard not in _TRANSFER_GUARD_LEVELS:
        raise ConfigError(
            f"debug.transfer_guard {config.debug.transfer_guard!r} must be one of "
            f"{', '.join(_TRANSFER_GUARD_LEVELS)}"
        )
    if not isinstance(config.log.every_updates, int) or config.log.every_updates < 1:
        raise ConfigError(f"log.every_updates must be >= 1, got {config.log.every_updates!r}")
    layout = build_layout(config.mesh)
    if sizes.num_actor_threads < len(layout.actor_devices):
        raise ConfigError(
            f"pipeline.num_actor_threads ({sizes.num_actor_threads}) must be at least the "
            f"number of mesh.actor_device_ids ({len(layout.actor_devices)}): "
            "every actor device needs a thread"
        )
    envs_lib.check_env_id(config.env.id)
    agent_module = resolve_agent(config.agent.name)
    envs_per_thread = []
    for thread_index in range(sizes.num_actor_threads):
        first_env = (jax.process_index() * sizes.num_actor_threads + thread_index) * (
            sizes.envs_per_thread
        )
        envs_per_thread.append(
            envs_lib.make_envs(config.env, sizes.envs_per_thread, seed=config.seed + first_env)
        )
    env_spec = envs_lib.env_spec_of(config.env, envs_per_thread[0])
    agent = agent_module.make(config, env_spec, sizes)
    return RunSetup(config, sizes, layout, envs_per_thread, env_spec, agent)


def init_learner_state(setup: RunSetup):
    """Creates the learner state already replicated on the learner mesh."""
    key = jax.random.key(setup.config.seed)
    return jax.jit(setup.agent.init, out_shardings=setup.layout.replicated)(key)


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


def train(config: ml_collections.ConfigDict, workdir: str):
    """Trains the configured agent; returns the final learner state.

    Writes (process 0 only) `config.json`, `metrics.jsonl`, TensorBoard events and
    `summary.json` into `workdir`.
    """
    setup = prepare(config)
    sizes, layout = setup.sizes, setup.layout
    is_main_process = jax.process_index() == 0
    logging.info(
        "process %d/%d: %s; %d envs, %d updates of %d steps",
        jax.process_index(),
        jax.process_count(),
        layout.describe(),
        sizes.num_envs,
        sizes.num_updates,
        sizes.steps_per_update,
    )
    state = init_learner_state(setup)
    pipeline = Pipeline(
        setup.agent,
        layout,
        sizes,
        setup.envs_per_thread,
        seed=config.seed,
        policy_lag=config.pipeline.policy_lag,
        clip_rewards=config.env.clip_rewards,
        learner_delay_s=config.debug.learner_delay_s,
        actor_delay_s=config.debug.actor_delay_s,
        transfer_guard=config.debug.transfer_guard,
    )
    _log_compiled(pipeline.compile_update(state))

    if is_main_process:
        os.makedirs(workdir, exist_ok=True)
        write_json(os.path.join(workdir, "config.json"), config.to_dict())
    metrics = MetricsLogger(
        workdir,
        sizes,
        every_updates=config.log.every_updates,
        tensorboard=config.log.tensorboard,
        is_main_process=is_main_process,
    )
    start = time.perf_counter()
    try:
        state = pipeline.run(state, on_update=metrics.record)
    finally:
        metrics.close()
    last = metrics.last_line or {}
    summary = metrics.summary(
        global_step=last.get("global_step", 0),
        updates=last.get("update", 0),
        checksum=params_checksum(setup.agent.policy_params(state)),
        extra={
            "policy_lag": config.pipeline.policy_lag,
            "layout": layout.describe(),
            "jax_version": jax.__version__,
            "agent": config.agent.name,
            "env_id": config.env.id,
        },
    )
    if is_main_process:
        write_json(os.path.join(workdir, "summary.json"), summary)
        logging.info("finished in %.1fs: %s", time.perf_counter() - start, summary)
    return state
