"""The `--config` flag of the command lines, and its errors as one line.

`python -m sebulba.main` and `python -m sebulba.check` take the same `--config=FILE[:ARG]`
with `--config.KEY=VALUE` overrides; a file that does not load, an unknown key, a bad
value or a config key given as a flag of its own (`--total_timesteps=...`) is reported
in one stderr line that names it, with exit status 2. `env.kwargs` (envpool settings)
takes keys the config file does not set only whole, as a dict literal:
`--config.env.kwargs="{'num_levels': 200}"`; a per-key override of a new key says so.
"""

from __future__ import annotations

import difflib
import re
import sys

from absl import flags
from ml_collections import config_dict, config_flags

from sebulba.config import flag_errors

CONFIG = config_flags.DEFINE_config_file(
    "config",
    None,
    "The run's config: a file of configs/ that defines get_config(arg), optionally with "
    "its argument as FILE[:ARG] (configs/ppo_atari.py:Pong-v5); any key is overridden "
    "with --config.KEY=VALUE (--config.env.num_envs=16).",
    lock_config=True,
)
# The config override flags: --config.a.b=VALUE and --noconfig.a.b.
_OVERRIDE = re.compile(r"^--?(?:no)?config\.([^=\s]+)")
# The one config key that holds a dict of arbitrary settings (for envpool.make).
_DICT_KEY = "env.kwargs"


def config_error(message: str) -> None:
    print(f"sebulba: config error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def config_argument(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg.startswith(("--config=", "-config=")):
            return arg.split("=", 1)[1]
        if arg in ("--config", "-config") and i + 1 < len(argv):
            return argv[i + 1]
    return None


def _load_config(argv: list[str]) -> config_dict.ConfigDict | None:
    """The config file's config, without overrides; None if it cannot be loaded."""
    path = config_argument(argv)
    if path is None:
        return None
    try:
        config = flags.FLAGS["config"].parser.parse(path)
    except Exception:  # noqa: BLE001 - the original parse error is reported instead.
        return None
    return config if isinstance(config, config_dict.ConfigDict) else None


def _leaf_paths(config: config_dict.ConfigDict, prefix: str = "") -> dict[str, object]:
    """Every field of `config` by dotted path, with its value."""
    paths = {}
    for key, value in config.items():
        if isinstance(value, config_dict.ConfigDict):
            paths.update(_leaf_paths(value, f"{prefix}{key}."))
        else:
            paths[f"{prefix}{key}"] = value
    return paths


def _section(config: config_dict.ConfigDict, path: str) -> config_dict.ConfigDict | None:
    """The section at dotted `path` of `config` (e.g. `agent`), or None if it is a value."""
    node = config
    for key in path.split("."):
        if not isinstance(node, config_dict.ConfigDict) or key not in node:
            return None
        node = node[key]
    return node if isinstance(node, config_dict.ConfigDict) else None


def _unknown_override(argv: list[str]) -> str | None:
    """Describes the first `--config.KEY` override whose KEY is not in the config."""
    config = _load_config(argv)
    if config is None:
        return None
    for arg in argv[1:]:
        match = _OVERRIDE.match(arg)
        if match is None:
            continue
        node, walked = config, []
        for key in match.group(1).split("."):
            if isinstance(node, config_dict.ConfigDict) and key in node:
                node = node[key]
                walked.append(key)
                continue
            if not isinstance(node, config_dict.ConfigDict) or "[" in key:
                break  # Indexing into a value: left to ml_collections.
            if walked == list(_DICT_KEY.split(".")):
                return _new_dict_key(match.group(1), key, arg)
            close = difflib.get_close_matches(key, list(node.keys()), n=1)
            hint = f' (did you mean "{".".join([*walked, close[0]])}"?)' if close else ""
            return f"--config.{match.group(1)}: no such key{hint}"
    return None


def _new_dict_key(path: str, key: str, arg: str) -> str:
    """`--config.env.kwargs.KEY=V` for a KEY the config file does not set: the dict form.

    The config is locked, so ml_collections adds no key from the command line; the whole
    dict can be given as a literal instead.
    """
    value = arg.split("=", 1)[1] if "=" in arg else "VALUE"
    return (
        f"--config.{path}: the config file sets no {_DICT_KEY}.{key}; give the whole dict, "
        f"e.g. --config.{_DICT_KEY}=\"{{'{key}': {value}}}\" (it replaces the file's "
        f"{_DICT_KEY}, so repeat any key the file sets)"
    )


def _config_flag_hint(argv: list[str], error: BaseException) -> str | None:
    """`--total_timesteps=1000` means `--config.total_timesteps=1000`: says so."""
    match = re.match(r"Unknown command line flag '([^']+)'", str(error))
    config = _load_config(argv) if match else None
    if config is None:
        return None
    name = match.group(1)
    names = [name, name[2:]] if name.startswith("no") else [name]  # --noKEY for booleans.
    fields = [
        path
        for path in _leaf_paths(config)
        if any(path == n or path.endswith(f".{n}") for n in names)
    ]
    if not fields:
        return None
    suggestions = " or ".join(f"--config.{path}" for path in fields)
    return f"--{name}: no such flag; did you mean {suggestions}?"


def _bad_override_value(argv: list[str], error: BaseException) -> str | None:
    """`--config.KEY=VALUE` whose VALUE does not parse: names the field and its type."""
    match = re.match(r"flag --(?:no)?config\.([^=]+)=", str(error))
    if match and match.group(1) == _DICT_KEY:
        given = next((a for a in argv if a.startswith(f"--config.{_DICT_KEY}=")), _DICT_KEY)
        return (
            f"{given}: {_DICT_KEY} takes a dict literal, e.g. "
            f"--config.{_DICT_KEY}=\"{{'num_levels': 200}}\" (or --config.{_DICT_KEY}.KEY=VALUE "
            "for a key the config file sets)"
        )
    config = _load_config(argv) if match else None
    if config is None:
        return None
    section = _section(config, match.group(1))
    if section is not None:  # `--config.agent=3`: absl would call a section a string.
        given = next(
            (a for a in argv if a.startswith(f"--config.{match.group(1)}=")),
            f"--config.{match.group(1)}",
        )
        # What `--config.agent=ppo` or `--config.env=Pong-v5` most likely meant.
        keys = [key for key in ("name", "id") if key in section] + list(_leaf_paths(section))
        example = keys[0] if keys else "KEY"
        return (
            f"{given}: {match.group(1)} is a section of the config, not a value; set its "
            f"fields one by one, e.g. --config.{match.group(1)}.{example}=VALUE"
        )
    expected = flag_errors.value_type_name(_leaf_paths(config).get(match.group(1)))
    described = flag_errors.bad_value(error, expected)
    return None if described is None else described[1]


def _one_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    if "Error whilst parsing config file" in lines[0]:
        return f"--config: get_config() raised {lines[-1]}"
    if isinstance(error, ImportError):
        return f"--config: cannot load the file: {lines[0]}"
    if lines[0].startswith(("Failed loading config file", "Configuration is not available")):
        return f"--config: cannot load the file: {lines[-1]}"
    return flag_errors.one_line(error)


def parse_flags(argv: list[str]) -> list[str]:
    """absl flag parsing that reports any flag or config error in one stderr line."""
    try:
        remaining = flags.FLAGS(argv)
        if not isinstance(CONFIG.value, config_dict.ConfigDict):
            CONFIG.value.to_dict()  # Raises the deferred error of an unloadable file.
    except SystemExit:
        raise
    except Exception as error:  # noqa: BLE001 - every parse error becomes one line.
        config_error(
            _unknown_override(argv)
            or _config_flag_hint(argv, error)
            or _bad_override_value(argv, error)
            or _one_line(error)
        )
    return remaining
