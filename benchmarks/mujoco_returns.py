"""PPO on MuJoCo at 1M env steps next to CleanRL's `ppo_continuous_action`, over seeds.

    python benchmarks/mujoco_returns.py --out=bench_out/mujoco            # 3 tasks x 3 seeds
    python benchmarks/mujoco_returns.py --tasks=Hopper-v4 --seeds=1,2,3 --out=DIR

Runs `configs/ppo_mujoco.py:<task>` (CleanRL's hyperparameters, 1M steps) once per task
and seed, one run after another, each in `OUT/<task>_seed<seed>/` (a normal workdir).
After every run it appends one JSON line to `OUT/results.jsonl`, so an interrupted
benchmark keeps what finished; at the end (or with `--table_only`) it prints a markdown
table: per task, the final return (the mean of the last 100 finished episodes of each
seed, `summary.json`'s `mean_return`) as mean ± std over seeds, wall time and steps/s,
beside CleanRL's published 1M-step returns.

Not named `mujoco.py`: a script's folder comes first on `sys.path`, so that name would
hide the MuJoCo package from every script here (Brax imports it).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
from throughput import load_config

from sebulba import train
from sebulba.runtime import platforms

# libtpu's errors about a TPU it cannot find never show where no accelerator exists.
platforms.skip_absent_accelerators()

# CleanRL's published 1M-step returns of ppo_continuous_action (mean ± std over seeds);
# two figures where CleanRL's versions of the script differ.
CLEANRL_1M = {
    "Hopper-v4": "2382 ± 272",
    "HalfCheetah-v4": "1443 ± 46 to 2906 ± 1129",
    "Walker2d-v4": "2288 ± 572 to 2891 ± 231",
}
DEFAULT_TASKS = ("Hopper-v4", "HalfCheetah-v4", "Walker2d-v4")


def run(task: str, seed: int, out: str) -> dict:
    """Trains `configs/ppo_mujoco.py:<task>` with `seed` in its own workdir under `out`."""
    config = load_config("ppo_mujoco", task)
    config.seed = seed
    config.log.tensorboard = False
    config.log.console = "lines"
    config.ckpt.every_updates = 0
    workdir = os.path.join(out, f"{task}_seed{seed}")
    start = time.perf_counter()
    train.train(config, workdir)
    wall = time.perf_counter() - start
    with open(os.path.join(workdir, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    return {
        "task": task,
        "seed": seed,
        "global_step": summary["global_step"],
        "final_return": summary["mean_return"],
        "wall_time_s": wall,
        "sps": summary["sps"],
    }


def table(results: list[dict]) -> str:
    """A markdown table, one row per task, mean ± std over its seeds."""
    rows = [
        "| task | seeds | final return (mean ± std) | CleanRL 1M | wall time / run | steps/s |",
        "|---|---|---|---|---|---|",
    ]
    for task in dict.fromkeys(r["task"] for r in results):
        runs = [r for r in results if r["task"] == task]
        returns = np.array([r["final_return"] for r in runs], np.float64)
        wall = np.mean([r["wall_time_s"] for r in runs])
        sps = np.mean([r["sps"] for r in runs])
        rows.append(
            f"| {task} | {len(runs)} ({', '.join(str(r['seed']) for r in runs)}) | "
            f"{returns.mean():.0f} ± {returns.std():.0f} | {CLEANRL_1M.get(task, '-')} | "
            f"{wall / 60:.1f} min | {sps:,.0f} |"
        )
    per_seed = "; ".join(
        f"{task} " + ", ".join(f"{r['final_return']:.0f}" for r in results if r["task"] == task)
        for task in dict.fromkeys(r["task"] for r in results)
    )
    return "\n".join(rows) + f"\n\nFinal return per seed: {per_seed}."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default=",".join(DEFAULT_TASKS))
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--out", required=True, help="where the runs and results.jsonl go")
    parser.add_argument("--table_only", action="store_true", help="print the table and exit")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    results_path = os.path.join(args.out, "results.jsonl")
    if not args.table_only:
        for task in args.tasks.split(","):
            for seed in map(int, args.seeds.split(",")):
                result = run(task, seed, args.out)
                with open(results_path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(result) + "\n")
                print(json.dumps(result), flush=True)
    with open(results_path, encoding="utf-8") as f:
        print(table([json.loads(line) for line in f]))


if __name__ == "__main__":
    main()
