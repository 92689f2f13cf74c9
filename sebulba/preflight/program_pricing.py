"""A compiled program priced on a chip, and the same learner update on fewer devices.

`analyse` reads a compiled program's memory (XLA's analysis) and its FLOPs, traffic and
collectives (`sebulba.preflight.hlo_cost`) and prices them on a chip
(`sebulba.preflight.accelerators`):
products at the rate of their element type, traffic at the chip's HBM bandwidth,
collectives as bandwidth-optimal rings with a per-step latency. The update's time is a
band from the slowest of the three (all overlapped) to their sum (nothing overlapped).

`smaller_layouts` prices the same update, same global batch, on fewer learner devices
without compiling it again: each device's FLOPs and traffic grow at most in proportion
to its share of the batch (a fixed part, the parameters' update, does not grow), and
the collectives run over the smaller group. Its bands are therefore upper bounds: a
smaller layout they show as faster is faster in the model.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sebulba.preflight import accelerators
from sebulba.preflight.hlo_cost import Collective

# Per-device bytes each collective puts on the links, and its ring steps, for a group of
# n devices and a payload of p bytes per device (bandwidth-optimal ring algorithms).
_WIRE = {
    "all-reduce": lambda n, p: (2 * (n - 1) / n * p, 2 * (n - 1)),
    "all-gather": lambda n, p: ((n - 1) * p, n - 1),
    "reduce-scatter": lambda n, p: ((n - 1) / n * p, n - 1),
    "all-to-all": lambda n, p: ((n - 1) / n * p, n - 1),
    "collective-permute": lambda n, p: (p, 1),
}


@dataclasses.dataclass(frozen=True)
class ProgramReport:
    """One compiled program on one device: memory, work and its time band."""

    memory_bytes: dict[str, int]
    flops: float
    flops_by_type: dict[str, float]
    bytes_accessed: float
    collectives: list[dict[str, Any]]
    unknown_loops: int
    compute_s: float
    memory_s: float
    collective_s: float

    @property
    def band_s(self) -> tuple[float, float]:
        """(everything overlapped at peak, nothing overlapped)."""
        parts = (self.compute_s, self.memory_s, self.collective_s)
        return max(parts), sum(parts)


def collective_seconds(collectives, chip: accelerators.Chip) -> float:
    """Time of the collectives on `chip`'s links: ring algorithms, per-step latency."""
    total = 0.0
    for collective in collectives:
        if collective.group_size <= 1:
            continue
        wire, steps = _WIRE[collective.kind](collective.group_size, collective.payload_bytes)
        total += collective.count * (wire / chip.allreduce_bytes_per_s + steps * chip.hop_latency_s)
    return total


def analyse(compiled, num_devices: int, chip: accelerators.Chip) -> ProgramReport:
    """Memory, FLOPs, traffic and collectives of one compiled program, priced on `chip`:
    each element type's products at the chip's rate for it (TF32 for float32 on GPUs)."""
    from sebulba.preflight import hlo_cost

    cost = hlo_cost.program_cost(compiled.as_text(), num_devices)
    stats = compiled.memory_analysis()
    memory = {
        "arguments": int(stats.argument_size_in_bytes),
        "outputs": int(stats.output_size_in_bytes),
        "temporaries": int(stats.temp_size_in_bytes),
        "aliased": int(stats.alias_size_in_bytes),
    }
    return ProgramReport(
        memory_bytes=memory,
        flops=cost.flops,
        flops_by_type=dict(cost.flops_by_type),
        bytes_accessed=cost.bytes_accessed,
        collectives=[dataclasses.asdict(c) for c in cost.collectives],
        unknown_loops=cost.unknown_loops,
        compute_s=sum(f / chip.flops_per_s(kind) for kind, f in cost.flops_by_type.items()),
        memory_s=cost.bytes_accessed / chip.achieved_bytes_per_s,
        collective_s=collective_seconds(cost.collectives, chip),
    )


def smaller_layouts(
    learner: ProgramReport, num_learner_devices: int, chip: accelerators.Chip
) -> dict[int, tuple[float, float]]:
    """Upper bounds of the update's band on each power-of-two divisor of the learner
    devices below `num_learner_devices` (the same global batch), by device count."""
    bands = {}
    count = num_learner_devices // 2
    while count >= 1:
        if num_learner_devices % count == 0:
            scale = num_learner_devices / count
            regrouped = [
                Collective(
                    c["kind"],
                    c["payload_bytes"],
                    count if c["group_size"] == num_learner_devices else c["group_size"],
                    c["count"],
                )
                for c in learner.collectives
            ]
            parts = (
                learner.compute_s * scale,
                learner.memory_s * scale,
                collective_seconds(regrouped, chip),
            )
            bands[count] = (max(parts), sum(parts))
        count //= 2
    return bands
