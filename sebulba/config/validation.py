"""Checks of config values that raise `ConfigError` with one line naming the field.

Every numeric key declares the interval it may take (`Range`); `check_ranges` compares
a config section with those declarations before any work starts, so an impossible value
(a negative learning rate, a discount above 1) stops the run instead of training on it.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import sys
from collections.abc import Mapping
from typing import Any

from sebulba.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Range:
    """The interval a numeric config value must lie in.

    Attributes:
      low, high: the bounds (infinite when absent).
      low_open, high_open: whether the bound itself is excluded.
      integer: whether the value must be an integer.
    """

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    integer: bool = False

    def __contains__(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        if self.integer and not isinstance(value, numbers.Integral):
            return False
        # Written so that NaN fails both comparisons.
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return bool(above and below)

    def __str__(self) -> str:
        kind = "an integer" if self.integer else "a number"
        if self.high == math.inf:
            return f"{kind} {'>' if self.low_open else '>='} {_number(self.low)}"
        if self.low == -math.inf:
            return f"{kind} {'<' if self.high_open else '<='} {_number(self.high)}"
        left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
        return f"{kind} in {left}{_number(self.low)}, {_number(self.high)}{right}"


def _number(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def _is_traced(value: Any) -> bool:
    # Without importing JAX: this module is checked before JAX starts.
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(value, jax.core.Tracer)


POSITIVE = Range(0, low_open=True)
NON_NEGATIVE = Range(0)
# A duration in seconds: infinity would overflow the clocks that wait on it.
FINITE_NON_NEGATIVE = Range(0, high_open=True)
UNIT_INTERVAL = Range(0, 1)
POSITIVE_INT = Range(1, integer=True)
NON_NEGATIVE_INT = Range(0, integer=True)


def check_range(value: Any, name: str, allowed: Range) -> None:
    """Raises ConfigError unless `value` lies in `allowed`, naming `name` and both.

    A value traced inside a compiled program (a PBT member's hyperparameter, which the
    agent reads as a traced number) passes: its range was checked before tracing
    (`sebulba.pbt.settings`).
    """
    if _is_traced(value):
        return
    if value not in allowed:
        raise ConfigError(f"{name} must be {allowed}, got {value!r}")


def check_ranges(section: Mapping[str, Any], prefix: str, ranges: Mapping[str, Range]) -> None:
    """Checks every `section[key]` of `ranges`; `prefix` names the section ("agent").

    Raises:
      ConfigError: for the first value outside its range, e.g.
        "agent.learning_rate must be a number > 0, got -1.0".
    """
    for key, allowed in ranges.items():
        check_range(section[key], f"{prefix}.{key}" if prefix else key, allowed)


def check_choice(value: Any, name: str, choices: tuple[str, ...]) -> None:
    """Raises ConfigError unless `value` is one of `choices`, naming `name` and them."""
    if value not in choices:
        raise ConfigError(f"{name} {value!r} must be one of {', '.join(choices)}")


def check_decays(start: float, start_name: str, end: float, end_name: str, what: str) -> None:
    """Raises ConfigError if a schedule that only decays (`what`, e.g. an exploration
    epsilon) would rise from `start` to `end`: most likely the two keys swapped. Traced
    values pass, as in `check_range`."""
    if _is_traced(start) or _is_traced(end):
        return
    if start < end:
        raise ConfigError(f"{start_name} ({start}) must be >= {end_name} ({end}): {what} decays")


def require_divisible(numerator: int, numerator_name: str, denominator: int, denominator_name: str):
    """Raises ConfigError unless `numerator` is a positive multiple of `denominator`."""
    if numerator <= 0 or denominator <= 0 or numerator % denominator:
        raise ConfigError(
            f"{numerator_name} ({numerator}) must be a positive multiple of "
            f"{denominator_name} ({denominator})"
        )
