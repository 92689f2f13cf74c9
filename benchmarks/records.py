"""Result records: what a benchmark measured, with its command, commit, machine and versions.

Every result that README.md and docs/ quote is rendered from a record in `docs/records/`
(`python benchmarks/render_docs.py`), and the script that measured it wrote the record:

    python benchmarks/default_runs.py --config=ppo_cartpole --seeds=1,2,3,4,5
    python benchmarks/render_docs.py        # rewrites every record block in the docs

A record says which machine and software it holds for: `same_environment` tells whether
this machine can reproduce its numbers bit for bit (same CPU model, same versions of the
packages that decide the arithmetic).
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORDS_DIR = os.path.join(ROOT, "docs", "records")
# The packages whose versions decide the numbers of a run (XLA's code, envpool's physics).
ARITHMETIC_PACKAGES = ("jax", "jaxlib", "envpool", "numpy", "flax", "optax", "rlax")


def _cpuinfo(field: str) -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.split(":", 1)[0].strip() == field:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def cpu_features() -> str:
    """A digest of the CPU's instruction-set flags: XLA:CPU compiles for them, so two
    CPUs of one model name (virtual machines often show a bare "AMD EPYC") can differ."""
    flags = " ".join(sorted((_cpuinfo("flags") or "").split()))
    return hashlib.sha256(flags.encode()).hexdigest()[:16]


# What a measurement runs: a change here between its start and its record makes it dirty.
MEASURED_PATHS = ("sebulba", "configs", "benchmarks")


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)


def environment(started: dict[str, Any] | None = None) -> dict[str, Any]:
    """The commit, machine and package versions a measurement is taken on.

    `started`: `environment()` as it was when the measurement began. The record then
    names that commit, and is dirty if the measured code had uncommitted changes then,
    or differs now from that commit (a long run's code could have changed under it;
    commits of docs or tests meanwhile do not count).
    """
    commit = _git("rev-parse", "HEAD").stdout.strip()
    # Uncommitted changes to what is measured (docs/records excepted: being rewritten).
    dirty = bool(_git("status", "--porcelain", "--", *MEASURED_PATHS).stdout.strip())
    if started is not None:
        changed = _git("diff", "--quiet", started["commit"], "--", *MEASURED_PATHS).returncode
        commit, dirty = started["commit"], started["dirty"] or dirty or changed != 0

    return {
        "commit": commit,
        "dirty": dirty,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "machine": {
            "cpu": cpu_model(),
            "cpu_features": cpu_features(),
            "cores": os.cpu_count(),
            "os": f"{platform.system()} {platform.machine()}",
        },
        "versions": {
            "python": platform.python_version(),
            **{name: importlib.metadata.version(name) for name in ARITHMETIC_PACKAGES},
        },
    }


def invocation() -> str:
    """The command line that is running now, as a user would type it from the repository."""
    script = os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)
    return "python " + shlex.join([script, *sys.argv[1:]])


def write(
    name: str, command: str, values: dict[str, Any], started: dict[str, Any] | None = None
) -> str:
    """Writes `docs/records/NAME.json`: the command that measured the values, the command
    that regenerates the record (the one running now), the environment and the values.

    `started`: `environment()` taken when the measurement began (see `environment`).
    """
    record = {
        "name": name,
        "command": command,
        "regenerate": invocation(),
        **environment(started),
        "values": values,
    }
    os.makedirs(RECORDS_DIR, exist_ok=True)
    path = os.path.join(RECORDS_DIR, f"{name}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2, sort_keys=True)
        f.write("\n")
    return path


def read(name: str) -> dict[str, Any]:
    path = os.path.join(RECORDS_DIR, f"{name}.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"no record {name!r}: {path} does not exist")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def names() -> list[str]:
    return sorted(f[: -len(".json")] for f in os.listdir(RECORDS_DIR) if f.endswith(".json"))


def same_environment(record: dict[str, Any]) -> tuple[bool, str]:
    """Whether this machine should reproduce the record exactly; if not, why not."""
    here = environment()
    for key in ("cpu", "cpu_features"):
        mine, theirs = here["machine"][key], record["machine"].get(key)
        if mine != theirs:
            return False, f"{key} {mine!r}, the record's {theirs!r}"
    for package in ("python", *ARITHMETIC_PACKAGES):
        mine, theirs = here["versions"][package], record["versions"].get(package)
        if mine != theirs:
            return False, f"{package} {mine}, the record's {theirs}"
    return True, "same CPU model and versions as the record"


if __name__ == "__main__":
    json.dump(environment(), sys.stdout, indent=2)
    print()
