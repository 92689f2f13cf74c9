"""What both runners know about environments, and the Sebulba pipeline's envpool pools.

  spaces            the data contract's spaces: `EnvSpec`, `ArraySpec` observation
                    pytrees, `Discrete` / `Box` / `MultiDiscrete` actions, host-side
                    conversions
  tasks             joint multi-task training: which task each global env index belongs to
  task_metrics      episode statistics per task, Atari human-normalised aggregates
  env_config        the run config's `env` section (keys, defaults) and `env.kwargs`' form
  env_catalog       `python -m sebulba.environments.env_catalog [FAMILY]`: the accepted
                    tasks by family
  envpool_registry  envpool, imported on first use after libEGL; the supported families
  system_libraries  the system libraries a family needs (Qt 5, EGL), checked in one line
  task_checks       the tasks and `env.kwargs` no run can use, refused in one line
  envpool_pools     envpool's pools: the family settings (Atari per Machado et al.), specs
  thread_envs       an actor thread's envs: pools per task block, split halves, workers
  episodes          episode returns and lengths on the host, envpool's auto-reset steps

sebulba/anakin/suites/ adapts the JAX suites (Anakin's).
"""
