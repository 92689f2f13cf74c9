"""Policy lag 0 vs 1 for IMPALA and PPO on CartPole-v1: speed and learning, 3 seeds.

    python benchmarks/lag_comparison.py                  # ~10 min on 2 CPU cores
    python benchmarks/lag_comparison.py --seeds=1 --agents=impala

Runs the shipped configs (`configs/ppo_cartpole.py`, 500k steps; and
`configs/impala_cartpole.py`, 1M steps) with actor and learner on separate virtual
devices, under `pipeline.policy_lag` 0 (synchronous) and 1 (Cleanba's one-step lag).
Prints one table row per agent and lag: steady-state steps/s, the fractions of wall time
the learner waited for rollouts and the actors waited for parameters, the mean episodic
return at several env-step marks (mean of the log lines in the 50k steps up to each
mark), and the final mean return of the last 100 episodes; mean ± sd over seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

# Two virtual devices so actor and learner get separate devices, as on accelerators.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

import numpy as np  # noqa: E402
from throughput import load_config  # noqa: E402

from sebulba import train  # noqa: E402
from sebulba.runtime import platforms  # noqa: E402

# libtpu's errors about a TPU it cannot find never show where no accelerator exists.
platforms.skip_absent_accelerators()

CONFIGS = {"ppo": "ppo_cartpole", "impala": "impala_cartpole"}
MARKS = (100_000, 250_000, 500_000, 1_000_000)
WINDOW = 50_000
# Runs stop at a whole number of updates, a little short of their round budgets.
REACHED = 0.99


def run(agent: str, policy_lag: int, seed: int) -> dict:
    """Trains one shipped config; returns its steady-state sps, curve and final return."""
    config = load_config(CONFIGS[agent])
    config.seed = seed
    config.pipeline.policy_lag = policy_lag
    config.mesh.actor_device_ids = (0,)
    config.mesh.learner_device_ids = (1,)
    config.log.every_updates = 5
    config.log.tensorboard = False
    config.log.console = "lines"
    config.ckpt.every_updates = 0
    with tempfile.TemporaryDirectory() as workdir:
        train.train(config, workdir)
        with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
            lines = [json.loads(line) for line in f]
        with open(os.path.join(workdir, "summary.json"), encoding="utf-8") as f:
            summary = json.load(f)
    # The first log line includes compiling the actor step; steady state starts after it.
    first, last = lines[0], lines[-1]
    sps = (last["global_step"] - first["global_step"]) / (
        last["wall_time_s"] - first["wall_time_s"]
    )
    curve = [(x["global_step"], x["episodic_return"]) for x in lines if x["episodic_return"]]
    result = {
        "agent": agent,
        "policy_lag": policy_lag,
        "seed": seed,
        "sps": sps,
        "global_step": summary["global_step"],
        "final_return": summary["mean_return"],
        "learner_wait": summary["bottleneck"]["learner_wait_fraction"],
        "actor_wait": summary["bottleneck"]["actor_wait_fraction"],
        "curve": curve,
    }
    print(
        f"{agent} lag={policy_lag} seed={seed}: {sps:,.0f} sps, "
        f"final return {summary['mean_return']:.1f}",
        flush=True,
    )
    return result


def return_at(result: dict, mark: int) -> float | None:
    """Mean episodic return of the log lines in the WINDOW steps up to `mark`."""
    if result["global_step"] < REACHED * mark:
        return None
    values = [r for step, r in result["curve"] if mark - WINDOW < step <= mark]
    return float(np.mean(values)) if values else None


def mean_sd(values: list[float | None]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "—"
    return f"{np.mean(values):,.0f} ± {np.std(values):,.0f}"


def table(results: list[dict]) -> str:
    marks = " | ".join(
        f"return @{m // 1000}k" if m < 10**6 else f"return @{m // 10**6}M" for m in MARKS
    )
    rows = [
        f"| agent | policy_lag | steps/s | learner waits | actors wait | {marks} "
        "| final return (last 100) |",
        "|---" * (6 + len(MARKS)) + "|",
    ]
    for agent in CONFIGS:
        for lag in (0, 1):
            runs = [r for r in results if r["agent"] == agent and r["policy_lag"] == lag]
            if not runs:
                continue
            at_marks = " | ".join(mean_sd([return_at(r, m) for r in runs]) for m in MARKS)
            waits = " | ".join(
                f"{100 * np.mean([r[name] for r in runs]):.0f}%"
                for name in ("learner_wait", "actor_wait")
            )
            rows.append(
                f"| {agent} | {lag} | {mean_sd([r['sps'] for r in runs])} | {waits} | {at_marks} | "
                f"{mean_sd([r['final_return'] for r in runs])} |"
            )
    seeds = sorted({r["seed"] for r in results})
    per_seed = [
        f"{agent} lag {lag}: "
        + ", ".join(
            f"{r['final_return']:.1f}"
            for r in sorted(results, key=lambda r: r["seed"])
            if r["agent"] == agent and r["policy_lag"] == lag
        )
        for agent in CONFIGS
        for lag in (0, 1)
        if any(r["agent"] == agent and r["policy_lag"] == lag for r in results)
    ]
    return (
        "\n".join(rows)
        + f"\n\nMean ± sd over seeds {', '.join(map(str, seeds))}. Final return per seed: "
        + "; ".join(per_seed)
        + "."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="Seeds 1..N per agent and lag.")
    parser.add_argument("--agents", default="impala,ppo", help="Comma-separated: impala,ppo.")
    parser.add_argument("--out", default="", help="Also write every run's data to this JSON.")
    args = parser.parse_args()
    results = [
        run(agent, lag, seed)
        for agent in args.agents.split(",")
        for lag in (0, 1)
        for seed in range(1, args.seeds + 1)
    ]
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    print(table(results))


if __name__ == "__main__":
    main()
