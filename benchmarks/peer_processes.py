"""Whole-process runs for the side-by-side benchmarks against a peer library
(`purejaxrl_minatar.py`, `purejaxql_minatar.py`).

Each side runs in a process of its own, started from a temporary directory with no
persistent compilation cache, so that its wall time counts start-up and every compile:
the peer's side as the benchmark script again with `--child` (which prints one result
line), sebulba's as `python -m sebulba.main`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULT_PREFIX = "RESULT "


def environment() -> dict:
    """The runs' environment: no compilation cache, and this checkout's sebulba first."""
    env = dict(os.environ, SEBULBA_COMPILATION_CACHE_DIR="")  # Every program compiles.
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    return env


def print_result(result: dict) -> None:
    """The child's one result line, which `run_child` reads back."""
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def run_child(script: str, flags: list[str]) -> dict:
    """`script --child FLAGS` in a process of its own: its printed result and `wall_s`."""
    with tempfile.TemporaryDirectory() as workdir:
        command = [sys.executable, os.path.abspath(script), "--child", *flags]
        start = time.perf_counter()
        done = subprocess.run(
            command, cwd=workdir, env=environment(), stdout=subprocess.PIPE, check=True
        )
        wall_s = time.perf_counter() - start
    line = [x for x in done.stdout.decode().splitlines() if x.startswith(RESULT_PREFIX)][-1]
    return dict(json.loads(line[len(RESULT_PREFIX) :]), wall_s=wall_s)


def run_sebulba(config: str, steps: int, seed: int, *overrides: str) -> tuple[dict, float, str]:
    """`python -m sebulba.main --config=configs/CONFIG` for `steps` env steps: its
    summary.json, the process's wall time and what it printed to stdout (passed on to
    stderr as it comes, so that a long run shows its progress)."""
    with tempfile.TemporaryDirectory() as workdir:
        command = [
            sys.executable,
            "-m",
            "sebulba.main",
            f"--config={os.path.join(ROOT, 'configs', config)}",
            f"--workdir={os.path.join(workdir, 'run')}",
            f"--config.total_timesteps={steps}",
            f"--config.seed={seed}",
            "--config.log.tensorboard=False",
            *overrides,
        ]
        printed = []
        start = time.perf_counter()
        with subprocess.Popen(
            command, cwd=workdir, env=environment(), stdout=subprocess.PIPE, text=True
        ) as process:
            for line in process.stdout:
                print(line, end="", file=sys.stderr, flush=True)
                printed.append(line)
        wall_s = time.perf_counter() - start
        if process.returncode:
            raise subprocess.CalledProcessError(process.returncode, command)
        with open(os.path.join(workdir, "run", "summary.json"), encoding="utf-8") as f:
            summary = json.load(f)
    return summary, wall_s, "".join(printed)
