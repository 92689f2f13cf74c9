"""The console form of a `sebulba.check` report: figures, verdicts and what they assume."""

from __future__ import annotations

from typing import Any


def format_bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"


def format_seconds(s: float) -> str:
    """Three significant figures at any scale: a tiny policy step is never shown as 0.0."""
    if s <= 0:
        return "0 s"
    for unit, size in (("ms", 1e-3), ("us", 1e-6)):
        if s >= size / 10:
            return f"{s / size:,.3g} {unit}" if s < 100 * size else f"{s / size:,.0f} {unit}"
    return f"{s * 1e9:.3g} ns"


def _collectives_line(collectives: list[dict[str, Any]]) -> str:
    if not collectives:
        return "none"
    parts = [
        f"{c['kind']} of {format_bytes(c['payload_bytes'])} over {c['group_size']} devices x "
        f"{c['count']}"
        for c in collectives
    ]
    return "; ".join(parts)


def _flops_line(flops_by_type: dict[str, float]) -> str:
    return ", ".join(f"{kind} {flops:.3g}" for kind, flops in sorted(flops_by_type.items()))


def format_report(report: dict[str, Any], config_name: str) -> str:
    """The report as the console shows it."""
    learner, actor = report["learner"], report["actor_step"]
    assumptions = report["assumptions"]
    if report["proxy"]:
        how = "compiled by XLA:CPU on virtual devices standing in for the GPUs: figures are a proxy"
    elif report["gpu"]:
        how = "compiled for the GPUs by XLA:GPU, without one; nothing ran"
    else:
        how = "compiled for the chips by libtpu; nothing ran"
    anakin = report["architecture"] == "anakin"
    verdict = "fits" if report["fits"] else "DOES NOT FIT"
    usable = ""
    if report["hbm_usable_bytes"] < report["hbm_bytes"]:
        usable = (
            f" (JAX's allocator takes {assumptions['allocator_fraction']:.0%} of the "
            f"{report['hbm_bytes'] / 1e9:,.0f} GB card)"
        )
    layout = (
        f"Anakin: acting, env steps and learning in one program on {report['learner_devices']}"
        " learner devices"
        if anakin
        else f"{report['actor_devices_per_process']} actor device(s) per host, "
        f"{report['learner_devices']} learner devices"
    )
    # Only agents with minibatches have a minibatch loop (a replay agent has none).
    loop = report["minibatch_loop"]
    minibatch_loop = "" if loop is None else f", minibatch loop {loop}"
    lines = [
        f"sebulba check: {config_name} on {report['topology']}: {report['devices']} x "
        f"{report['chip']}, {report['processes']} host(s) of {report['devices_per_process']} "
        f"({how})",
        f"compiled for: {report['compiled_for']}",
        f"layout: {layout}; {report['num_envs']:,} envs, {report['steps_per_update']:,} env "
        f"steps per update{minibatch_loop}",
        f"memory per device: {format_bytes(report['hbm_needed_bytes'])} of "
        f"{format_bytes(report['hbm_usable_bytes'])}{usable}: {verdict}",
    ]
    if learner is not None:
        memory = learner["memory_bytes"]
        what = "act-and-learn program" if anakin else "learner update"
        in_flight = max(1, memory.get("rollouts_in_flight", 1))
        one_rollout = memory.get("next_rollout", 0) // in_flight
        rollouts = (
            " (its rollout, env states and env steps inside)"
            if anakin
            else f", rollouts {1 + in_flight} x {format_bytes(one_rollout)}"
        )
        lines.append(
            f"  {what}: arguments {format_bytes(memory['arguments'])}, temporaries "
            f"{format_bytes(memory['temporaries'])}{rollouts}"
        )
    if report["memory_advice"]:
        lines.append(f"  {report['memory_advice']}")
    if report.get("fused") is not None:
        fused = report["fused"]
        state = "on: the update and the next rollout as one program" if fused["fused"] else "off"
        lines.append(f"fused step: {state} ({fused['why']})")
        if fused.get("program"):
            lines.append(f"  the fused program: {_program_line(fused['program'])}")
    if learner is not None:
        lines += _learner_lines(report, learner, anakin)
    if actor is not None:
        scan = actor["actor_loop"] == "scan"
        held = (
            f", of which {actor['threads_per_device']} thread(s)' rollouts "
            f"{actor['threads_per_device']} x {format_bytes(actor['rollout_bytes_per_thread'])}"
            " (scan actor loop)"
            if scan
            else ""
        )
        low, high = actor["predicted_s"]
        lines += [
            f"actor policy step ({report['num_envs'] // max(1, report['processes']):,} envs "
            "per host over its threads; one thread's step):",
            f"  FLOPs {actor['flops']:.3g}, memory {format_bytes(actor['hbm_needed_bytes'])}"
            f"{held}, predicted {format_seconds(low)} to {format_seconds(high)}",
        ]
        lines += _unknown_loops_line(actor)
        if actor.get("rollout_program"):
            lines.append(
                "  one thread's rollout program (its env steps through envpool's custom "
                f"calls): {_program_line(actor['rollout_program'])}"
            )
    if report["verdicts"]:
        lines.append("verdicts:")
        lines += [f"  {verdict}" for verdict in report["verdicts"]]
    rate = ""
    if assumptions["achieved_fraction"] < 1:
        rate = (
            f"; GPU programs priced at {assumptions['achieved_fraction']:.0%} of peak FLOP/s "
            "and HBM bandwidth, float32 products as TF32 (calibrated: docs/scaling.md)"
        )
    runtime = ""
    if assumptions.get("gpu_runtime_bytes"):
        runtime = (
            f"; the runtime's own {format_bytes(assumptions['gpu_runtime_bytes'])} per GPU "
            "beside the allocator's share assumed (CUDA context, kernels, library handles)"
        )
    lines.append(
        f"figures: {report['chip_source']}; per-step collective latency "
        f"{assumptions['hop_latency_s'] * 1e6:.0f} us assumed (none is published){rate}{runtime}"
    )
    return "\n".join(lines)


def _program_line(program: dict[str, Any]) -> str:
    """One compiled program's FLOPs, buffers and time band, on one line."""
    memory = program["memory_bytes"]
    low, high = program["predicted_s"]
    return (
        f"FLOPs {program['flops']:.3g}, memory traffic {format_bytes(program['bytes_accessed'])}; "
        f"arguments {format_bytes(memory['arguments'])}, outputs "
        f"{format_bytes(memory['outputs'])}, temporaries {format_bytes(memory['temporaries'])}; "
        f"predicted {format_seconds(low)} to {format_seconds(high)} of device time"
    )


def _learner_lines(report: dict[str, Any], learner: dict[str, Any], anakin: bool) -> list[str]:
    low, high = report["predicted_update_s"]
    what = "act-and-learn program" if anakin else "learner update"
    lines = [
        f"{what}, per device and update:",
        f"  FLOPs {learner['flops']:.3g} ({_flops_line(learner['flops_by_type'])}; "
        f"{report['flops_per_update']:.3g} over all learner devices), memory traffic "
        f"{format_bytes(learner['bytes_accessed'])}",
        f"  collectives ({report['assumptions']['interconnect']}): "
        f"{_collectives_line(learner['collectives'])}",
        f"  time: compute {format_seconds(learner['compute_s'])}, memory "
        f"{format_seconds(learner['memory_s'])}, collectives "
        f"{format_seconds(learner['collective_s'])} -> predicted {format_seconds(low)} to "
        f"{format_seconds(high)} per update (all overlapped .. nothing overlapped)",
    ]
    lines += _unknown_loops_line(learner)
    if report["predicted_learner_steps_per_s"]:
        slow, fast = report["predicted_learner_steps_per_s"]
        who = "the run" if anakin else "the learner alone"
        lines.append(
            f"  {who} could take {slow:,.0f} to {fast:,.0f} env steps/s "
            + (
                "(env steps included; Python and host copies are not modelled)"
                if anakin
                else "(envs on the hosts' CPUs and host-device copies are not modelled)"
            )
        )
    if report["assumptions"].get("deterministic_gpu_kernels_unpriced"):
        lines.append(
            "  priced with XLA's fastest GPU kernels; the run's deterministic ones "
            "(debug.deterministic_gpu, on by default) are slower: ppo_atari's update took "
            "1.42x as long with them on one H200 (docs/benchmarks.md)"
        )
    return lines


def verdicts(report: dict[str, Any], layout) -> list[str]:
    """What a person about to rent the slice should know beyond the figures, one line each.

    Args:
      report: `sebulba.check.check`'s report so far (memory, learner program).
      layout: the run's `DeviceLayout` on host 0.
    """
    lines = []
    if not report["fits"]:
        has = report.get("compiler_available_bytes", report["hbm_usable_bytes"])
        lines.append(
            f"does not fit: needs {format_bytes(report['hbm_needed_bytes'])} per device, a "
            f"{report['chip']} device has {format_bytes(has)}"
        )
    used = {d.id for d in layout.actor_devices} | {d.id for d in layout.local_learner_devices}
    idle = report["devices_per_process"] - len(used)
    if report["architecture"] == "anakin":
        idle = report["devices_per_process"] - len(layout.local_learner_devices)
    if idle > 0:
        lines.append(
            f"idle chips: {idle} of {report['devices_per_process']} per host are in neither "
            "mesh.actor_device_ids nor mesh.learner_device_ids (paid for, unused)"
        )
    learner, smaller = report.get("learner"), report.get("faster_smaller_layout")
    if smaller:
        low, high = report["predicted_update_s"]
        faster_low, faster_high = smaller["predicted_update_s"]
        lines.append(
            f"slower than a smaller layout: {smaller['learner_devices']} learner device(s) "
            f"would take at most {format_seconds(faster_low)} to {format_seconds(faster_high)}"
            f" per update against this layout's {format_seconds(low)} to "
            f"{format_seconds(high)} (same global batch; the update's collectives cost more "
            "than the devices save)"
        )
    elif learner and report["learner_devices"] > 1:
        busiest = max(learner["compute_s"], learner["memory_s"])
        if learner["collective_s"] >= busiest:
            lines.append(
                "collective-bound: the update's collectives "
                f"({format_seconds(learner['collective_s'])}) outlast its compute and memory "
                f"traffic ({format_seconds(busiest)}); fewer learner devices may be as fast"
            )
    return lines


def _unknown_loops_line(program: dict[str, Any]) -> list[str]:
    # A loop whose trip count depends on the data (a search's descent to a leaf) runs an
    # unknown number of times: its body is priced once, so the figure is a lower bound.
    if not program["unknown_loops"]:
        return []
    return [f"  {program['unknown_loops']} loop(s) with unreadable trip counts were counted once"]
