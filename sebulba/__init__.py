"""sebulba: Podracer-Sebulba distributed reinforcement learning on JAX.

The public API, imported on first use so that `import sebulba` stays cheap:

    sebulba.train.train(config, workdir)      # train; returns the final learner state
    sebulba.base_config(agent_section)        # every run-level key around an agent's
    sebulba.plan(config)                      # check a config: sizes, devices, spec, agent
    sebulba.load_policy(workdir)(obs)         # act with a trained checkpoint
    sebulba.Agent, sebulba.EnvSpec, sebulba.Rollout   # the agent contract
"""

from __future__ import annotations

import importlib
from typing import Any

from sebulba.runtime import platforms as _platforms

# Before any backend starts: library callers (`train.train`, `load_policy`, evaluation
# from Python) reach JAX through this package, and on a machine without an accelerator
# where libtpu is installed (the [test] extra) JAX would print libtpu's errors about the
# TPU VM it cannot find. Wherever an accelerator may exist, nothing changes.
_platforms.skip_absent_accelerators()
# And where JAX's CUDA plugin is installed on it (the [test] and [gpu-check] extras), its
# libraries' notices that they found no CUDA driver.
_platforms.load_cuda_plugin_quietly()

# Public name -> (module, attribute; None: the module itself). Not `sebulba.evaluate`:
# its command-line flags would clash with `sebulba.main`'s in one process.
_EXPORTS = {
    "train": ("sebulba.train", None),
    "base_config": ("sebulba.config", "base_config"),
    "plan": ("sebulba.config.run_plan", "plan"),
    "RunPlan": ("sebulba.config.run_plan", "RunPlan"),
    "load_policy": ("sebulba.policy", "load_policy"),
    "Policy": ("sebulba.policy", "Policy"),
    "PolicyError": ("sebulba.policy", "PolicyError"),
    "Agent": ("sebulba.agents.api", "Agent"),
    "EnvSpec": ("sebulba.agents.api", "EnvSpec"),
    "Rollout": ("sebulba.agents.api", "Rollout"),
    "ConfigError": ("sebulba.errors", "ConfigError"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'sebulba' has no attribute {name!r}")
    module_name, attribute = _EXPORTS[name]
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value  # Later lookups skip this function.
    return value
