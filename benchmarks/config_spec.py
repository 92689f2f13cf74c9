"""A benchmark's `--config=path/to/config.py[:arg]` and `--set KEY=VALUE` flags, read."""

from __future__ import annotations

import ast
import importlib.util


def load_config(spec: str):
    """`path/to/config.py[:arg]` -> the config its `get_config(arg)` returns."""
    path, _, arg = spec.partition(":")
    module_spec = importlib.util.spec_from_file_location("benchmarked_config", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.get_config(arg or None)


def apply_overrides(config, overrides: list[str]) -> None:
    """Applies `KEY=VALUE` overrides (VALUE as a Python literal, else a string)."""
    for item in overrides:
        key, _, text = item.partition("=")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text
        *parents, name = key.split(".")
        node = config
        for parent in parents:
            node = node[parent]
        node[name] = value
