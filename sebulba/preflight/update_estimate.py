"""How long one learner update takes on a CPU, said before the first one runs.

A config sized for an accelerator (`configs/ppo_atari.py`: 16,384 env steps per update
through a CNN) runs its first update for many minutes on a CPU, where the console could
otherwise only say that it is still running. Before training, the compiled update's
matrix FLOPs (`sebulba.preflight.hlo_cost`, loops counted as often as they run) are
divided by the rate at which this CPU multiplies float32 matrices, timed here on one
large product. Convolutions, scatters and elementwise work rarely run faster than that,
so the figure is a floor: the update takes at least this long.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp

from sebulba.preflight import hlo_cost
from sebulba.runtime.progress import format_duration

# Below this many FLOPs an update takes well under a second on any CPU: not worth timing.
MIN_FLOPS = 1e11
# From this estimate on the console says, before training, how long updates will take.
SLOW_UPDATE_S = 30.0
# The product timed to measure the CPU's rate: 2 x 1024^3 FLOPs, tens of milliseconds.
_CALIBRATION_SIZE = 1024


@dataclasses.dataclass(frozen=True)
class UpdateEstimate:
    """A floor on one update's time on a CPU learner device."""

    flops: float  # Matrix FLOPs of one update, per learner device.
    flops_per_s: float  # The rate this CPU multiplied float32 matrices at.

    @property
    def seconds(self) -> float:
        return self.flops / self.flops_per_s


def matmul_flops_per_s(device: jax.Device, size: int = _CALIBRATION_SIZE) -> float:
    """The best of three timed float32 products of two [size, size] matrices on `device`."""
    x = jax.device_put(jnp.ones((size, size), jnp.float32), device)
    product = jax.jit(lambda a: a @ a)
    product(x).block_until_ready()  # Compiled outside the timing.
    best = float("inf")
    for _ in range(3):
        began = time.perf_counter()
        product(x).block_until_ready()
        best = min(best, time.perf_counter() - began)
    return 2 * size**3 / max(best, 1e-9)


def estimate(compiled, learner_devices) -> UpdateEstimate | None:
    """The update's floor on these CPU learner devices; None on accelerators (where an
    update takes seconds, and `python -m sebulba.check` prices it) or for an update too
    small to time."""
    if any(device.platform != "cpu" for device in learner_devices):
        return None
    cost = hlo_cost.program_cost(compiled.as_text(), len(learner_devices))
    if cost.flops < MIN_FLOPS:
        return None
    return UpdateEstimate(cost.flops, matmul_flops_per_s(learner_devices[0]))


def describe(found: UpdateEstimate, num_updates: int, steps_per_update: int) -> str:
    """The console's line for an update estimated to take `SLOW_UPDATE_S` or more."""
    return (
        f"sebulba: one learner update is {found.flops / 1e12:,.2f} TFLOP and this CPU "
        f"multiplies at {found.flops_per_s / 1e9:,.0f} GFLOP/s, so each update takes at least "
        f"{format_duration(found.seconds)} ({format_duration(found.seconds * num_updates)} for "
        f"{num_updates:,} updates); {steps_per_update:,} env steps per update is sized for a "
        "GPU or TPU: on a CPU fewer envs (env.num_envs) or steps (agent.num_steps) per "
        "update, or a smaller network, finish updates sooner"
    )
