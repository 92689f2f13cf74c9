"""What a sweep is: its definition, its runs, their directories, checked before any run.

A sweep is the cartesian product of configs, `--set` settings and seeds. Run `i` of a
sweep is the same run whichever way it is executed (locally by `sebulba.sweep`, or as
task `i` of a SLURM job array), and always lives in the same directory:

    WORKDIR/[config=NAME,]KEY=VALUE,.../seed=S

where only the keys given more than one value (and `config=` only for several configs)
name the directory; a sweep with nothing but seeds puts its runs in `WORKDIR/seed=S`.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import itertools
import json
import os
import re
from typing import Any

from ml_collections import config_dict

from sebulba.config.run_plan import plan
from sebulba.errors import ConfigError
from sebulba.runtime import workdir as workdir_lib

# Characters kept in a directory name; every other one becomes "_".
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")
_MAX_NAME_BYTES = 255  # The usual limit on one path component.
_OPENING = {"(": ")", "[": "]", "{": "}"}


def split_values(text: str) -> list[str]:
    """Splits `V1,V2,...` on the commas that are outside brackets and quotes.

    `'(0,1),(2,3)'` gives `['(0,1)', '(2,3)']`; `'3e-4,1e-3'` gives `['3e-4', '1e-3']`.
    """
    values, current, closing, quote = [], [], [], None
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in _OPENING:
            closing.append(_OPENING[char])
        elif closing and char == closing[-1]:
            closing.pop()
        elif char == "," and not closing:
            values.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    values.append("".join(current).strip())
    if quote or closing:
        raise ConfigError(f"{text!r}: unbalanced {quote or closing[-1]!r}")
    if any(not value for value in values):
        raise ConfigError(f"{text!r}: empty value (values are separated by commas)")
    return values


def safe_name(text: str) -> str:
    """A deterministic, filesystem-safe form of `text` for a directory name.

    Brackets, quotes and spaces are dropped, commas inside a value become "+" and any
    other character outside [A-Za-z0-9._+-] becomes "_": `'(1, 2)'` -> `1+2`.
    """
    text = re.sub(r"[()\[\]{}'\" ]", "", text).rstrip(",")
    return _UNSAFE.sub("_", text.replace(",", "+"))


def config_name(config: str) -> str:
    """`configs/ppo_atari.py:smoke` -> `ppo_atari:smoke` (made safe: `ppo_atari_smoke`)."""
    path, _, arg = config.partition(":")
    stem = os.path.splitext(os.path.basename(path))[0]
    return safe_name(f"{stem}:{arg}" if arg else stem)


@dataclasses.dataclass(frozen=True)
class Run:
    """One run of a sweep: a config, the values of the swept keys, a seed, a directory."""

    index: int
    config: str  # FILE[:ARG], as given to sebulba.main's --config.
    setting: tuple[tuple[str, str], ...]  # (key, value) of every --set key, in order.
    seed: int
    workdir: str  # WORKDIR/<setting name>/seed=<seed>
    setting_name: str  # The directory of the setting relative to WORKDIR ("" if none).

    def main_arguments(self) -> list[str]:
        """The `python -m sebulba.main` arguments of this run."""
        overrides = [f"--config.{key}={value}" for key, value in self.setting]
        return [
            f"--config={self.config}",
            f"--workdir={self.workdir}",
            f"--config.seed={self.seed}",
            *overrides,
        ]

    @property
    def summary_path(self) -> str:
        return os.path.join(self.workdir, "summary.json")

    @property
    def done(self) -> bool:
        """A run is done once sebulba.main wrote summary.json, which it does only at the end."""
        return os.path.exists(self.summary_path)


@dataclasses.dataclass(frozen=True)
class Sweep:
    """The definition of a sweep; `runs()` lists its runs in their fixed order."""

    workdir: str
    configs: tuple[str, ...]
    seeds: tuple[int, ...]
    settings: tuple[tuple[str, tuple[str, ...]], ...]  # (key, values) per --set.

    def definition(self) -> dict:
        """What makes two sweeps the same (stored in sweep.json, compared on resume)."""
        return {
            "configs": list(self.configs),
            "seeds": list(self.seeds),
            "set": [[key, list(values)] for key, values in self.settings],  # Order matters.
        }

    def runs(self) -> list[Run]:
        """Configs, then settings (first --set key slowest), then seeds."""
        keys = [key for key, _ in self.settings]
        varying = [key for key, values in self.settings if len(values) > 1]
        runs = []
        for config in self.configs:
            for values in itertools.product(*(values for _, values in self.settings)):
                setting = tuple(zip(keys, values, strict=True))
                parts = [f"config={config_name(config)}"] if len(self.configs) > 1 else []
                parts += [f"{key}={safe_name(value)}" for key, value in setting if key in varying]
                name = ",".join(parts)
                for seed in self.seeds:
                    workdir = os.path.join(self.workdir, name, f"seed={seed}")
                    runs.append(Run(len(runs), config, setting, seed, workdir, name))
        return runs


def parse_sweep(workdir: str, configs: list[str], seeds: str, settings: list[str] | None) -> Sweep:
    """Builds the sweep from the command line's values; raises ConfigError if malformed."""
    try:
        seed_list = tuple(int(seed) for seed in split_values(seeds))
    except ValueError:
        raise ConfigError(f"--seeds={seeds}: expected integers separated by commas") from None
    if len(set(seed_list)) != len(seed_list):
        raise ConfigError(f"--seeds={seeds}: a seed is repeated")
    if len(set(configs)) != len(configs):
        raise ConfigError("--config: a config is given twice")
    parsed: list[tuple[str, tuple[str, ...]]] = []
    for item in settings or ():
        key, equals, text = item.partition("=")
        key = key.strip().removeprefix("config.")
        if not equals or not key:
            raise ConfigError(f"--set {item}: expected KEY=V1,V2,...")
        if key == "seed":
            raise ConfigError("--set seed=...: give seeds with --seeds")
        if key in (k for k, _ in parsed):
            raise ConfigError(f"--set {key}: the key is given twice")
        try:
            values = split_values(text)
        except ConfigError as error:
            raise ConfigError(f"--set {key}={error}") from None
        if len({_comparable(value) for value in values}) != len(values):
            raise ConfigError(f"--set {key}={text}: a value is repeated")
        parsed.append((key, tuple(values)))
    sweep = Sweep(workdir, tuple(configs), seed_list, tuple(parsed))
    _check_names(sweep.runs())
    return sweep


def _comparable(text: str) -> Any:
    """A --set value as the config will hold it, where Python reads it as a literal, so
    that 1e-3 and 0.001 are one value (two runs of the same setting otherwise)."""
    try:
        value = ast.literal_eval(text.strip())
        hash(value)  # A list, say, is compared as written.
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
    return value


def _check_names(runs: list[Run]) -> None:
    seen: dict[str, Run] = {}
    for run in runs:
        for part in run.setting_name.split(","):
            if len(part.encode()) > _MAX_NAME_BYTES:
                raise ConfigError(f"--set: the directory name {part[:60]}... is too long")
        other = seen.setdefault(run.workdir, run)
        if other is not run:
            raise ConfigError(
                f"--set: settings {dict(other.setting)} and {dict(run.setting)} would share "
                f"the directory {run.workdir}; their values differ only in characters "
                "replaced by '_' in directory names"
            )


def load_config(config: str, overrides: list[str]) -> config_dict.ConfigDict:
    """Loads FILE[:ARG] and applies `--config.KEY=VALUE` overrides as sebulba.main does."""
    from absl import flags
    from ml_collections import config_flags

    argv = ["sebulba.sweep", f"--config={config}", *overrides]
    flag_values = flags.FlagValues()
    config_flags.DEFINE_config_file(
        "config", None, "", flag_values=flag_values, lock_config=True, sys_argv=argv
    )
    flag_values(argv)
    value = flag_values["config"].value
    if not isinstance(value, config_dict.ConfigDict):
        value.to_dict()  # Raises the deferred error of an unloadable file.
    return value


def _last_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


def _missing_key(config: config_dict.ConfigDict, key: str) -> str | None:
    node, walked = config, []
    for part in key.split("."):
        if isinstance(node, config_dict.ConfigDict) and part in node:
            node, walked = node[part], [*walked, part]
            continue
        if not isinstance(node, config_dict.ConfigDict):
            return f"--set {key}: {'.'.join(walked)} is not a config section"
        close = difflib.get_close_matches(part, list(node.keys()), n=1)
        hint = f' (did you mean "{".".join([*walked, close[0]])}"?)' if close else ""
        return f"--set {key}: no such key{hint}"
    if isinstance(node, config_dict.ConfigDict):
        return f"--set {key}: is a config section, not a value"
    return None


def validate(sweep: Sweep) -> None:
    """Loads every config and applies every --set value once; raises ConfigError if any fails.

    Checks that each config loads, each key exists and each value parses as its field's
    type, exactly as sebulba.main's --config.KEY overrides would.
    """
    for config in sweep.configs:
        try:
            loaded = load_config(config, [])
        except Exception as error:  # noqa: BLE001 - any load error becomes one line.
            raise ConfigError(f"--config={config}: cannot load it: {_last_line(error)}") from None
        for key, values in sweep.settings:
            missing = _missing_key(loaded, key)
            if missing:
                raise ConfigError(missing if len(sweep.configs) == 1 else f"{missing} in {config}")
            for value in values:
                try:
                    load_config(config, [f"--config.{key}={value}"])
                except Exception as error:  # noqa: BLE001 - any parse error becomes one line.
                    raise ConfigError(f"--set {key}={value}: {_last_line(error)}") from None


def check_runs(sweep: Sweep, num_processes: int | None = 1) -> None:
    """Checks every run's config as sebulba.main does before it imports JAX; call after
    `validate`.

    That is the values part of a run's validation pass (`sebulba.config.run_plan`):
    sizes and divisibility, run-level values, a built-in agent's ranges. What needs the
    devices or the envs (device ids, env ids, network vs observation), and the rules an
    agent checks when it is built (e.g. agent.num_minibatches dividing agent.num_steps),
    are left to each run, which reports them.

    Args:
      num_processes: the processes of each run; None: not known (a SLURM array's runs).

    Raises:
      ConfigError: "run DIR: " and the run's own one-line error, for the first run that
        fails.
    """
    loaded: dict[tuple, config_dict.ConfigDict] = {}  # Seeds share their setting's config.
    for run in sweep.runs():
        config = loaded.get((run.config, run.setting))
        if config is None:
            overrides = [f"--config.{key}={value}" for key, value in run.setting]
            config = loaded[run.config, run.setting] = load_config(run.config, overrides)
        config.seed = run.seed
        try:
            plan(config, num_processes=num_processes, values_only=True)
        except ConfigError as error:
            where = os.path.relpath(run.workdir, sweep.workdir)
            raise ConfigError(f"run {where}: {error}") from None


def read_definition(workdir: str) -> dict | None:
    """The definition stored in WORKDIR/sweep.json, or None if there is none."""
    path = os.path.join(workdir, "sweep.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f).get("definition")


def check_workdir(sweep: Sweep, report_only: bool = False) -> None:
    """Refuses a WORKDIR that holds another sweep, or files that are not a sweep's.

    `report_only`: runs started by hand (e.g. with tpu.sh, from the --dry-run list) into
    a WORKDIR without sweep.json may be reported on.
    """
    stored = read_definition(sweep.workdir)
    if stored is None:
        # The lock file of a sweep stopped before it wrote sweep.json is no one's file.
        found = os.listdir(sweep.workdir) if os.path.isdir(sweep.workdir) else []
        if not report_only and [name for name in found if name != workdir_lib.LOCK_FILE]:
            raise ConfigError(
                f"--workdir={sweep.workdir} is not empty and holds no sweep.json; "
                "give a new or empty directory"
            )
        return
    definition = sweep.definition()
    if stored != definition:
        why = _not_a_growth(stored, definition)
        if why is not None:
            raise ConfigError(
                f"--workdir={sweep.workdir} holds a different sweep ({why}); rerun it with "
                "its own arguments to resume it, add seeds or values to grow it, or give "
                "another --workdir"
            )


def _not_a_growth(stored: dict, new: dict) -> str | None:
    """Why `new` is not `stored` grown by more seeds or values; None when it is.

    A sweep grows by seeds, and by values of a `--set` key that already had several:
    every run it had keeps its directory, so finished runs are kept and the new ones run.
    A key that had one value is left out of the directory names, so more values for it
    would rename every run; that, other configs or keys, or fewer seeds or values, make
    another sweep.
    """
    if stored.get("configs") != new["configs"]:
        return f"configs {stored.get('configs')} here, {new['configs']} now"
    missing_seeds = sorted(set(stored.get("seeds", ())) - set(new["seeds"]))
    if missing_seeds:
        return f"it has seeds {stored['seeds']}; --seeds lacks {missing_seeds}"
    stored_set = [(key, values) for key, values in stored.get("set", ())]
    if [key for key, _ in stored_set] != [key for key, _ in new["set"]]:
        return (
            f"--set keys {[key for key, _ in stored_set]} here, "
            f"{[key for key, _ in new['set']]} now"
        )
    for (key, old), (_, values) in zip(stored_set, new["set"], strict=True):
        missing = [value for value in old if value not in values]
        if missing:
            return f"it has {key}={','.join(old)}; --set lacks {','.join(missing)}"
        if len(old) == 1 and len(values) > 1:
            return (
                f"{key} had the one value {old[0]}, which its run directories do not name; "
                "more values would rename every run"
            )
    return None
