"""A benchmark's `--config=path/to/config.py[:arg]` and `--set KEY=VALUE` flags, read."""

from __future__ import annotations

import argparse
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


def quiet_training_run(config) -> None:
    """Sets `config` up for a benchmark's training run: no TensorBoard, no checkpoints but
    the last, and only the run's last console line."""
    config.log.tensorboard = False
    config.log.console = "lines"
    config.log.console_every_s = 1e9
    config.ckpt.every_updates = 0


def benchmark_parser(doc: str, default: str | None = None) -> argparse.ArgumentParser:
    """A benchmark's flags parser, described by its docstring's first line, with `--config`
    (required unless given a default) and `--set`."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument(
        "--config", required=default is None, default=default, help="configs/FILE.py[:ARG]"
    )
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE override")
    return parser


def actor_and_learner_config(args):
    """The config `--config` and `--set` name, actor on device 0 and learner on device 1
    unless `--set` says otherwise, with XLA's GPU determinism set as the config asks.

    Every measurement then runs under the config's `debug.deterministic_gpu`, as a run does
    (JAX reads XLA_FLAGS once): `--set debug.deterministic_gpu=False` measures without it.
    """
    from sebulba.runtime import gpu_determinism

    config = load_config(args.config)
    config.mesh.actor_device_ids = (0,)
    config.mesh.learner_device_ids = (1,)
    apply_overrides(config, args.set)
    gpu_determinism.configure(config.debug.deterministic_gpu)
    return config
