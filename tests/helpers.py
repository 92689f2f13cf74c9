"""Shared helpers for the tests: configs for the test agents and reading run outputs."""

import json
import os

from sebulba.config import base_config


def agent_config(agent_module, **overrides):
    """A run config for `agent_module` on CartPole with dotted-key overrides."""
    config = base_config(agent_module.get_config())
    config.env.num_envs = 8
    config.total_timesteps = 8 * config.agent.num_steps * 6
    config.log.every_updates = 1
    config.log.tensorboard = False
    for dotted, value in overrides.items():
        section, _, field = dotted.rpartition("__")
        target = config[section] if section else config
        target[field] = tuple(value) if isinstance(value, list) else value
    return config


def read_metrics(workdir):
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def read_summary(workdir):
    with open(os.path.join(workdir, "summary.json"), encoding="utf-8") as f:
        return json.load(f)
