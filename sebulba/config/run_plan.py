"""The one validation pass of a run: `plan(config)` checks a config and returns its plan.

The plan is what a run is before any env or program exists: its sizes, device layout,
env spec and agent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import ml_collections

from sebulba import envs as envs_lib
from sebulba.agents import resolve_agent
from sebulba.agents.api import Agent, EnvSpec
from sebulba.anakin import runner as anakin_runner
from sebulba.config import check_run_config
from sebulba.config.sizes import Sizes, derive_sizes
from sebulba.environments import tasks
from sebulba.errors import ConfigError
from sebulba.mesh import DeviceLayout, build_layout


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """A run as its config describes it, checked, before any env or program exists."""

    sizes: Sizes
    layout: DeviceLayout
    env_spec: EnvSpec
    agent: Agent
    is_anakin: bool = False  # env.id names a JAX-native env: the Anakin runner runs it.


def plan(
    config: ml_collections.ConfigDict,
    devices: Sequence[jax.Device] | None = None,
    process_index: int | None = None,
) -> RunPlan:
    """Checks the config and builds its sizes, device layout, env spec and agent.

    Args:
      config: the run's config.
      devices: every device of the run (default `jax.devices()`; `sebulba.check` passes
        a TPU topology's); the run has one process per distinct `process_index`.
      process_index: the process to lay out (default `jax.process_index()`).

    Raises:
      ConfigError: with one line naming the offending field.
    """
    devices = jax.devices() if devices is None else list(devices)
    num_processes = len({device.process_index for device in devices})
    sizes = derive_sizes(config, num_processes=num_processes)
    check_run_config(config)
    layout = build_layout(config.mesh, devices, process_index)
    if sizes.num_actor_threads < len(layout.actor_devices):
        raise ConfigError(
            f"pipeline.num_actor_threads ({sizes.num_actor_threads}) must be at least the "
            f"number of mesh.actor_device_ids ({len(layout.actor_devices)}): "
            "every actor device needs a thread"
        )
    if config.pipeline.overlap_env_steps not in (True, False):
        raise ConfigError(
            f"pipeline.overlap_env_steps must be True or False, got "
            f"{config.pipeline.overlap_env_steps!r}"
        )
    if config.pipeline.overlap_env_steps and sizes.envs_per_thread < 2:
        raise ConfigError(
            f"pipeline.overlap_env_steps splits each thread's envs in two halves: "
            f"env.num_envs ({sizes.envs_per_thread}) must be at least 2"
        )
    layout_of_tasks = tasks.task_layout(config, sizes.num_envs)
    for index, task_id in enumerate(layout_of_tasks.ids):
        # With env.ids set, env.id is ignored: errors name the field the task came from.
        envs_lib.check_env_id(task_id, f"env.ids[{index}]" if config.env.ids else "env.id")
    is_anakin = anakin_runner.check_config(config, layout_of_tasks.ids)
    agent_module = resolve_agent(config.agent.name, config.agent)
    specs = envs_lib.task_env_specs(config.env, layout_of_tasks.ids)
    tasks.check_compatible(specs)
    env_spec = specs[layout_of_tasks.ids[0]]
    agent = agent_module.make(config, env_spec, sizes)
    return RunPlan(sizes, layout, env_spec, agent, is_anakin)
