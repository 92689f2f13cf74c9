"""What both runners know about environments, beside the envpool pools of sebulba/envs.py.

  spaces        the data contract's spaces: `EnvSpec`, `ArraySpec` observation pytrees,
                `Discrete` / `Box` / `MultiDiscrete` actions, host-side conversions
  tasks         joint multi-task training: which task each global env index belongs to
  task_metrics  episode statistics per task, Atari human-normalised aggregates
  env_config    the run config's `env` section (keys, defaults) and `env.kwargs`' form
  env_catalog   `python -m sebulba.environments.env_catalog [FAMILY]`: the accepted tasks by family

sebulba/envs.py builds envpool's pools (the Sebulba pipeline's envs);
sebulba/anakin/suites/ adapts the JAX suites (Anakin's).
"""
