"""Predicted scaling of the shipped Atari configs' learner over 1 to 256 TPU chips.

    python benchmarks/record_output.py --name=scaling --markdown -- \
        python benchmarks/scaling.py

Needs libtpu (`pip install -e ".[tpu-check]"`). Everything printed is predicted, nothing
is measured: for each config the learner update is compiled for a v5e:2x2 slice (4
learner chips, `sebulba.check`) at two per-chip batch sizes, the per-chip FLOPs and
memory traffic are fitted as a constant plus a part linear in the per-chip batch (the
line through the two compiled points: exact at them, an extrapolation beyond them, since
XLA tiles different batches differently), and the gradient all-reduce's per-chip payload
is the one compiled. A slice of n chips is then priced with each generation's published
figures (`sebulba.preflight.accelerators`): compute at peak, memory traffic at HBM bandwidth, and
the all-reduce as a ring over the slice's torus (2 x the sum of (side - 1) steps of the
assumed latency, 2(n - 1)/n of the payload at the per-chip all-reduce bandwidth). The
band runs from all of it overlapped to none of it overlapped; the tables print its
middle, and efficiency against one chip of the same generation from the same point of
the band.

Weak scaling keeps each chip's batch (the config's envs per learner chip); strong
scaling keeps the global batch of an 8-chip slice. The figures are the learner's
ceiling: the actors (envpool on the hosts' CPUs, policy inference) are not modelled,
and in the published anchors (docs/scaling.md) they are what bounds steps per second.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

CONFIGS = ("ppo_atari", "impala_atari")
GENERATIONS = {"v4": "TPU v4", "v5e": "TPU v5 lite", "v5p": "TPU v5"}
CHIP_COUNTS = (1, 4, 8, 16, 32, 64, 128, 256)
COMPILED_CHIPS = 4  # v5e:2x2, one host: the slice the programs are compiled for.


def _load(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "configs", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()


def compile_point(name: str, envs_per_chip: int) -> dict:
    """`sebulba.check`'s report for config `name` with `envs_per_chip` per learner chip."""
    from sebulba import check

    config = _load(name)
    threads = config.pipeline.num_actor_threads
    config.env.num_envs = envs_per_chip * COMPILED_CHIPS // threads
    config.mesh.actor_device_ids = (0,)
    config.mesh.learner_device_ids = tuple(range(COMPILED_CHIPS))
    config.total_timesteps = max(
        config.total_timesteps, config.env.num_envs * threads * config.agent.num_steps
    )
    return check.check(config, f"v5e:2x{COMPILED_CHIPS // 2}")


def torus_steps(chips: int, generation: str) -> int:
    """Ring steps of an all-reduce over the default slice of `chips` chips."""
    if chips == 1:
        return 0
    from sebulba.preflight import accelerators

    type_prefix = {"v4": "v4", "v5e": "v5litepod", "v5p": "v5p"}[generation]
    cores = 2 if generation in ("v4", "v5p") else 1
    shape = accelerators.topology_name(f"{type_prefix}-{chips * cores}").split(":")[1]
    return 2 * sum(int(side) - 1 for side in shape.split("x"))


def fitted(points: list[dict], key: str):
    """(constant, per-env) of a per-chip quantity measured at two per-chip batches."""
    (e1, r1), (e2, r2) = [(p["envs_per_chip"], p["report"]["learner"][key]) for p in points]
    slope = (r2 - r1) / (e2 - e1)
    return r1 - slope * e1, slope


def update_band(points, generation: str, chips: int, envs_per_chip: float) -> tuple[float, float]:
    from sebulba.preflight import accelerators

    chip = accelerators.CHIPS[GENERATIONS[generation]]  # Whole chips (v4: both cores).
    flops = sum(c * x for c, x in zip(fitted(points, "flops"), (1, envs_per_chip), strict=True))
    traffic = sum(
        c * x for c, x in zip(fitted(points, "bytes_accessed"), (1, envs_per_chip), strict=True)
    )
    payload = sum(
        c["payload_bytes"] * c["count"] for c in points[0]["report"]["learner"]["collectives"]
    )
    reductions = sum(c["count"] for c in points[0]["report"]["learner"]["collectives"])
    compute = flops / chip.peak_flops
    memory = traffic / chip.hbm_bytes_per_s
    collective = 0.0
    if chips > 1:
        collective = 2 * (chips - 1) / chips * payload / chip.allreduce_bytes_per_s
        collective += reductions * torus_steps(chips, generation) * chip.hop_latency_s
    return max(compute, memory, collective), compute + memory + collective


def table(points_by_config, mode: str) -> str:
    lines = [
        f"**{mode} scaling** (predicted learner env steps/s, in thousands; efficiency vs 1 chip;"
        " * where the envs per chip lie outside the two compiled batches)",
        "",
        "| config | chips | envs per chip | " + " | ".join(GENERATIONS) + " |",
        "|---|---|---|" + "---|" * len(GENERATIONS),
    ]
    for name, points in points_by_config.items():
        steps_per_env = points[0]["steps_per_env"]
        base_envs = points[0]["envs_per_chip"]
        single = {}
        for chips in CHIP_COUNTS:
            envs = base_envs if mode == "weak" else base_envs * 8 / chips
            cells = []
            for generation in GENERATIONS:
                low, high = update_band(points, generation, chips, envs)
                seconds = math.sqrt(low * high)
                rate = chips * envs * steps_per_env / seconds
                single.setdefault(generation, rate / chips if mode == "weak" else None)
                if mode == "weak":
                    efficiency = rate / (chips * single[generation])
                else:
                    one_low, one_high = update_band(points, generation, 1, base_envs * 8)
                    efficiency = (math.sqrt(one_low * one_high)) / (chips * seconds)
                cells.append(f"{rate / 1e3:,.0f}k ({efficiency:.0%})")
            compiled = [p["envs_per_chip"] for p in points]
            outside = "" if min(compiled) <= envs <= max(compiled) else "*"
            lines.append(f"| {name} | {chips} | {envs:g}{outside} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    from sebulba import check

    check.quiet_libtpu(f"v5e:2x{COMPILED_CHIPS // 2}")  # Before JAX starts.
    points_by_config = {}
    for name in CONFIGS:
        config = _load(name)
        base = config.env.num_envs * config.pipeline.num_actor_threads // COMPILED_CHIPS
        points = []
        for envs_per_chip in (base, 2 * base):
            report = compile_point(name, envs_per_chip)
            points.append(
                {
                    "envs_per_chip": envs_per_chip,
                    "steps_per_env": config.agent.num_steps,
                    "report": report,
                }
            )
            learner = report["learner"]
            print(
                f"compiled {name} at {envs_per_chip} envs per chip: {learner['flops']:.3g} "
                f"FLOPs, {learner['bytes_accessed'] / 2**30:.2f} GiB traffic, collectives "
                f"{report['collective_bytes_per_update'] / 2**20:.2f} MiB per chip per update",
                file=sys.stderr,
                flush=True,
            )
        points_by_config[name] = points
    print(table(points_by_config, "weak"))
    print()
    print(table(points_by_config, "strong"))


if __name__ == "__main__":
    main()
