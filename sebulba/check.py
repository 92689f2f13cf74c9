r"""`python -m sebulba.check`: compile a run for an accelerator slice you do not have yet.

    python -m sebulba.check --config=configs/impala_atari.py --topology=v5e:2x4 \
        --config.mesh.actor_device_ids='(0,)' --config.mesh.learner_device_ids='(1,2,3)'
    python -m sebulba.check --config=... --topology=h100:8 --json

The run is built as `python -m sebulba.main` builds it on that slice (same config checks,
the same actor and learner devices on every host, the same agent, the learner update
over the same sharded rollouts) and its programs are compiled ahead of time for its
chips: the learner update and an actor's policy step, or for an Anakin config (a JAX env)
the runner's one act-and-learn program, built by the runner as at launch. Nothing runs.
The report gives, per device and per update: the memory the programs need against what
the chip's allocator can hand out (with the launch's memory advice when it does not fit;
a scan actor's whole rollout counted on its actor device), the collectives and the bytes
each device sends (loops counted as often as they run: `sebulba.preflight.hlo_cost`), the FLOPs by
element type, and the update's time as a band: from the slowest of compute, memory
traffic and collectives (all overlapped) to their sum (nothing overlapped), each at the
rate the chip reaches (`sebulba.preflight.accelerators`: TPUs at their peaks, GPUs calibrated
against a measurement, float32 products as TF32). Verdicts follow: a config that does
not fit (also where the TPU compiler refuses it for want of memory), idle chips, an
update bound by its collectives. docs/scaling.md explains the model and what it leaves
out (the envs on the hosts' CPUs, above all).

A config that cannot run on the slice fails as it would at launch: one line naming the
field, exit status 2. Otherwise the report is printed and the exit status says whether
the run fits: 0 where it does, 3 where it does not (the "DOES NOT FIT" report; a crash
exits 1), so a script can stop before renting the slice.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from typing import Any

from absl import app, flags, logging

from sebulba.config import flag as config_flag
from sebulba.errors import ConfigError
from sebulba.preflight import accelerators
from sebulba.preflight.check_report import format_bytes as _bytes
from sebulba.preflight.check_report import format_report, verdicts
from sebulba.preflight.program_pricing import ProgramReport, analyse, smaller_layouts
from sebulba.runtime import compile_progress

_TOPOLOGY = flags.DEFINE_string(
    "topology",
    None,
    "The slice to compile for: a TPU topology (v5e:2x4, v4:2x2x2, v5p:2x2x2, v6e:2x2) or "
    "accelerator type (v5litepod-8, v4-16), or one GPU node (h100:8, a100:4; virtual CPU "
    "devices stand in for the GPUs).",
)
_JSON = flags.DEFINE_bool("json", False, "Print the report as one JSON object.")
# The exit status of a report that does not fit (2: a config error, 1: a crash).
DOES_NOT_FIT_STATUS = 3


def _with_sharding(tree, sharding):
    import jax

    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), tree)


def _tree_bytes(tree) -> int:
    import jax
    import numpy as np

    return sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


# What XLA's TPU compiler says when a program's buffers exceed the chip's HBM, e.g.
# "... HLO temporaries (806.17G) exceeds available HBM (15.75G)" or "Used 20.5G of 15.75G hbm".
_OUT_OF_MEMORY = re.compile(r"([0-9.]+)([KMGT])\b.*?([0-9.]+)([KMGT])\b")
_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _compile(lowered) -> tuple[Any, tuple[int, int] | None]:
    """-> (the compiled program, None), or (None, (bytes needed, bytes available)) where the
    compiler refused it for want of device memory."""
    try:
        return lowered.compile(), None
    except Exception as error:  # noqa: BLE001 - only an out-of-memory refusal is a verdict.
        text = str(error)
        figures = _OUT_OF_MEMORY.search(text.partition("memory")[2])
        if "RESOURCE_EXHAUSTED" not in text or figures is None:
            raise
        needed, unit, available, available_unit = figures.groups()
        return None, (
            int(float(needed) * _UNITS[unit]),
            int(float(available) * _UNITS[available_unit]),
        )


def _learner_program(config, run, state):
    """The learner's compiled program as the launch compiles it: the pipeline's update, or
    an Anakin run's act-and-learn program (`sebulba.train` builds its runner the same way)
    -> (lowered program, rollout struct for the memory check, the Anakin runner or None)."""
    from sebulba import pipeline, train

    if run.is_anakin:
        jax_env = train.make_jax_env(config, run.sizes, run.env_spec)
        runner = train.make_anakin_runner(
            config, run.agent, run.layout, run.sizes, jax_env, run.env_spec
        )
        # Its rollout lives inside the program (in its temporaries), as at launch.
        return runner.lower_update(state), (), runner
    rollout = pipeline.rollout_struct(run.agent, run.env_spec, run.sizes, run.layout, state)
    return pipeline.lower_update(run.agent, run.layout, state, rollout), rollout, None


def actor_loop(config, chip: accelerators.Chip) -> str:
    """The actor loop whose memory is counted: envpool's XLA interface has no TPU kernels
    (step); on GPUs "auto" is counted as scan, the loop that holds a whole rollout."""
    requested = config.pipeline.get("actor_loop", "step")
    return "scan" if chip.proxy and requested in ("scan", "auto") else "step"


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


def check(config, topology: str) -> dict[str, Any]:
    """Compiles `config`'s learner program and policy step for `topology`; the report.

    Raises:
      ConfigError: the topology is unknown or unavailable, or the config cannot run on
        it (the launch's own one-line errors).
    """
    import jax

    from sebulba import random_streams
    from sebulba.config.run_plan import plan
    from sebulba.preflight import memory

    if config.mesh.get("actor_platform", "default") != "default":
        raise ConfigError(
            f"mesh.actor_platform is {config.mesh.actor_platform!r}: sebulba.check prices "
            "the actors on the target's accelerators and cannot price them on a host's "
            "CPUs; check with mesh.actor_platform='default' for the learner's figures"
        )
    devices, chip = accelerators.devices(topology)
    config = config.copy_and_resolve_references()
    resolve_for_accelerators(config)
    # Priced per update: an Anakin block of `pipeline.updates_per_call` runs the same
    # update in a loop, whose trip count XLA's cost analysis does not see (memory: the
    # same state and rollout, plus the block's stacked metrics, a few bytes per update).
    config.pipeline.updates_per_call = 1
    run = plan(config, devices, process_index=0)
    layout, sizes, agent = run.layout, run.sizes, run.agent
    num_learner_devices = layout.learner_mesh.devices.size

    shapes = jax.eval_shape(agent.init, random_streams.init_key(config.seed))
    # Placed as the agent says (a replay buffer sharded along envs), as train places it.
    state = jax.tree.map(
        lambda x, sharding: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
        shapes,
        agent.state_shardings(shapes, layout.sharding),
    )
    # On stderr: with --json, stdout holds the report alone.
    what = "the act-and-learn program" if run.is_anakin else "the learner update"
    with compile_progress.announced(f"{what} for {topology}", stream=sys.stderr):
        lowered, rollout, runner = _learner_program(config, run, state)
        update, refused = _compile(lowered)
    report = {
        "topology": topology,
        "chip": chip.name,
        "chip_source": chip.source,
        "proxy": chip.proxy,
        "architecture": "anakin" if runner is not None else "sebulba",
        "processes": len({d.process_index for d in devices}),
        "devices": len(devices),
        "devices_per_process": sum(d.process_index == 0 for d in devices),
        "actor_devices_per_process": 0 if runner is not None else len(layout.actor_devices),
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
    actor = None
    if runner is None:
        report["fused"] = _fused_choice(config, run, state, rollout, chip, report["processes"])
        actor = _actor_report(config, run, state, chip)
        shared = set(layout.actor_devices) & set(layout.local_learner_devices)
        actor_bytes = actor["hbm_needed_bytes"] if shared else 0
        hbm_needed = max(learner_bytes + actor_bytes, actor["hbm_needed_bytes"])
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
        actor_step=actor,
        faster_smaller_layout=None
        if best is None
        else {"learner_devices": best[0], "predicted_update_s": list(best[1])},
    )
    report["verdicts"] = verdicts(report, layout)
    return report


def _actor_report(config, run, state, chip: accelerators.Chip) -> dict[str, Any]:
    """One actor thread's policy step on its actor device (`sebulba.actors.actor_step`), and the
    memory of that device: the step's buffers, two parameter versions (the one in use, the
    one arriving) and, for a scan actor, the whole rollout each of its threads builds."""
    import jax
    import numpy as np

    from sebulba.actors.actor_step import actor_step
    from sebulba.environments import spaces

    layout, sizes, agent = run.layout, run.sizes, run.agent
    on_actor = jax.sharding.SingleDeviceSharding(layout.actor_devices[0])
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
    what = f"the actors' policy step for {chip.name}"
    with compile_progress.announced(what, stream=sys.stderr):
        compiled = step.lower(params, *step_inputs).compile()
    actor = analyse(compiled, 1, chip)
    step_bytes = sum(actor.memory_bytes[k] for k in ("arguments", "outputs", "temporaries"))
    step_bytes += _tree_bytes(params) - actor.memory_bytes["aliased"]
    loop = actor_loop(config, chip)
    rollout_bytes = 0
    threads_per_device = -(-sizes.num_actor_threads // len(layout.actor_devices))
    if loop == "scan":
        from sebulba import pipeline

        rollout = pipeline.rollout_struct(agent, run.env_spec, sizes, layout, state)
        # Every leaf has one entry per env: a thread's rollout is its share of the whole.
        rollout_bytes = _tree_bytes(rollout) * n // sizes.num_envs
    return {
        **_program_dict(actor, None),
        "actor_loop": loop,
        "threads_per_device": threads_per_device,
        "rollout_bytes_per_thread": rollout_bytes,
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
    if not report["fits"]:
        sys.exit(DOES_NOT_FIT_STATUS)


if __name__ == "__main__":
    flags.mark_flags_as_required(["config", "topology"])
    flags.declare_key_flag("config")  # Listed by --help, not only by --helpfull.
    app.run(main, flags_parser=config_flag.parse_flags)
