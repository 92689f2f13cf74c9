"""`python -m sebulba.check`: compile a run for an accelerator slice you do not have yet.

    python -m sebulba.check --config=configs/impala_atari.py --topology=v5e:2x4 \
        --config.mesh.actor_device_ids='(0,)' --config.mesh.learner_device_ids='(1,2,3)'
    python -m sebulba.check --config=... --topology=h100:8 --json

The run is built as `python -m sebulba.main` builds it on that slice (same config checks,
the same actor and learner devices on every host, the same agent, the learner update
over the same sharded rollouts) and two programs are compiled ahead of time for its
chips: the learner update and an actor's policy step. Nothing runs. The report gives,
per device and per update: the memory the update needs against the chip's HBM (with the
launch's memory advice when it does not fit), the collectives and the bytes each device
sends (loops counted as often as they run: `sebulba.hlo_cost`), the FLOPs, and the
update's time as a band: from the slowest of compute, memory traffic and collectives
(all overlapped, at the chips' peak) to their sum (nothing overlapped). The chips'
figures and their sources are in `sebulba.accelerators`; docs/scaling.md explains the
model and what it leaves out (the envs on the hosts' CPUs, above all).

A config that cannot run on the slice fails as it would at launch: one line naming the
field, exit status 2.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
from typing import Any

from absl import app, flags, logging

from sebulba import accelerators, config_flag
from sebulba.errors import ConfigError

_TOPOLOGY = flags.DEFINE_string(
    "topology",
    None,
    "The slice to compile for: a TPU topology (v5e:2x4, v4:2x2x2, v5p:2x2x2, v6e:2x2) or "
    "accelerator type (v5litepod-8, v4-16), or one GPU node (h100:8, a100:4; virtual CPU "
    "devices stand in for the GPUs).",
)
_JSON = flags.DEFINE_bool("json", False, "Print the report as one JSON object.")

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
    """Memory, FLOPs, traffic and collectives of one compiled program, priced on `chip`."""
    from sebulba import hlo_cost

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
        bytes_accessed=cost.bytes_accessed,
        collectives=[dataclasses.asdict(c) for c in cost.collectives],
        unknown_loops=cost.unknown_loops,
        compute_s=cost.flops / chip.peak_flops,
        memory_s=cost.bytes_accessed / chip.hbm_bytes_per_s,
        collective_s=collective_seconds(cost.collectives, chip),
    )


def _with_sharding(tree, sharding):
    import jax

    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), tree)


def check(config, topology: str) -> dict[str, Any]:
    """Compiles `config`'s learner update and policy step for `topology`; the report.

    Raises:
      ConfigError: the topology is unknown or unavailable, or the config cannot run on
        it (the launch's own one-line errors).
    """
    import jax
    import numpy as np

    from sebulba import memory, pipeline, random_streams, spaces, train
    from sebulba.actor_step import actor_step

    devices, chip = accelerators.devices(topology)
    config = config.copy_and_resolve_references()
    if config.agent.get("minibatch_loop") == "auto":
        # "auto" unrolls the minibatch loop only for CPU learners (agents.learner); the
        # slice's learners keep the rolled scan, as they would at launch there.
        config.agent.minibatch_loop = "scan"
    run = train.plan(config, devices, process_index=0)
    layout, sizes, agent = run.layout, run.sizes, run.agent
    num_learner_devices = layout.learner_mesh.devices.size

    state = _with_sharding(
        jax.eval_shape(agent.init, random_streams.init_key(config.seed)), layout.replicated
    )
    rollout = pipeline.rollout_struct(agent, run.env_spec, sizes, layout, state)
    update = pipeline.lower_update(agent, layout, state, rollout).compile()
    learner = analyse(update, num_learner_devices, chip)
    needed = memory.update_memory(update, rollout)
    advice = None
    try:
        memory.check_update_fits(
            update, rollout, layout.local_learner_devices, available=chip.hbm_bytes
        )
    except ConfigError as error:
        advice = str(error)

    # One actor thread's policy step on its actor device (`sebulba.actor_step`).
    actor_device = layout.actor_devices[0]
    on_actor = jax.sharding.SingleDeviceSharding(actor_device)
    n = sizes.envs_per_thread
    params = _with_sharding(jax.eval_shape(agent.policy_params, state), on_actor)
    step_inputs = _with_sharding(
        (
            jax.eval_shape(lambda: agent.new_carry(n)),
            spaces.observation_struct(run.env_spec.observation, n),
            jax.ShapeDtypeStruct((n,), np.bool_),
            jax.ShapeDtypeStruct((n,), np.int32),
            jax.ShapeDtypeStruct((), np.int32),
        ),
        on_actor,
    )
    step = jax.jit(functools.partial(actor_step, agent, config.seed))
    actor = analyse(step.lower(params, *step_inputs).compile(), 1, chip)
    # Two parameter versions live on an actor device (the one in use, the one arriving).
    params_bytes = sum(
        int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(params)
    )
    actor_bytes = sum(actor.memory_bytes[k] for k in ("arguments", "outputs", "temporaries"))
    actor_bytes += params_bytes - actor.memory_bytes["aliased"]
    learner_bytes = needed.total if needed is not None else 0
    shared = set(layout.actor_devices) & set(layout.local_learner_devices)
    hbm_needed = max(learner_bytes + (actor_bytes if shared else 0), actor_bytes)

    low, high = learner.band_s
    steps = sizes.steps_per_update
    return {
        "topology": topology,
        "chip": chip.name,
        "chip_source": chip.source,
        "proxy": chip.proxy,
        "processes": len({d.process_index for d in devices}),
        "devices": len(devices),
        "actor_devices_per_process": len(layout.actor_devices),
        "learner_devices": num_learner_devices,
        "num_envs": sizes.num_envs,
        "steps_per_update": steps,
        "minibatch_loop": config.agent.get("minibatch_loop"),
        "fits": hbm_needed <= chip.hbm_bytes,
        "hbm_bytes": chip.hbm_bytes,
        "hbm_needed_bytes": hbm_needed,
        "memory_advice": advice,
        "flops_per_update": learner.flops * num_learner_devices,
        "collective_bytes_per_update": sum(
            c["payload_bytes"] * c["count"] for c in learner.collectives
        ),
        "predicted_update_s": [low, high],
        "predicted_learner_steps_per_s": [steps / high, steps / low] if low else None,
        "learner": _program_dict(learner, needed),
        "actor_step": {**_program_dict(actor, None), "hbm_needed_bytes": actor_bytes},
        "assumptions": {
            "peak_flops": chip.peak_flops,
            "hbm_bytes_per_s": chip.hbm_bytes_per_s,
            "collective_bytes_per_s": chip.allreduce_bytes_per_s,
            "hop_latency_s": chip.hop_latency_s,
            "interconnect": chip.interconnect,
            "not_modelled": "env steps on the hosts' CPUs, host-device copies, Python",
        },
    }


def _program_dict(program: ProgramReport, needed) -> dict[str, Any]:
    result = {
        "memory_bytes": program.memory_bytes,
        "flops": program.flops,
        "bytes_accessed": program.bytes_accessed,
        "collectives": program.collectives,
        "unknown_loops": program.unknown_loops,
        "compute_s": program.compute_s,
        "memory_s": program.memory_s,
        "collective_s": program.collective_s,
        "predicted_s": list(program.band_s),
    }
    if needed is not None:
        result["memory_bytes"] = {
            **program.memory_bytes,
            "next_rollout": needed.next_rollout,
            "total": needed.total,
        }
    return result


def _bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"


def _seconds(s: float) -> str:
    return f"{s * 1e3:,.2f} ms" if s >= 1e-4 else f"{s * 1e6:,.1f} us"


def _collectives_line(collectives: list[dict[str, Any]]) -> str:
    if not collectives:
        return "none"
    parts = [
        f"{c['kind']} of {_bytes(c['payload_bytes'])} over {c['group_size']} devices x {c['count']}"
        for c in collectives
    ]
    return "; ".join(parts)


def format_report(report: dict[str, Any], config_name: str) -> str:
    """The report as the console shows it."""
    learner, actor = report["learner"], report["actor_step"]
    how = (
        "compiled by XLA:CPU on virtual devices standing in for the GPUs: figures are a proxy"
        if report["proxy"]
        else "compiled for the chips by libtpu; nothing ran"
    )
    low, high = report["predicted_update_s"]
    verdict = "fits" if report["fits"] else "DOES NOT FIT"
    lines = [
        f"sebulba check: {config_name} on {report['topology']}: {report['devices']} x "
        f"{report['chip']}, {report['processes']} host(s) ({how})",
        f"layout: {report['actor_devices_per_process']} actor device(s) per host, "
        f"{report['learner_devices']} learner devices; {report['num_envs']:,} envs, "
        f"{report['steps_per_update']:,} env steps per update, "
        f"minibatch loop {report['minibatch_loop']}",
        f"memory per device: {_bytes(report['hbm_needed_bytes'])} of "
        f"{_bytes(report['hbm_bytes'])}: {verdict}",
        f"  learner update: arguments {_bytes(learner['memory_bytes']['arguments'])}, "
        f"temporaries {_bytes(learner['memory_bytes']['temporaries'])}, rollouts 2 x "
        f"{_bytes(learner['memory_bytes'].get('next_rollout', 0))}",
    ]
    if report["memory_advice"]:
        lines.append(f"  {report['memory_advice']}")
    unknown = learner["unknown_loops"]
    lines += [
        "learner update, per device and update:",
        f"  FLOPs {learner['flops']:.3g} ({report['flops_per_update']:.3g} over all learner "
        f"devices), memory traffic {_bytes(learner['bytes_accessed'])}",
        f"  collectives: {_collectives_line(learner['collectives'])}",
        f"  time: compute {_seconds(learner['compute_s'])}, memory "
        f"{_seconds(learner['memory_s'])}, collectives {_seconds(learner['collective_s'])} "
        f"-> predicted {_seconds(low)} to {_seconds(high)} per update "
        "(all overlapped at peak .. nothing overlapped)",
    ]
    if unknown:
        lines.append(f"  {unknown} loop(s) with unreadable trip counts were counted once")
    if report["predicted_learner_steps_per_s"]:
        slow, fast = report["predicted_learner_steps_per_s"]
        lines.append(
            f"  the learner alone could take {slow:,.0f} to {fast:,.0f} env steps/s "
            "(envs on the hosts' CPUs and host-device copies are not modelled)"
        )
    lines += [
        f"actor policy step ({report['num_envs'] // max(1, report['processes']):,} envs "
        "per host over its threads; one thread's step):",
        f"  FLOPs {actor['flops']:.3g}, memory {_bytes(actor['hbm_needed_bytes'])}, "
        f"predicted {_seconds(actor['predicted_s'][0])} to {_seconds(actor['predicted_s'][1])}",
        f"figures: {report['chip_source']}; per-step collective latency "
        f"{report['assumptions']['hop_latency_s'] * 1e6:.0f} us assumed (none is published)",
    ]
    return "\n".join(lines)


def quiet_libtpu(topology: str) -> None:
    """libtpu looks for the TPU VM it runs on and warns where it finds none; the check
    only compiles, so it says which slice it is and runs JAX on the CPU."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    # libtpu lets one process at a time hold its lock file; compiling needs no lock.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    try:
        kind = accelerators.accelerator_type(topology)
    except ConfigError:
        kind = None
    if kind:
        os.environ.setdefault("TPU_ACCELERATOR_TYPE", kind)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        config_flag.config_error(f"unexpected arguments: {' '.join(argv[1:])}")
    topology = _TOPOLOGY.value
    quiet_libtpu(topology)
    logging.set_verbosity(logging.WARNING)  # The report says what the launch would log.
    count = accelerators.virtual_device_count(topology)
    if count is not None:
        accelerators.request_virtual_devices(count)
    try:
        report = check(config_flag.CONFIG.value, topology)
    except ConfigError as error:
        config_flag.config_error(str(error))
    if _JSON.value:
        print(json.dumps(report, sort_keys=True))
    else:
        print(format_report(report, config_flag.config_argument(sys.argv) or "config"))


if __name__ == "__main__":
    flags.mark_flags_as_required(["config", "topology"])
    app.run(main, flags_parser=config_flag.parse_flags)
