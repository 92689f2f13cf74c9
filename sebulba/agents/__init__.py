"""Agents: one module each, found by name or by dotted module path.

An agent module provides `get_config()` and `make(config, env_spec, sizes) -> Agent`;
see `sebulba.agents.api` and docs/agents.md.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ml_collections import ConfigDict

from sebulba.errors import ConfigError

BUILTIN_AGENTS = {"ppo": "sebulba.agents.ppo", "impala": "sebulba.agents.impala"}


def resolve_agent(name: str, section: ConfigDict | None = None) -> ModuleType:
    """Imports the agent module named by `agent.name`: a built-in name or a dotted path.

    With `section` (the config's `agent` section), also checks that it defines every key
    of the module's `get_config()`, so that switching `agent.name` on the command line
    to an agent with other hyperparameters fails here, naming the missing keys.
    """
    module_name = BUILTIN_AGENTS.get(name, name)
    if name not in BUILTIN_AGENTS and "." not in name:
        raise ConfigError(
            f"agent.name {name!r} is unknown: use one of {', '.join(sorted(BUILTIN_AGENTS))} "
            "or the dotted path of a module providing get_config() and make()"
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise ConfigError(f"agent.name {name!r} cannot be imported: {error}") from None
    for required in ("get_config", "make"):
        if not callable(getattr(module, required, None)):
            raise ConfigError(f"agent.name {name!r}: module {module_name} has no {required}()")
    missing = [] if section is None else sorted(set(module.get_config()) - set(section))
    if missing:
        raise ConfigError(
            f"agent.name {name!r} needs {', '.join('agent.' + key for key in missing)}, which "
            f"this config lacks: build its agent section from {module_name}.get_config()"
        )
    return module
