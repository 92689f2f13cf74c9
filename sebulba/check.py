r"""`python -m sebulba.check`: compile a run for an accelerator slice you do not have yet.

    python -m sebulba.check --config=configs/impala_atari.py --topology=v5e:2x4 \
        --config.mesh.actor_device_ids='(0,)' --config.mesh.learner_device_ids='(1,2,3)'
    python -m sebulba.check --config=... --topology=h100:8 --json
    python -m sebulba.check --config=... --topology=h100:2x8    # 2 hosts of 8 GPUs

The run is built as `python -m sebulba.main` builds it on that slice (same config checks,
the same actor and learner devices on every host, the same agent, the learner update
over the same sharded rollouts) and its programs are compiled ahead of time for its
chips: the learner update and an actor's policy step, or for an Anakin config (a JAX env)
the runner's one act-and-learn program, built by the runner as at launch. On GPUs,
XLA:GPU compiles them for the cards themselves, without one
(`sebulba.preflight.gpu_targets`), and a scan actor's rollout program (envpool's calls
inside, from one thread's pools made here) and, where the launch fuses, the fused step's
program are compiled too; without JAX's CUDA plugin, or with `--gpu_proxy`, XLA:CPU
compiles a GPU host's programs on virtual devices standing in for its GPUs, a proxy.
Nothing runs. The report gives, per device and per update: the memory the programs need
against what the chip's allocator can hand out (with the launch's memory advice when it
does not fit; a scan actor's rollout counted on its actor device), the collectives and
the bytes each device sends (loops counted as often as they run:
`sebulba.preflight.hlo_cost`), the FLOPs by element type, and the update's time as a
band: from the slowest of compute, memory traffic and collectives (all overlapped) to
their sum (nothing overlapped), each at the rate the chip reaches
(`sebulba.preflight.accelerators`: TPUs at their peaks, GPUs calibrated against a
measurement, float32 products as TF32). Verdicts follow: a config that does not fit
(also where the TPU compiler refuses it for want of memory), idle chips, an update bound
by its collectives. docs/scaling.md explains the model and what it leaves out (the envs
on the hosts' CPUs, above all).

A config that cannot run on the slice fails as it would at launch: one line naming the
field, exit status 2. Otherwise the report is printed and the exit status says whether
the run fits: 0 where it does, 3 where it does not (the "DOES NOT FIT" report; a crash
exits 1), so a script can stop before renting the slice.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from absl import app, flags, logging

from sebulba.check_programs import (
    Compiles,
    actor_loop,
    actor_programs,
    learner_program,
    tree_bytes,
)
from sebulba.config import flag as config_flag
from sebulba.errors import ConfigError
from sebulba.preflight import accelerators, gpu_targets
from sebulba.preflight.check_report import format_bytes as _bytes
from sebulba.preflight.check_report import format_report, verdicts
from sebulba.preflight.program_pricing import ProgramReport, analyse, smaller_layouts

_TOPOLOGY = flags.DEFINE_string(
    "topology",
    None,
    "The slice to compile for: a TPU topology (v5e:2x4, v4:2x2x2, v5p:2x2x2, v6e:2x2) or "
    "accelerator type (v5litepod-8, v4-16), or NVIDIA GPUs: one host (h100:8, h200:1, "
    "a100:4) or several (h100:2x8), compiled by XLA:GPU where JAX's CUDA plugin is "
    'installed (pip install -e ".[gpu-check]"), else on virtual CPU devices (one host).',
)
_JSON = flags.DEFINE_bool("json", False, "Print the report as one JSON object.")
_GPU_PROXY = flags.DEFINE_bool(
    "gpu_proxy",
    False,
    "Compile a GPU host's programs with XLA:CPU on virtual CPU devices standing in for the "
    "GPUs, even where XLA:GPU could compile for the cards (the route without the plugin).",
)
# The exit status of a report that does not fit (2: a config error, 1: a crash).
DOES_NOT_FIT_STATUS = 3


def resolve_for_accelerators(config) -> None:
    """Resolves, in place, the agent's "auto" choices that depend on the platform as the
    check prices them on accelerators, not as the CPU devices standing in for them would."""
    if config.agent.get("minibatch_loop") == "auto":
        # "auto" unrolls the minibatch loop only on CPU learners (agents.learner); the
        # slice's learners keep the rolled scan, as they would at launch there.
        config.agent.minibatch_loop = "scan"
    if config.agent.get("max_pool") == "auto":
        # Flax's max-pool on every accelerator, though a GPU held to deterministic kernels
        # runs the slices: the GPU pricing is calibrated on flax's program, and XLA:CPU's
        # fusions of the slices' backward move far fewer bytes than the GPU's do (PPO Atari
        # on one H200: 380-440 ms predicted for the slices, 1,151 ms measured).
        config.agent.max_pool = "reduce_window"


def check(config, topology: str, *, gpu_proxy: bool = False) -> dict[str, Any]:
    """Compiles `config`'s programs for `topology`; the report.

    `gpu_proxy`: a GPU host's programs on virtual CPU devices even where XLA:GPU could
    compile for the cards (`accelerators.devices`).

    Raises:
      ConfigError: the topology is unknown or unavailable, or the config cannot run on
        it (the launch's own one-line errors).
    """
    devices, chip = accelerators.devices(topology, gpu_proxy=gpu_proxy)
    compiles = Compiles(for_gpus=chip.is_gpu and not chip.proxy)
    try:
        return _check(config, topology, devices, chip, compiles)
    finally:
        compiles.close()


def compiled_for(devices, chip: accelerators.Chip) -> str:
    """What compiled the programs, for what: the report's `compiled_for`."""
    if chip.proxy:
        return f"XLA:CPU on {len(devices)} virtual CPU device(s) standing in for {chip.name}"
    if chip.is_gpu:
        return f"{devices[0].device_kind} (deviceless XLA:GPU)"
    return f"{devices[0].device_kind} (libtpu)"


def _check(config, topology: str, devices, chip: accelerators.Chip, compiles) -> dict[str, Any]:
    import jax

    from sebulba import random_streams
    from sebulba.config.run_plan import plan

    if config.mesh.get("actor_platform", "default") != "default":
        raise ConfigError(
            f"mesh.actor_platform is {config.mesh.actor_platform!r}: sebulba.check prices "
            "the actors on the target's accelerators and cannot price them on a host's "
            "CPUs; check with mesh.actor_platform='default' for the learner's figures"
        )
    config = config.copy_and_resolve_references()
    resolve_for_accelerators(config)
    # Priced per update: an Anakin block of `pipeline.updates_per_call` runs the same
    # update in a loop, whose trip count XLA's cost analysis does not see (memory: the
    # same state and rollout, plus the block's stacked metrics, a few bytes per update).
    config.pipeline.updates_per_call = 1
    run = plan(config, devices, process_index=0)
    shapes = jax.eval_shape(run.agent.init, random_streams.init_key(config.seed))
    # Placed as the agent says (a replay buffer sharded along envs), as train places it.
    state = jax.tree.map(
        lambda x, sharding: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
        shapes,
        run.agent.state_shardings(shapes, run.layout.sharding),
    )
    processes = len({d.process_index for d in devices})
    what = "the act-and-learn program" if run.is_anakin else "the learner update"
    lowered, rollout, runner = learner_program(config, run, state)
    # On stderr: with --json, stdout holds the report alone.
    update = compiles.submit(f"{what} for {topology}", lowered, refusals=True)
    fused, actor, envs = None, None, []
    try:
        if runner is None:
            fused = _fused_choice(config, run, state, rollout, chip, processes)
            actor = actor_programs(config, run, state, rollout, chip, fused["fused"], compiles)
            envs = actor.envs
        return _report(config, topology, devices, chip, run, state, rollout, update, fused, actor)
    finally:
        for pool in envs:  # Kept until their programs compiled: they registered its calls.
            pool.close()


def _report(config, topology, devices, chip, run, state, rollout, update, fused, actor):
    """The report on the compiled programs (`update`, and `actor`'s: `ActorPrograms`)."""
    from sebulba.preflight import memory

    layout, sizes = run.layout, run.sizes
    num_learner_devices = layout.learner_mesh.devices.size
    # The update's collectives run among the learner devices: over the network where
    # those are on several hosts (GPUs; a TPU slice's ICI spans its hosts).
    if len({device.process_index for device in layout.learner_mesh.devices.flat}) > 1:
        chip = chip.across_hosts()
    update, refused = update()
    anakin = fused is None
    report = {
        "topology": topology,
        "chip": chip.name,
        "chip_source": chip.source,
        "proxy": chip.proxy,
        "gpu": chip.is_gpu,
        "compiled_for": compiled_for(devices, chip),
        "architecture": "anakin" if anakin else "sebulba",
        "processes": len({d.process_index for d in devices}),
        "devices": len(devices),
        "devices_per_process": sum(d.process_index == 0 for d in devices),
        "actor_devices_per_process": 0 if anakin else len(layout.actor_devices),
        "learner_devices": num_learner_devices,
        "num_envs": sizes.num_envs,
        "steps_per_update": sizes.steps_per_update,
        "minibatch_loop": config.agent.get("minibatch_loop"),
        "hbm_bytes": chip.hbm_bytes,
        "hbm_usable_bytes": chip.allocatable_bytes,
        "assumptions": _assumptions(chip, config),
    }
    if update is None:
        needed, available = refused
        report.update(
            fits=False,
            hbm_needed_bytes=needed,
            compiler_available_bytes=available,
            memory_advice=(
                f"the compiler for {chip.name} needs {_bytes(needed)} per device for the "
                f"learner program and has {_bytes(available)}: "
                f"{memory.lowering_advice(config.agent, on_cpu=False)}"
            ),
            learner=None,
            actor_step=None,
            predicted_update_s=None,
            predicted_learner_steps_per_s=None,
            faster_smaller_layout=None,
        )
        report["verdicts"] = verdicts(report, layout)
        return report

    learner = analyse(update, num_learner_devices, chip)
    in_flight = max(1, config.pipeline.policy_lag)
    needed = memory.update_memory(update, rollout, in_flight)
    advice = None
    try:
        memory.check_update_fits(
            update,
            rollout,
            layout.local_learner_devices,
            agent=config.agent,
            rollouts_in_flight=in_flight,
            available=chip.allocatable_bytes,
            platform="gpu" if chip.is_gpu else "tpu",  # Not the CPU devices of a GPU proxy.
        )
    except ConfigError as error:
        advice = str(error)
    learner_bytes = needed.total if needed is not None else 0
    actor_step = None
    if not anakin:
        report["fused"] = fused
        actor_step = _actor_report(config, run, state, chip, actor)
        shared = set(layout.actor_devices) & set(layout.local_learner_devices)
        actor_bytes = actor_step["hbm_needed_bytes"] if shared else 0
        hbm_needed = max(learner_bytes + actor_bytes, actor_step["hbm_needed_bytes"])
        if actor.fused is not None:
            # The launch's steady state: one program holds the learner state, rollout k,
            # rollout k + 1 and the envs' state on the one GPU.
            program = analyse(actor.fused(), 1, chip)
            fused["program"] = _program_dict(program, None)
            hbm_needed = max(hbm_needed, _program_bytes(program))
    else:
        actor_bytes = 0
        hbm_needed = learner_bytes

    low, high = learner.band_s
    # A smaller layout (same global batch) predicted faster at both ends of the band, and
    # fitting with its larger share of the batch (the learner's memory, at most scaled).
    faster = [
        (count, band)
        for count, band in smaller_layouts(learner, num_learner_devices, chip).items()
        if band[0] < low
        and band[1] < high
        and learner_bytes * num_learner_devices / count + actor_bytes <= chip.allocatable_bytes
    ]
    best = min(faster, key=lambda item: item[1][1], default=None)
    steps = sizes.steps_per_update
    report.update(
        fits=hbm_needed <= chip.allocatable_bytes,
        hbm_needed_bytes=hbm_needed,
        memory_advice=advice,
        flops_per_update=learner.flops * num_learner_devices,
        collective_bytes_per_update=sum(
            c["payload_bytes"] * c["count"] for c in learner.collectives
        ),
        predicted_update_s=[low, high],
        predicted_learner_steps_per_s=[steps / high, steps / low] if low else None,
        learner=_program_dict(learner, needed),
        actor_step=actor_step,
        faster_smaller_layout=None
        if best is None
        else {"learner_devices": best[0], "predicted_update_s": list(best[1])},
    )
    report["verdicts"] = verdicts(report, layout)
    return report


def _program_bytes(program: ProgramReport) -> int:
    """What one compiled program holds on its device while it runs."""
    memory_bytes = program.memory_bytes
    held = memory_bytes["arguments"] + memory_bytes["outputs"] + memory_bytes["temporaries"]
    return held - memory_bytes["aliased"]


def _actor_report(config, run, state, chip: accelerators.Chip, programs) -> dict[str, Any]:
    """One actor thread's policy step on its actor device (`sebulba.actors.actor_step`), and the
    memory of that device: the step's buffers, two parameter versions (the one in use, the
    one arriving) and, for a scan actor, what each of its threads holds for a rollout: its
    compiled rollout program's buffers (compiled for a GPU), else the rollout's arrays."""
    layout, sizes = run.layout, run.sizes
    actor = analyse(programs.step(), 1, chip)
    step_bytes = sum(actor.memory_bytes[k] for k in ("arguments", "outputs", "temporaries"))
    step_bytes += tree_bytes(programs.params) - actor.memory_bytes["aliased"]
    loop = actor_loop(config, chip)
    rollout_bytes = 0
    threads_per_device = -(-sizes.num_actor_threads // len(layout.actor_devices))
    rollout_program = None
    if programs.rollout is not None:
        rollout_program = analyse(programs.rollout(), 1, chip)
        # The parameters it reads are the device's, counted above with the policy step.
        rollout_bytes = _program_bytes(rollout_program) - tree_bytes(programs.params)
    elif loop == "scan":
        from sebulba import pipeline

        rollout = pipeline.rollout_struct(run.agent, run.env_spec, sizes, layout, state)
        # Every leaf has one entry per env: a thread's rollout is its share of the whole.
        rollout_bytes = tree_bytes(rollout) * sizes.envs_per_thread // sizes.num_envs
    return {
        **_program_dict(actor, None),
        "actor_loop": loop,
        "threads_per_device": threads_per_device,
        "rollout_bytes_per_thread": rollout_bytes,
        "rollout_program": None
        if rollout_program is None
        else _program_dict(rollout_program, None),
        "hbm_needed_bytes": step_bytes + threads_per_device * rollout_bytes,
    }


def _fused_choice(config, run, state, rollout, chip, num_processes: int) -> dict[str, Any]:
    """Whether the launch would run update and next rollout as one program (`pipeline.fused`),
    and why. Its pieces are the update's own, priced above; what it saves, the update's time
    hidden behind the envs' steps, is the hosts' share, which the check does not model."""
    from sebulba import fused_step

    def unsupported() -> str | None:
        return fused_step.unsupported_reason(
            run.agent,
            run.layout,
            run.sizes,
            policy_lag=config.pipeline.policy_lag,
            actor_loop=actor_loop(config, chip),
            state_shapes=state,
            rollout_shapes=rollout,
            num_processes=num_processes,
        )

    platform = "gpu" if chip.is_gpu else "tpu"
    # "on" where it cannot run raises the launch's own ConfigError.
    fused, why = fused_step.choose_fused(config.pipeline.fused, unsupported, platform)
    return {"fused": fused, "why": why}


def _assumptions(chip: accelerators.Chip, config) -> dict[str, Any]:
    return {
        # The GPU calibration measured XLA's free choice of kernels; the deterministic ones
        # a run uses by default are slower by a factor that depends on the network.
        "deterministic_gpu_kernels_unpriced": chip.is_gpu and bool(config.debug.deterministic_gpu),
        "peak_flops": chip.peak_flops,
        "f32_flops": chip.tf32_flops or chip.peak_flops,
        "hbm_bytes_per_s": chip.hbm_bytes_per_s,
        "achieved_fraction": chip.achieved_fraction,
        "allocator_fraction": chip.allocator_fraction,
        "collective_bytes_per_s": chip.allreduce_bytes_per_s,
        "hop_latency_s": chip.hop_latency_s,
        "interconnect": chip.interconnect,
        "not_modelled": "env steps on the hosts' CPUs, host-device copies, Python",
        # Beside the allocator's share: bounds it only where that share is raised.
        "gpu_runtime_bytes": chip.runtime_bytes,
        "gpu_runtime_source": accelerators.GPU_RUNTIME_SOURCE if chip.is_gpu else None,
    }


def _program_dict(program: ProgramReport, needed) -> dict[str, Any]:
    result = {
        "memory_bytes": program.memory_bytes,
        "flops": program.flops,
        "flops_by_type": program.flops_by_type,
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
            "rollouts_in_flight": needed.rollouts_in_flight,
            "total": needed.total,
        }
    return result


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
    # Decided before JAX starts: XLA reads the virtual device count once, at its start.
    count = accelerators.virtual_device_count(topology, _GPU_PROXY.value)
    if count is not None:
        accelerators.request_virtual_devices(count)
    elif accelerators.gpu_hosts(topology) is not None:
        gpu_targets.prepare_environment()
    try:
        report = check(config_flag.CONFIG.value, topology, gpu_proxy=_GPU_PROXY.value)
    except ConfigError as error:
        config_flag.config_error(str(error))
    if _JSON.value:
        print(json.dumps(report, sort_keys=True))
    else:
        print(format_report(report, config_flag.config_argument(sys.argv) or "config"))
    if not report["fits"]:
        sys.exit(DOES_NOT_FIT_STATUS)


if __name__ == "__main__":
    flags.mark_flags_as_required(["config", "topology"])
    flags.declare_key_flag("config")  # Listed by --help, not only by --helpfull.
    app.run(main, flags_parser=config_flag.parse_flags)
