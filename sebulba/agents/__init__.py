"""Agents: one module each, found by name or by dotted module path.

An agent module provides `get_config()` and `make(config, env_spec, sizes) -> Agent`;
see `sebulba.agents.api` and docs/agents.md.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from sebulba.errors import ConfigError

BUILTIN_AGENTS = {"ppo": "sebulba.agents.ppo", "impala": "sebulba.agents.impala"}


def resolve_agent(name: str) -> ModuleType:
    """Imports the agent module named by `agent.name`: a built-in name or a dotted path."""
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
    return module
