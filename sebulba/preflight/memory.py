"""Memory of the learner update: how it is compiled, and whether it fits before training.

Two things live here:

* `update_compiler_options`: on CPU learners the update is compiled with XLA's
  memory-optimised scheduler. The default CPU scheduler favours concurrency and places
  work that does not depend on the parameters (the index arrays of the max-pool
  gradient, padded copies of the inputs) of *every* unrolled minibatch step at the start
  of the program, so an unrolled loop (`agent.minibatch_loop`; "auto" on CPU for the
  Nature CNN) kept all of its steps' activations alive at once: 16 minibatch steps needed
  about 16 times the memory of one. With the memory-optimised scheduler each step's work
  stays in its step; the speed of unrolled convolution gradients is kept.
* `check_update_fits`: compares what the compiled update needs on each learner device
  with what the device has, and stops the run before training with one line that gives
  the figures and what to change.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
import psutil
from absl import logging

from sebulba.errors import ConfigError

_CPU_OPTIONS = {"xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"}
_GIB = 2**30
_MIB = 2**20


def update_compiler_options(devices: Sequence[jax.Device]) -> dict[str, str]:
    """XLA options for compiling the learner update on `devices` (empty off CPU)."""
    return dict(_CPU_OPTIONS) if devices[0].platform == "cpu" else {}


@dataclasses.dataclass(frozen=True)
class UpdateMemory:
    """Bytes the learner update needs on one learner device.

    Attributes:
      arguments: learner state and this device's share of the rollout being consumed.
      outputs: new state and metrics.
      temporaries: XLA's temporary buffers (activations, gradients, shuffled copies).
      aliased: output bytes that reuse donated argument buffers (counted once).
      next_rollout: this device's share of the rollouts the actors hand over while the
        update runs (double buffering keeps up to two rollouts on the learner devices;
        `pipeline.policy_lag` L > 1 lets L of them wait besides the one consumed).
      rollouts_in_flight: how many rollouts `next_rollout` counts.
    """

    arguments: int
    outputs: int
    temporaries: int
    aliased: int
    next_rollout: int
    rollouts_in_flight: int = 1

    def describe_rollouts(self) -> str:
        """The rollouts' share, as the messages give it: "rollouts 2 x 1.0 MiB"."""
        one = self.next_rollout // max(1, self.rollouts_in_flight)
        return f"rollouts {1 + self.rollouts_in_flight} x {_size(one)}"

    @property
    def total(self) -> int:
        return self.arguments + self.outputs + self.temporaries - self.aliased + self.next_rollout


def update_memory(compiled, rollout_struct, rollouts_in_flight: int = 1) -> UpdateMemory | None:
    """Per-device needs of a compiled update; None where the backend does not report them.

    Args:
      compiled: the ahead-of-time compiled update (`jit(...).lower(...).compile()`).
      rollout_struct: the rollout's `jax.ShapeDtypeStruct`s with their shardings.
      rollouts_in_flight: rollouts handed over while the update runs (`max(1, lag)`).
    """
    try:
        analysis = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 - not every backend reports memory.
        analysis = None
    if analysis is None:
        return None
    rollout_shard = sum(
        int(np.prod(leaf.sharding.shard_shape(leaf.shape))) * np.dtype(leaf.dtype).itemsize
        for leaf in jax.tree.leaves(rollout_struct)
    )
    return UpdateMemory(
        arguments=analysis.argument_size_in_bytes,
        outputs=analysis.output_size_in_bytes,
        temporaries=analysis.temp_size_in_bytes,
        aliased=analysis.alias_size_in_bytes,
        next_rollout=rollout_shard * rollouts_in_flight,
        rollouts_in_flight=rollouts_in_flight,
    )


def available_bytes(devices: Sequence[jax.Device]) -> int | None:
    """What one learner device can hold; None where it is unknown.

    Accelerators report their allocator's limit. CPU devices share the host's memory,
    so each of them gets an equal part of what the host has available now.
    """
    if devices[0].platform == "cpu":
        return psutil.virtual_memory().available // len(devices)
    stats = devices[0].memory_stats()
    return None if not stats or "bytes_limit" not in stats else int(stats["bytes_limit"])


def _size(num_bytes: float) -> str:
    if num_bytes >= _GIB:
        return f"{num_bytes / _GIB:,.1f} GiB"
    return f"{num_bytes / _MIB:,.1f} MiB"


def lowering_advice(agent: Mapping[str, Any], on_cpu: bool) -> str:
    """The config keys that lower the learner update's memory, of those `agent` (the
    run's `agent` section) has: a replay buffer first, where there is one."""
    advice = []
    if "buffer_size" in agent:
        advice.append(
            "lower agent.buffer_size (the replay buffer is learner state, split over the "
            "learner devices) or add learner devices"
        )
    advice.append("lower env.num_envs" + (" or agent.num_steps" if "num_steps" in agent else ""))
    raising = [f"agent.{key}" for key in _BATCH_SPLITS if key in agent]
    if raising:
        advice.append("raise " + " or ".join(raising))
    if on_cpu and "minibatch_loop" in agent:  # A rolled loop holds one micro-batch, slower.
        advice.append("set agent.minibatch_loop=scan (less memory, slower on CPU)")
    return ", or ".join(advice)


# Keys that split the update's batch into smaller pieces, where an agent has them.
_BATCH_SPLITS = ("num_minibatches", "gradient_accumulation_steps")


def check_update_fits(
    compiled,
    rollout_struct,
    devices: Sequence[jax.Device],
    *,
    agent: Mapping[str, Any],
    available: int | None = None,
    platform: str | None = None,
    rollouts_in_flight: int = 1,
) -> UpdateMemory | None:
    """Stops the run before training if the update cannot fit on a learner device.

    Args:
      compiled: the ahead-of-time compiled learner update.
      rollout_struct: the rollout's shapes, dtypes and shardings.
      devices: this process's learner devices.
      agent: the run's `agent` section; the error names only the keys it has.
      available: bytes one device can hold (default: `available_bytes(devices)`).
      platform: the platform whose memory `available` is, which the figures and advice
        name (default: the devices'; `sebulba.check` names its target's, whose CPU
        devices stand in for GPUs).
      rollouts_in_flight: rollouts handed over while the update runs (`max(1, lag)`).

    Returns:
      The update's needs per device (None where the backend does not report them).

    Raises:
      ConfigError: one line with both figures and the config keys that lower the need.
    """
    needed = update_memory(compiled, rollout_struct, rollouts_in_flight)
    if available is None:
        available = available_bytes(devices)
    if needed is None or available is None:
        logging.info("learner memory not checked: the backend does not report it")
        return needed
    on_cpu = (platform or devices[0].platform) == "cpu"
    if on_cpu:  # CPU devices share the host's memory: each has an equal part of it.
        share = f" (1/{len(devices)} of it per learner device)" if len(devices) > 1 else ""
        kind = f"the host's available memory{share}"
    else:  # An accelerator's own memory, as its allocator hands it out.
        kind = "the device memory of a learner device"
    logging.info(
        "learner update needs %s per learner device (temporaries %s, %s); %s: %s",
        _size(needed.total),
        _size(needed.temporaries),
        needed.describe_rollouts(),
        kind,
        _size(available),
    )
    if needed.total > available:
        raise ConfigError(
            f"the learner update needs {_size(needed.total)} per learner device "
            f"(temporaries {_size(needed.temporaries)}, {needed.describe_rollouts()}) "
            f"but {kind} is {_size(available)}: "
            f"{lowering_advice(agent, on_cpu)} (debug.skip_memory_check=True skips this check)"
        )
    return needed
