"""What the persistent compilation cache spares a rerun: the README's command, cold then warm.

    python benchmarks/compilation_cache.py                        # ~2 min on 2 CPU cores
    python benchmarks/compilation_cache.py --updates=976          # the whole default run

Runs `python -m sebulba.main --config=configs/ppo_cartpole.py` (cut to `--updates`
updates: start-up does not depend on the run's length) twice in fresh processes, with
`SEBULBA_COMPILATION_CACHE_DIR` pointing at one empty directory: the first run compiles
and fills the cache, the second loads its programs from it. Prints a markdown table per
run: the command's wall time, the start-up before training (imports, envs, and compiling
or loading the learner update, which is compiled ahead of time), update 1 (which also
compiles the actors' policy step), the training
time (`summary.json`'s `wall_time_s`) and the `params_checksum`, which must be the same:
loading a program changes nothing it computes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed_run(workdir: str, cache_dir: str, updates: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["SEBULBA_COMPILATION_CACHE_DIR"] = cache_dir
    steps_per_update = 4 * 128  # configs/ppo_cartpole.py: 4 envs x 128 steps
    command = [
        sys.executable,
        "-m",
        "sebulba.main",
        "--config=configs/ppo_cartpole.py",
        f"--workdir={workdir}",
        f"--config.total_timesteps={updates * steps_per_update}",
        "--config.log.every_updates=1",
        "--config.log.tensorboard=False",
    ]
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True)
    command_s = time.perf_counter() - start
    with open(os.path.join(workdir, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        first_update = json.loads(f.readline())
    return {
        "command_s": command_s,
        "before_training_s": command_s - summary["wall_time_s"],
        "update_1_s": first_update["wall_time_s"],
        "training_s": summary["wall_time_s"],
        "params_checksum": summary["params_checksum"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=100, help="updates per run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        cache_dir = os.path.join(scratch, "cache")
        runs = {
            start: timed_run(os.path.join(scratch, start), cache_dir, args.updates)
            for start in ("cold", "warm")
        }
    print(
        f"`configs/ppo_cartpole.py`, {args.updates} updates, SEBULBA_COMPILATION_CACHE_DIR "
        "empty before the cold run\n"
    )
    print(
        "| start | wall time of the command | start-up (imports, envs, compiling) | update 1 "
        "| training | params_checksum |"
    )
    print("|---|---|---|---|---|---|")
    for start, run in runs.items():
        print(
            f"| {start} | {run['command_s']:.1f} s | {run['before_training_s']:.1f} s | "
            f"{run['update_1_s']:.1f} s | {run['training_s']:.1f} s | "
            f"`{run['params_checksum'][:12]}` |"
        )
    if len({run["params_checksum"] for run in runs.values()}) != 1:
        raise SystemExit("the warm run computed other parameters than the cold run")


if __name__ == "__main__":
    main()
