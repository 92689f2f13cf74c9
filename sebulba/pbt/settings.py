"""The `pbt` config section, checked before JAX is imported, as `PopulationSettings`.

`pbt.population` members each mutate the agent keys named in `pbt.hyperparameters`. A
hyperparameter's range is `[value / pbt.spread, value * pbt.spread]` around the config's
value, inside the interval the agent declares for the key (`sebulba.agents.defaults`):
a discount never leaves [0, 1]. Values move on a log scale (perturbed by a factor,
resampled log-uniformly), so a hyperparameter must be a positive float; integers (shapes:
minibatches, epochs) cannot change inside a compiled program and are refused.
"""

from __future__ import annotations

import dataclasses
import math
import numbers

import ml_collections

from sebulba.config.sizes import Sizes
from sebulba.config.validation import POSITIVE, Range, check_range
from sebulba.errors import ConfigError

# The largest population: members are a leading axis of every learner array.
MAX_POPULATION = 1024

PBT_RANGES = {
    "pbt.population": Range(0, MAX_POPULATION, integer=True),
    "pbt.interval": Range(0, integer=True),
    "pbt.spread": Range(1, high_open=True),
    "pbt.truncation": Range(0, 0.5, low_open=True),
    "pbt.perturb": Range(1, low_open=True, high_open=True),
    "pbt.resample_probability": Range(0, 1),
    "pbt.member": Range(-1, MAX_POPULATION, integer=True),
}


@dataclasses.dataclass(frozen=True)
class PopulationSettings:
    """A population as its config describes it.

    Attributes:
      population: members.
      names: the mutated agent keys, in config order ("learning_rate", ...).
      base: each one's config value.
      low, high: each one's range.
      interval_updates: updates between exploit/explore steps.
      replaced: members replaced at each step (the bottom ones; copies of the top ones).
      perturb: explore multiplies or divides a value by this factor...
      resample_probability: ... or, with this probability, redraws it from its range.
    """

    population: int
    names: tuple[str, ...]
    base: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    interval_updates: int
    replaced: int
    perturb: float
    resample_probability: float

    def is_due(self, update: int, num_updates: int) -> bool:
        """Whether an exploit/explore step follows `update` (never the run's last)."""
        return update % self.interval_updates == 0 and update < num_updates

    def describe(self) -> str:
        names = ", ".join(f"{name} in [{lo:.3g}, {hi:.3g}]" for name, lo, hi in self.ranges())
        return (
            f"{self.population} members; every {self.interval_updates} updates the bottom "
            f"{self.replaced} copy the top {self.replaced} and explore {names}"
        )

    def ranges(self):
        return zip(self.names, self.low, self.high, strict=True)


def in_one_program(config: ml_collections.ConfigDict) -> bool:
    """Whether `config` trains a population as one program (Anakin): `pbt.population` set
    and the run not itself a member of a population of runs (`pbt.member`, set by
    `python -m sebulba.pbt`). A config from before PBT existed has no population."""
    section = config.get("pbt")
    return section is not None and section.population > 0 and section.get("member", -1) < 0


def member_of_runs(config: ml_collections.ConfigDict) -> int | None:
    """The member index of a run that `python -m sebulba.pbt` launched, else None."""
    section = config.get("pbt")
    member = -1 if section is None else section.get("member", -1)
    return member if member >= 0 else None


def member_line_fields(config: ml_collections.ConfigDict) -> dict:
    """What every metrics line of a population's member run carries: its index and the
    values of its mutated keys (a member in one program reports them per update)."""
    member = member_of_runs(config)
    if member is None:
        return {}
    fields = {"pbt/member": member}
    for name in hyperparameter_names(config.pbt.hyperparameters):
        fields[f"pbt/{name}"] = config.agent.get(name)
    return fields


def hyperparameter_names(text: str) -> tuple[str, ...]:
    """`pbt.hyperparameters` ("learning_rate,ent_coef") as names, in order."""
    names = tuple(name.strip() for name in str(text).split(",") if name.strip())
    if len(set(names)) != len(names):
        raise ConfigError(f"pbt.hyperparameters names a key twice: {text!r}")
    return names


def settings_of(config: ml_collections.ConfigDict, sizes: Sizes) -> PopulationSettings | None:
    """The population of `config` (None without one), checked; `sizes` are each member's.

    Raises:
      ConfigError: naming the field, for a value out of range, a population of one, a
        hyperparameter the agent section lacks, or one that is not a positive float.
    """
    section = config.get("pbt")
    if section is None:
        return None
    for dotted, allowed in PBT_RANGES.items():
        check_range(section[dotted.split(".")[1]], dotted, allowed)
    if not section.population:
        return None
    member = section.get("member", -1)
    if not -1 <= member < section.population:
        raise ConfigError(
            f"pbt.member must be -1 (not a member run) or in [0, {section.population}) for "
            f"pbt.population={section.population}, got {member}"
        )
    if section.population < 2:
        raise ConfigError(
            f"pbt.population must be at least 2 (members copy each other), got "
            f"{section.population}; 0 trains one run without PBT"
        )
    names = hyperparameter_names(section.hyperparameters)
    if not names:
        raise ConfigError(
            "pbt.hyperparameters must name at least one agent key, e.g. learning_rate"
        )
    from sebulba.agents.defaults import declared_range  # The agents' ranges; no JAX.

    base, low, high = [], [], []
    for name in names:
        field = f"pbt.hyperparameters: agent.{name}"
        if name not in config.agent:
            raise ConfigError(f"{field} is not a key of the agent section ({config.agent.name})")
        value = config.agent[name]
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ConfigError(f"{field} is {value!r}; PBT mutates numbers")
        if isinstance(value, numbers.Integral):
            raise ConfigError(
                f"{field} is the integer {value}: integers shape the compiled program "
                "(minibatches, epochs), which a member cannot change; PBT mutates floats"
            )
        check_range(value, f"{field} (PBT scales it, so it must start)", POSITIVE)
        declared = declared_range(config.agent.name, name)
        lo, hi = value / section.spread, value * section.spread
        if declared is not None:
            lo = max(lo, declared.low)
            hi = min(hi, declared.high)
        base.append(float(value))
        low.append(float(lo))
        high.append(float(hi))
    # Whole updates: a step falls between two of them. Default: ten steps over the run.
    if section.interval:
        interval_updates = max(1, math.ceil(section.interval / sizes.steps_per_update))
    else:
        interval_updates = max(sizes.num_updates // 10, 1)
    return PopulationSettings(
        population=section.population,
        names=names,
        base=tuple(base),
        low=tuple(low),
        high=tuple(high),
        interval_updates=interval_updates,
        replaced=max(1, int(section.truncation * section.population)),
        perturb=float(section.perturb),
        resample_probability=float(section.resample_probability),
    )
