"""What every sebulba process pays before it does anything: importing its run path.

    python benchmarks/import_time.py                     # ~30 s on 2 CPU cores
    python benchmarks/import_time.py --variant=ml_dtypes-0.7.0:/tmp/ml7 \
        --variant=ml_dtypes-0.6.0:/tmp/ml6               # the same, per package variant

A `python -m sebulba.main` command line, a `sebulba.evaluate`, each xdist worker and each
command a test starts imports JAX and flax before its first line of work (envpool, rlax
and orbax follow on first use). This starts `--rounds` fresh processes per variant,
interleaved so that the machine's load falls on every variant alike, each importing what a
training command line imports (`sebulba.main` and `sebulba.train`), and prints a markdown
table of the median wall and CPU seconds per variant, then the modules with the largest
import time of their own (`python -X importtime`) in the first variant.

A variant is `NAME:DIR`: DIR goes first on `PYTHONPATH`, so a package installed there with
`pip install --no-deps --target DIR PACKAGE==VERSION` replaces the installed one (no
variant: the installed packages alone). setup.py's bound on ml_dtypes comes from this
comparison (docs/benchmarks.md, "Start-up").
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMPORTS = "import sebulba.main, sebulba.train"


def variant_env(directory: str | None) -> dict[str, str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    paths = [ROOT] + ([directory] if directory else [])
    env["PYTHONPATH"] = os.pathsep.join(paths[::-1] + [os.environ.get("PYTHONPATH", "")])
    return env


def timed_import(env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s) of one fresh process importing IMPORTS."""
    before = os.times()
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", IMPORTS], env=env, cwd=ROOT, check=True)
    wall = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return wall, cpu


def installed_version(env: dict[str, str], package: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return result.stdout.strip() or "?"


def largest_own_import_times(env: dict[str, str], count: int) -> list[tuple[float, str]]:
    """[(seconds, module)] of the `count` modules that took longest to import themselves."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", IMPORTS],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in result.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
        if match:
            rows.append((int(match.group(1)) / 1e6, match.group(2)))
    return sorted(rows, reverse=True)[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="Fresh processes per variant.")
    parser.add_argument(
        "--variant", action="append", default=[], help="NAME:DIR, DIR first on PYTHONPATH."
    )
    parser.add_argument("--top", type=int, default=8, help="Modules listed by own time.")
    args = parser.parse_args()
    variants = [tuple(v.split(":", 1)) for v in args.variant] or [("installed", None)]
    envs = {name: variant_env(directory) for name, directory in variants}
    timings = {name: [] for name in envs}
    for env in envs.values():  # One untimed import each: the files are then cached.
        timed_import(env)
    for _ in range(args.rounds):
        for name, env in envs.items():
            timings[name].append(timed_import(env))
    print(f"`{IMPORTS}` in a fresh process, median of {args.rounds}:\n")
    print("| variant | ml_dtypes | jax | wall s | CPU s |")
    print("|---|---|---|---|---|")
    for name, env in envs.items():
        walls, cpus = zip(*timings[name], strict=True)
        versions = [installed_version(env, p) for p in ("ml_dtypes", "jax")]
        print(
            f"| {name} | {versions[0]} | {versions[1]} | {statistics.median(walls):.2f} "
            f"| {statistics.median(cpus):.2f} |"
        )
    first = next(iter(envs))
    print(f"\nLargest own import times ({first}):\n")
    for seconds, module in largest_own_import_times(envs[first], args.top):
        print(f"- {module}: {seconds:.2f} s")


if __name__ == "__main__":
    main()
