"""Which config keys may change when a run resumes, and the check that enforces it.

A resumed run continues another run's learner state, lag schedule, random streams and
learning-rate schedule, so it must be configured as that run was. Rerunning a workdir
that holds checkpoints (or starting from `ckpt.resume_from`) therefore compares the
resolved config with the run's stored `config.json` before any work: only the keys of
`MAY_CHANGE_ON_RESUME` may differ; any other difference is a `ConfigError` naming every
differing key with both values. docs/checkpointing.md shows the same table.
"""

from __future__ import annotations

import fnmatch
import json
import os
from typing import Any

import ml_collections

from sebulba import checkpoint as ckpt_lib
from sebulba.agents import resolve_agent
from sebulba.config import base_config
from sebulba.errors import ConfigError
from sebulba.pbt.settings import hyperparameter_names, member_of_runs

CONFIG_FILENAME = "config.json"

# Dotted keys (fnmatch patterns) that may differ between segments of one run, and why.
MAY_CHANGE_ON_RESUME: dict[str, str] = {
    "log.*": "logging only: what is written, how often, where",
    "ckpt.every_updates": "checkpoint cadence: when state is saved, not what it holds",
    "ckpt.max_to_keep": "how many old checkpoints stay on disk",
    "ckpt.async_save": "whether files are written in the background",
    "ckpt.resume_from": "used only while the workdir has no checkpoint of its own",
    "ckpt.stop_after_update": "where this segment stops, as a preemption would",
    "debug.*": "injected delays and transfer checks change timing, never which data is used",
    "env.num_threads": "envpool worker threads: speed only (sync mode steps every env alike)",
    "mesh.*": "device layout: numbers change only by float reduction order (resume tested)",
    "pipeline.num_actor_threads": "layout, if the global env count stays (the checkpoint checks)",
    "env.num_envs": "envs per actor thread: same rule as pipeline.num_actor_threads",
    "agent.minibatch_loop": "how the minibatch loop is compiled (scan or unrolled), not its maths",
    "pipeline.overlap_env_steps": "envs stepped whole or as two halves: same envs, keys and data",
    "pipeline.actor_loop": "envs stepped from Python or inside one XLA program: same data "
    "(on a GPU up to float rounding)",
    "pipeline.updates_per_call": "how many Anakin updates one program call runs: same updates",
    "pipeline.fused": "update and next rollout as one program or two: same data and updates",
}


# Keys holding a dict of settings (envpool's): each setting is compared on its own, and
# one set on one side only is "not set" on the other (the env's default applies there).
_DICT_VALUED = ("env.kwargs.",)


def may_change_on_resume(key: str) -> bool:
    """Whether the dotted config `key` may differ from the stored config on resume."""
    return any(fnmatch.fnmatchcase(key, pattern) for pattern in MAY_CHANGE_ON_RESUME)


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; values as JSON stores them (tuples become lists)."""
    flat = {}
    for name, value in json.loads(json.dumps(tree)).items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{name}."))
        else:
            flat[f"{prefix}{name}"] = value
    return flat


def stored_config_path(config: ml_collections.ConfigDict, workdir: str) -> str | None:
    """The `config.json` of the run this one resumes, or None for a fresh start.

    The workdir's own checkpoints come first (as on restore), then `ckpt.resume_from`
    when it lies in a workdir (a source without a config.json is checked by the
    checkpoint's metadata alone).
    """
    own = os.path.join(os.path.abspath(workdir), CONFIG_FILENAME)
    if ckpt_lib.list_steps(ckpt_lib.checkpoints_dir(workdir)):
        return own if os.path.isfile(own) else None
    if not config.ckpt.resume_from:
        return None
    directory, _ = ckpt_lib.resolve_source(config.ckpt.resume_from)
    source = os.path.join(os.path.dirname(directory), CONFIG_FILENAME)
    is_a_workdir = os.path.basename(directory) == ckpt_lib.CHECKPOINTS_DIRNAME
    return source if is_a_workdir and os.path.isfile(source) else None


def _defaults(config: ml_collections.ConfigDict) -> dict[str, Any]:
    return flatten(base_config(resolve_agent(config.agent.name).get_config()).to_dict())


def differences(
    stored: dict[str, Any], requested: dict[str, Any], defaults: dict[str, Any]
) -> list[str]:
    """Describes every key that differs and may not, as "key (stored X, requested Y)".

    A key the stored config lacks was added to sebulba after that run started: it
    ran with the key's default, so only the default is accepted. A setting inside
    `env.kwargs` differs if it is set on one side only or to another value.
    """
    found = []
    for key in sorted(set(stored) | set(requested)):
        if may_change_on_resume(key):
            continue
        if key.startswith(_DICT_VALUED) and (key not in stored or key not in requested):
            found.append(f"{key} (stored{_side(stored, key)}, requested{_side(requested, key)})")
        elif key not in requested:
            found.append(f"{key} (stored {stored[key]!r}, requested: no such key)")
        elif key not in stored:
            default = defaults.get(key)
            if key not in defaults or requested[key] != default:
                found.append(
                    f"{key} (stored: absent, default {default!r}, requested {requested[key]!r})"
                )
        elif stored[key] != requested[key]:
            found.append(f"{key} (stored {stored[key]!r}, requested {requested[key]!r})")
    return found


def _side(values: dict[str, Any], key: str) -> str:
    return f" {values[key]!r}" if key in values else ": not set"


def check(config: ml_collections.ConfigDict, workdir: str) -> None:
    """Refuses to resume a run whose stored config differs in a key that may not change.

    Reads only. Raises:
      ConfigError: in one line naming every differing key with both values.
    """
    path = stored_config_path(config, workdir)
    if path is None:
        return
    try:
        with open(path, encoding="utf-8") as f:
            stored = flatten(json.load(f))
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot read the stored config {path} to resume: {error}") from None
    found = differences(stored, flatten(config.to_dict()), _defaults(config))
    member = member_of_runs(config)
    if member is not None and stored.get("pbt.member") == member:
        # A population's member run: an exploit/explore step resumes it with new values of
        # the keys the population mutates (`python -m sebulba.pbt`, docs/pbt.md).
        mutated = {f"agent.{name}" for name in hyperparameter_names(config.pbt.hyperparameters)}
        found = [entry for entry in found if entry.split(" ", 1)[0] not in mutated]
    if found:
        raise ConfigError(
            f"this config differs from the run it resumes ({path}) in {'; '.join(found)}. "
            "A resume may change only logging, checkpoint, debug and layout keys "
            "(docs/checkpointing.md); start a new run in another --workdir instead"
        )
