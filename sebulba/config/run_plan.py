"""The one validation pass of a run: `plan(config)` checks a config and returns its plan.

The plan is what a run is before any env or program exists: its sizes, device layout,
env spec and agent. Every command gets its config checked here, by this one function,
before it builds anything:

* `train.train` (so `python -m sebulba.main`, and each seed of `--seeds`): the whole
  plan for this process's devices;
* `python -m sebulba.check`: the whole plan for the devices of a slice that is not
  attached;
* `sebulba.load_policy` (so `python -m sebulba.evaluate`): the whole plan of the stored
  config for the one device the policy acts on;
* `python -m sebulba.main` before it imports JAX or envpool, and `python -m sebulba.sweep`
  for every run of a sweep before starting any: the values alone (`values_only`).

Each concern has one place, and the pass runs them cheapest first:

1. values, which need neither JAX nor envpool: every size and divisibility rule
   (`sebulba.config.sizes`), the run-level values (`sebulba.config.check_run_config`),
   every joint task's share of the envs (`sebulba.environments.tasks`), a built-in
   agent's hyperparameter ranges (`sebulba.agents.defaults`) and its size rules
   (`sebulba.agents.size_rules`: minibatches, gradient accumulation, a replay buffer),
   a population's `pbt` section (`sebulba.pbt.settings`);
2. devices: `mesh.*_device_ids` against the devices (`sebulba.mesh`), and a thread for
   every actor device;
3. envs: every task id (envpool's registry, or a JAX suite's), what an Anakin run cannot
   do (`sebulba.anakin.runner.check_config`), `env.kwargs` and each task's spec, and the
   spaces joint tasks share;
4. the agent: `agent.name` and its section (`sebulba.agents.resolve_agent`), then the
   agent's own checks against the spec and sizes (network vs observation, minibatches).

A failure is a `ConfigError` whose message is one line naming the field; each command
reports it in its own way (`sebulba.main`: `sebulba: config error: ...`, exit 2).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import ml_collections

from sebulba.agents.defaults import check_builtin_ranges
from sebulba.agents.size_rules import check_builtin_sizes
from sebulba.config import check_run_config
from sebulba.config.sizes import Sizes, derive_sizes
from sebulba.environments import tasks
from sebulba.errors import ConfigError
from sebulba.pbt.settings import in_one_program as trains_a_population
from sebulba.pbt.settings import settings_of

if TYPE_CHECKING:  # The values alone are checked before JAX is imported.
    import jax

    from sebulba.agents.api import Agent, EnvSpec
    from sebulba.mesh import DeviceLayout


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """A run as its config describes it, checked, before any env or program exists.

    `layout`, `env_spec` and `agent` are None in the plan of `plan(..., values_only=True)`.
    """

    sizes: Sizes
    layout: DeviceLayout | None
    env_spec: EnvSpec | None
    agent: Agent | None
    is_anakin: bool = False  # env.id names a JAX-native env: the Anakin runner runs it.


def plan(
    config: ml_collections.ConfigDict,
    devices: Sequence[jax.Device] | None = None,
    process_index: int | None = None,
    *,
    num_processes: int | None = None,
    values_only: bool = False,
) -> RunPlan:
    """Checks the config and builds its sizes, device layout, env spec and agent.

    Args:
      config: the run's config.
      devices: every device of the run (default `jax.devices()`; `sebulba.check` passes
        a TPU topology's, `load_policy` the one it acts on); the run has one process per
        distinct `process_index`.
      process_index: the process to lay out (default `jax.process_index()`).
      num_processes: the processes of the run, if not those `devices` span (`load_policy`
        rebuilds on one device the agent that several processes trained; the sizes
        count every process's envs). With `values_only`, None means not known (a SLURM
        sweep's runs): a rule that more processes could meet (every joint task needs an
        env) is then left to the run.
      values_only: check only what needs neither JAX nor envpool (step 1 of the module
        docstring); `devices` and `process_index` are not used.

    Raises:
      ConfigError: with one line naming the offending field.
    """
    if values_only:
        return RunPlan(_check_values(config, num_processes), None, None, None)

    import jax

    from sebulba.agents import resolve_agent
    from sebulba.agents.api import plays_self_play
    from sebulba.anakin import runner as anakin_runner
    from sebulba.environments import envpool_pools, task_checks
    from sebulba.mesh import build_layout

    devices = jax.devices() if devices is None else list(devices)
    if num_processes is None:
        num_processes = len({device.process_index for device in devices})
    sizes = _check_values(config, num_processes)
    layout = build_layout(config.mesh, devices, process_index)
    if sizes.num_actor_threads < len(layout.actor_devices):
        raise ConfigError(
            f"pipeline.num_actor_threads ({sizes.num_actor_threads}) must be at least the "
            f"number of mesh.actor_device_ids ({len(layout.actor_devices)}): "
            "every actor device needs a thread"
        )
    task_ids = tasks.task_ids(config.env)
    for index, task_id in enumerate(task_ids):
        # With env.ids set, env.id is ignored: errors name the field the task came from.
        task_checks.check_env_id(task_id, f"env.ids[{index}]" if config.env.ids else "env.id")
    is_anakin = anakin_runner.check_config(config, task_ids)
    if trains_a_population(config) and not is_anakin:
        raise ConfigError(
            f"pbt.population trains its members as one program, which needs a JAX env "
            f"(Anakin); env.id {task_ids[0]!r} is an envpool task: `python -m sebulba.pbt "
            "--config=... --set pbt.population=N` trains a population of separate runs"
        )
    agent_module = resolve_agent(config.agent.name, config.agent)
    specs = envpool_pools.task_env_specs(config.env, task_ids)
    tasks.check_compatible(specs)
    env_spec = specs[task_ids[0]]
    if env_spec.game is not None and not plays_self_play(agent_module):
        raise ConfigError(
            f"env.id {env_spec.env_id!r} is a two-player game, which only a self-play agent "
            f"plays (agent.name 'alphazero'): agent.name {config.agent.name!r} would learn "
            "from rewards that change sides every move"
        )
    agent = agent_module.make(config, env_spec, sizes)
    return RunPlan(sizes, layout, env_spec, agent, is_anakin)


def _check_values(config: ml_collections.ConfigDict, num_processes: int | None) -> Sizes:
    """Step 1, what needs neither JAX nor envpool; the sizes (of one process if None)."""
    sizes = derive_sizes(config, num_processes=num_processes or 1)
    check_run_config(config)
    if num_processes is not None:  # Every task has an env (more processes: more envs).
        tasks.task_layout(config, sizes.num_envs)
    check_builtin_ranges(config.agent)
    settings_of(config, sizes)  # The `pbt` section, if any.
    # A process count not known yet leaves the rules that count every process's envs.
    check_builtin_sizes(config.agent, sizes, processes_known=num_processes is not None)
    return sizes
