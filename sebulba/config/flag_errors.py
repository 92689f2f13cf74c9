"""Command-line flag errors in one line of the user's words, not Python's.

absl reports a bad value as `flag --episodes=abc: invalid literal for int() with base
10: 'abc'` and a missing required flag as `flag --workdir=None: Flag --workdir must have
a value other than None.`; `sebulba.main` and `sebulba.evaluate` print these instead:
`--episodes=abc: expected an integer, got 'abc'` and `--workdir is required`.
"""

from __future__ import annotations

import re
from typing import Any

from absl import flags

# absl's IllegalFlagValueError text: "flag --NAME=VALUE: REASON".
_ILLEGAL_VALUE = re.compile(r"^flag --([\w.\-]+)=(.*?): (.*)$", re.DOTALL)
_MISSING = re.compile(r"must have a value other than None")

# absl flag types and config value types, as a user would name them.
_FLAG_TYPES = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "string": "a string",
}
_VALUE_TYPES = {
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "a string",
    tuple: "a tuple such as '(0,1)'",
    list: "a tuple such as '(0,1)'",
}


def value_type_name(value: Any) -> str | None:
    """How a message names the type of `value` (a config field's current value)."""
    for kind, name in _VALUE_TYPES.items():
        if isinstance(value, kind):
            return name
    return None


def bad_value(error: BaseException, expected: str | None = None) -> tuple[str, str] | None:
    """(flag, one-line message) for an absl bad-value error, else None.

    Args:
      error: the exception flag parsing raised.
      expected: what the flag takes ("an integer"); None looks it up in absl's FLAGS.
    """
    match = _ILLEGAL_VALUE.match(str(error).strip())
    if match is None:
        return None
    name, value, _ = match.groups()
    if _MISSING.search(str(error)):
        return name, f"--{name} is required"
    if expected is None and name in flags.FLAGS:
        expected = _FLAG_TYPES.get(flags.FLAGS[name].flag_type())
    if expected is None:
        return None
    return name, f"--{name}={value}: expected {expected}, got {value!r}"


def one_line(error: BaseException) -> str:
    """Any flag parsing error as one line."""
    described = bad_value(error)
    if described is not None:
        return described[1]
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
