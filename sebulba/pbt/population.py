"""A population's host-side state and its exploit/explore decisions.

Every member carries a value of each mutated hyperparameter (`values`, [members,
hyperparameters], float32 values held as Python floats so that JSON stores them
exactly). Between two exploit/explore steps each member's finished episodes are summed
(`record`); at a step (`step`) the members are ranked by the mean return of those
episodes, the bottom `replaced` take a copy of a top member's learner state (the caller
copies it) and its hyperparameters, which they then explore: each value is multiplied or
divided by `perturb`, or with `resample_probability` redrawn log-uniformly from its range.

Every draw comes from the run's POPULATION stream (`sebulba.random_streams`) keyed by
(step, member), and ties in the ranking go to the lower member index, so the same seed and
the same returns give the same lineage on any layout. The whole state is a JSON dict
(`state_dict`) saved in every member's checkpoint: a resumed population continues with the
same windows, values and lineage, so its decisions match an uninterrupted run's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sebulba import random_streams
from sebulba.errors import ConfigError
from sebulba.pbt.settings import PopulationSettings


def _float32(value: float) -> float:
    """`value` rounded to the float32 the compiled program reads (exact in JSON)."""
    return float(np.float32(value))


def _log_uniform(u: float, low: float, high: float) -> float:
    return math.exp(math.log(low) + u * (math.log(high) - math.log(low)))


class Population:
    """The members' hyperparameters, episode windows and lineage.

    Args:
      settings: the config's population (`sebulba.pbt.settings.settings_of`).
      seed: the run's seed; the POPULATION stream's root.
      state: a `state_dict()` from a checkpoint, or None for a fresh population (member 0
        takes the config's values, the others draw theirs log-uniformly from the ranges).
    """

    def __init__(self, settings: PopulationSettings, seed: int, state: dict | None = None):
        self.settings, self.seed = settings, seed
        size, names = settings.population, settings.names
        if state is None:
            self.generation = 0
            self.values = [list(map(_float32, settings.base))]
            for member in range(1, size):
                u = random_streams.population_uniforms(seed, 0, member, len(names))
                self.values.append(
                    [
                        _float32(_log_uniform(u[h], low, high))
                        for h, (_, low, high) in enumerate(settings.ranges())
                    ]
                )
            self.window_sums = [0.0] * size
            self.window_counts = [0] * size
            self.copied_from: list[int | None] = [None] * size
            self.lineage: list[dict[str, Any]] = []
            return
        if state.get("names") != list(names) or len(state.get("values", ())) != size:
            raise ConfigError(
                f"the checkpoint's population ({len(state.get('values', ()))} members mutating "
                f"{state.get('names')}) is not this config's ({size} mutating {list(names)})"
            )
        self.generation = state["generation"]
        self.values = [list(row) for row in state["values"]]
        self.window_sums = list(state["window_sums"])
        self.window_counts = list(state["window_counts"])
        self.copied_from = list(state["copied_from"])
        self.lineage = list(state["lineage"])

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed population needs, as JSON."""
        return {
            "names": list(self.settings.names),
            "generation": self.generation,
            "values": [list(row) for row in self.values],
            "window_sums": list(self.window_sums),
            "window_counts": list(self.window_counts),
            "copied_from": list(self.copied_from),
            "lineage": list(self.lineage),
        }

    def hyperparameters(self, member: int) -> dict[str, float]:
        return dict(zip(self.settings.names, self.values[member], strict=True))

    def columns(self) -> dict[str, np.ndarray]:
        """Each hyperparameter's value per member, [members] float32: the program's input."""
        table = np.asarray(self.values, np.float32)
        return {name: table[:, h] for h, name in enumerate(self.settings.names)}

    def record(self, member: int, returns) -> None:
        """Adds a member's finished episodes (in the order they ended) to its window."""
        for value in returns:
            self.window_sums[member] += float(value)
            self.window_counts[member] += 1

    def window_returns(self) -> list[float | None]:
        """Each member's mean return since the last step (None: no episode finished)."""
        return [
            total / count if count else None
            for total, count in zip(self.window_sums, self.window_counts, strict=True)
        ]

    def step(self, update: int, global_step: int) -> np.ndarray | None:
        """The exploit/explore step after `update`: which member each takes its state from.

        Returns:
          sources [members] int32 (`sources[m] == m` for a member that keeps its own), or
          None when some member finished no episode since the last step: nothing is
          ranked then, and the window runs on to the next step.
        """
        returns = self.window_returns()
        if any(value is None for value in returns):
            return None
        size, replaced = self.settings.population, self.settings.replaced
        # Best first; equal returns rank the lower member first.
        ranked = sorted(range(size), key=lambda m: (-returns[m], m))
        top, bottom = ranked[:replaced], sorted(ranked[size - replaced :])
        self.generation += 1
        sources = np.arange(size, dtype=np.int32)
        names, perturb = self.settings.names, self.settings.perturb
        replacements = []
        for member in bottom:
            u = random_streams.population_uniforms(
                self.seed, self.generation, member, 1 + 2 * len(names)
            )
            source = top[min(int(u[0] * replaced), replaced - 1)]
            sources[member] = source
            values = []
            for h, (_, low, high) in enumerate(self.settings.ranges()):
                if u[1 + 2 * h] < self.settings.resample_probability:
                    value = _log_uniform(u[2 + 2 * h], low, high)
                else:
                    factor = perturb if u[2 + 2 * h] < 0.5 else 1 / perturb
                    value = min(max(self.values[source][h] * factor, low), high)
                values.append(_float32(value))
            replacements.append(
                {
                    "member": member,
                    "copied_from": source,
                    "hyperparameters": dict(zip(names, values, strict=True)),
                }
            )
        for replacement in replacements:
            member = replacement["member"]
            self.values[member] = list(replacement["hyperparameters"].values())
            self.copied_from[member] = replacement["copied_from"]
        self.lineage.append(
            {
                "generation": self.generation,
                "update": update,
                "global_step": global_step,
                "returns": returns,
                "replaced": replacements,
            }
        )
        self.window_sums = [0.0] * size
        self.window_counts = [0] * size
        return sources

    def describe_step(self, update: int, sources: np.ndarray | None) -> str:
        """The console's line for what `step(update, ...)` returned (`sources`)."""
        if sources is None:
            waiting = [m for m, r in enumerate(self.window_returns()) if r is None]
            return (
                f"pbt after update {update}: no step, member(s) "
                f"{', '.join(map(str, waiting))} finished no episode yet"
            )
        step = self.lineage[-1]
        moves = ", ".join(f"{r['member']}<-{r['copied_from']}" for r in step["replaced"])
        return f"pbt step {step['generation']} after update {update}: {moves}"

    def member_metrics(self, member: int) -> dict[str, Any]:
        """What a member's metrics lines carry: its hyperparameters and lineage so far."""
        metrics: dict[str, Any] = {
            "pbt/member": member,
            "pbt/generation": self.generation,
            "pbt/copied_from": self.copied_from[member],
        }
        for name, value in self.hyperparameters(member).items():
            metrics[f"pbt/{name}"] = value
        return metrics

    def member_summary(self, member: int) -> dict[str, Any]:
        """The `pbt` section of a member's summary.json."""
        settings = self.settings
        return {
            "member": member,
            "population": settings.population,
            "hyperparameters": self.hyperparameters(member),
            "ranges": {name: [low, high] for name, low, high in settings.ranges()},
            "interval_updates": settings.interval_updates,
            "generation": self.generation,
            "copied_from": self.copied_from[member],
            # Each step that replaced this member: when, from whom, with what.
            "replacements": [
                {"generation": step["generation"], "update": step["update"], **replaced}
                for step in self.lineage
                for replaced in step["replaced"]
                if replaced["member"] == member
            ],
            "lineage": self.lineage,
        }
