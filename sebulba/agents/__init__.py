"""Agents: one module each, found by name or by dotted module path.

An agent module provides `get_config()` and `make(config, env_spec, sizes) -> Agent`;
see `sebulba.agents.api` and docs/agents.md.
"""

from __future__ import annotations

import glob
import importlib
import os
from types import ModuleType

from ml_collections import ConfigDict

from sebulba.errors import ConfigError

BUILTIN_AGENTS = {
    "ppo": "sebulba.agents.ppo",
    "impala": "sebulba.agents.impala",
    "pqn": "sebulba.agents.pqn",
    "dqn": "sebulba.agents.dqn",
    "sac": "sebulba.agents.sac",
    "muzero": "sebulba.agents.muzero",
    "alphazero": "sebulba.agents.alphazero",
}


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
        lacks = ", ".join("agent." + key for key in missing)
        owner = _builtin_owner(section, other_than=name)
        if owner is None or not _config_files(name):
            raise ConfigError(
                f"agent.name {name!r} needs {lacks}, which this config lacks: build its "
                f"agent section from {module_name}.get_config()"
            )
        raise ConfigError(
            f"agent.name {name!r}: this config's agent section holds {owner}'s "
            f"hyperparameters (it lacks {lacks}); use a config file built for {name} instead: "
            f"{' or '.join(_config_files(name))}"
        )
    return module


def _builtin_owner(section: ConfigDict, other_than: str) -> str | None:
    """The built-in agent whose `get_config()` the `agent` section was built from."""
    for name, module_name in BUILTIN_AGENTS.items():
        if name == other_than:
            continue
        keys = set(importlib.import_module(module_name).get_config())
        if keys <= set(section):
            return name
    return None


def _config_files(name: str) -> list[str]:
    """The repository's `configs/<name>_*.py` files (none in a non-editable install)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = sorted(glob.glob(os.path.join(root, "configs", f"{name}_*.py")))
    return [os.path.relpath(path, root) for path in paths]
