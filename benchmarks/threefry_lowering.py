"""Runs with JAX's looped Threefry lowering on CPU against the written-out one, same bits.

    python benchmarks/threefry_lowering.py              # ~6 min on 2 cores
    python benchmarks/threefry_lowering.py --rounds=1 --runs=anakin

sebulba lowers the Threefry hash on CPU with its 20 rounds written out
(`sebulba.runtime.threefry_lowering`); JAX 0.10 lowers it as a 5-iteration loop. Each
round runs every config twice in fresh processes, one after the other (the order swaps
from round to round): once as `python -m sebulba.main` does, once with the registration
turned off before anything is imported, so the run compiles JAX's loop. Both give the
same parameters: the benchmark stops if the checksums differ. Steady state is
`summary.json`'s `sps` (env steps per second after update 1); whole process is the
command's wall time, start-up and compiling included (no compilation cache).
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

# name -> (what the table calls it, the config). The default run, the IMPALA and
# Breakout checks on this machine, and the Anakin config compared with PureJaxRL.
RUNS = {
    "default": ("PPO CartPole (the README's run)", "configs/ppo_cartpole.py"),
    "impala": ("IMPALA CartPole", "configs/impala_cartpole.py"),
    "breakout": ("PPO Breakout smoke", "configs/ppo_atari.py:smoke"),
    "anakin": ("PPO CartPole, Anakin", "configs/ppo_cartpole_anakin.py"),
}
WRITTEN_OUT, LOOP = "written out (sebulba)", "JAX's loop"

# The loop arm: the registration becomes a no-op before sebulba.random_streams (which
# calls it) is imported, then the command line runs as `python -m sebulba.main`.
_LOOP_DRIVER = """
import runpy, sys
from sebulba.runtime import threefry_lowering
threefry_lowering.use_unrolled_threefry_on_cpu = lambda: False
sys.argv = ["sebulba.main", *sys.argv[1:]]
runpy.run_module("sebulba.main", run_name="__main__", alter_sys=True)
"""


def run(config: str, lowering: str) -> dict:
    """One training process; its wall time and summary."""
    start_flag = ["-m", "sebulba.main"] if lowering == WRITTEN_OUT else ["-c", _LOOP_DRIVER]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["SEBULBA_COMPILATION_CACHE_DIR"] = ""  # Both arms compile every program.
    with tempfile.TemporaryDirectory() as workdir:
        command = [
            sys.executable,
            *start_flag,
            f"--config={config}",
            f"--workdir={workdir}",
            "--config.log.tensorboard=False",
        ]
        start = time.perf_counter()
        result = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800
        )
        wall_s = time.perf_counter() - start
        if result.returncode != 0:
            raise SystemExit(f"{config} ({lowering}) failed:\n{result.stderr[-3000:]}")
        with open(os.path.join(workdir, "summary.json"), encoding="utf-8") as f:
            summary = json.load(f)
    return {"sps": summary["sps"], "wall_s": wall_s, "checksum": summary["params_checksum"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--runs", default=",".join(RUNS), help=f"from {', '.join(RUNS)}")
    args = parser.parse_args()
    names = args.runs.split(",")
    unknown = sorted(set(names) - set(RUNS))
    if unknown:
        raise SystemExit(f"--runs: unknown {', '.join(unknown)}; choose from {', '.join(RUNS)}")
    results = {(name, lowering): [] for name in names for lowering in (LOOP, WRITTEN_OUT)}
    print("| round | run | Threefry on CPU | env steps/s (steady) | whole process | checksum |")
    print("|---|---|---|---|---|---|")
    for round_index in range(1, args.rounds + 1):
        order = (LOOP, WRITTEN_OUT) if round_index % 2 else (WRITTEN_OUT, LOOP)
        for name in names:
            title, config = RUNS[name]
            for lowering in order:
                result = run(config, lowering)
                results[name, lowering].append(result)
                print(
                    f"| {round_index} | {title} | {lowering} | {result['sps']:,.0f} "
                    f"| {result['wall_s']:.1f} s | `{result['checksum'][:12]}` |",
                    flush=True,
                )
            checksums = {r["checksum"] for lowering in order for r in results[name, lowering]}
            if len(checksums) != 1:
                raise SystemExit(f"{config}: the two lowerings trained different parameters")
    print()
    for name in names:
        written, loop = results[name, WRITTEN_OUT], results[name, LOOP]
        sps = [w["sps"] / x["sps"] for w, x in zip(written, loop, strict=True)]
        wall = [w["wall_s"] / x["wall_s"] for w, x in zip(written, loop, strict=True)]
        print(
            f"* {RUNS[name][0]}, written out / loop, per round: env steps/s "
            f"{', '.join(f'{r:.2f}' for r in sps)}; whole process "
            f"{', '.join(f'{r:.2f}' for r in wall)}"
        )


if __name__ == "__main__":
    main()
