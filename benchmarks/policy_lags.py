"""PPO at policy lags beyond one: what staleness costs, what decoupling wins back, and
what a deeper pipeline buys where actors jitter.

    python benchmarks/policy_lags.py returns --config=configs/ppo_cartpole.py --seeds=3
    python benchmarks/policy_lags.py returns --config=configs/ppo_minatar.py:Breakout,cpu \\
        --set total_timesteps=500000 --seeds=1
    python benchmarks/policy_lags.py throughput [--updates=60] [--repeats=3]

`returns`: for each `pipeline.policy_lag` in --lags (default 0, 1, 2, 4) and each PPO
objective, `agent.proximal_policy` "behaviour" (PPO's clipping around the policy that
collected the data) and "learner" (the decoupled objective, docs/agents.md), trains the
config once per seed (1..N) and prints a markdown row: the final mean return (last 100
episodes) as mean ± sd over seeds, each seed's, and the runs' mean wall time.

`throughput`: `configs/ppo_cartpole.py:smoke`'s pipeline (actor and learner on separate
virtual devices) with injected delays that stand for a slow learner and jittery actors:
each update sleeps --learner_delay_s and each rollout --actor_delay_s plus a seeded
uniform draw in [0, --jitter_s) (`debug.actor_delay_jitter_s`); the mean actor time
equals the learner's, so at lag 1 one side waits for the other whenever a rollout is
slower than average. Runs lags 1, 2 and 4 alternately, --repeats times each, and prints
the median steady-state env steps/s of each, the ratio to lag 1 and the wait fractions.
The delays dominate the runs' compute, so the ratios measure the schedule, not the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time

# Two virtual devices: actor and learner on their own, as on accelerators.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ceilings  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402
from config_spec import apply_overrides, load_config, quiet_training_run  # noqa: E402

from sebulba import train  # noqa: E402
from sebulba.runtime import platforms  # noqa: E402

# libtpu's errors about a TPU it cannot find never show where no accelerator exists.
platforms.skip_absent_accelerators()

OBJECTIVES = ("behaviour", "learner")


def final_return(config, policy_lag: int, proximal: str, seed: int) -> tuple[float, float]:
    """(mean return of the last 100 episodes, wall time in s) of one training run."""
    config = config.copy_and_resolve_references()
    config.seed = seed
    config.pipeline.policy_lag = policy_lag
    config.agent.proximal_policy = proximal
    quiet_training_run(config)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir, contextlib.redirect_stdout(sys.stderr):
        train.train(config, workdir)
        with open(os.path.join(workdir, "summary.json"), encoding="utf-8") as f:
            summary = json.load(f)
    return float(summary["mean_return"]), time.perf_counter() - start


def returns_table(args) -> None:
    config = load_config(args.config)
    apply_overrides(config, args.set)
    lags = [int(x) for x in args.lags.split(",")]
    seeds = list(range(1, args.seeds + 1))
    print(f"{args.config}{''.join(' --set ' + s for s in args.set)}; seeds {seeds}\n")
    print("| policy_lag | agent.proximal_policy | final return (last 100) | per seed | wall time |")
    print("|---|---|---|---|---|")
    for lag in lags:
        for proximal in OBJECTIVES:
            runs = [final_return(config, lag, proximal, seed) for seed in seeds]
            finals = [r for r, _ in runs]
            per_seed = ", ".join(f"{r:.1f}" for r in finals)
            print(
                f"| {lag} | {proximal} | {np.mean(finals):.1f} ± {np.std(finals):.1f} | "
                f"{per_seed} | {np.mean([t for _, t in runs]):.0f} s |",
                flush=True,
            )


def throughput_table(args) -> None:
    config = load_config("configs/ppo_cartpole.py:smoke")
    config.mesh.actor_device_ids = (0,)
    config.mesh.learner_device_ids = (1,)
    config.debug.learner_delay_s = args.learner_delay_s
    config.debug.actor_delay_s = args.actor_delay_s
    config.debug.actor_delay_jitter_s = args.jitter_s
    lags = (1, 2, 4)
    print(
        f"jax {jax.__version__}, {os.cpu_count()} cores; configs/ppo_cartpole.py:smoke, "
        f"{args.updates} updates per run; learner delay {args.learner_delay_s} s per update, "
        f"actor delay {args.actor_delay_s} s + uniform [0, {args.jitter_s}) s per rollout\n"
    )
    results = {lag: [] for lag in lags}
    for _ in range(args.repeats):
        for lag in lags:  # Alternating, so the machine's load falls on every lag alike.
            with contextlib.redirect_stdout(sys.stderr):
                lagged = config.copy_and_resolve_references()
                lagged.pipeline.policy_lag = lag
                sps, summary = ceilings.end_to_end(lagged, args.updates)
            results[lag].append((sps, summary["bottleneck"]))
    base = statistics.median(s for s, _ in results[1])
    print("| policy_lag | steps/s (median) | vs lag 1 | learner waits | actors wait |")
    print("|---|---|---|---|---|")
    for lag in lags:
        sps = statistics.median(s for s, _ in results[lag])
        waits = [
            100 * np.mean([b[name] for _, b in results[lag]])
            for name in ("learner_wait_fraction", "actor_wait_fraction")
        ]
        print(f"| {lag} | {sps:,.0f} | {sps / base:.2f}x | {waits[0]:.0f}% | {waits[1]:.0f}% |")
    print(f"\nMedians of {args.repeats} runs per lag.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="part", required=True)
    returns = sub.add_parser("returns", help="final return per lag and objective")
    returns.add_argument("--config", required=True, help="configs/FILE.py[:ARG]")
    returns.add_argument("--set", action="append", default=[], help="KEY=VALUE override")
    returns.add_argument("--lags", default="0,1,2,4")
    returns.add_argument("--seeds", type=int, default=3, help="seeds 1..N")
    throughput = sub.add_parser("throughput", help="steps/s of lags 1, 2, 4 with jitter")
    throughput.add_argument("--updates", type=int, default=60, help="per run")
    throughput.add_argument("--repeats", type=int, default=3, help="runs of each lag")
    throughput.add_argument("--learner_delay_s", type=float, default=0.05)
    throughput.add_argument("--actor_delay_s", type=float, default=0.0)
    throughput.add_argument("--jitter_s", type=float, default=0.1)
    args = parser.parse_args()
    if args.part == "returns":
        returns_table(args)
    else:
        throughput_table(args)


if __name__ == "__main__":
    main()
