"""Lists the records behind the docs' numbers, or reruns the commands that made them.

    python benchmarks/regenerate.py              # every record: when, on what, how to remake it
    python benchmarks/regenerate.py lag_comparison mujoco   # reruns those two, one after another
    python benchmarks/render_docs.py             # then puts the new numbers in the docs

Each record in docs/records/ keeps the command line that wrote it (`regenerate`); this
runs it again from the repository root. Run it on a committed tree: a record made with
uncommitted changes to `sebulba/`, `configs/` or `benchmarks/` says so and the tests
refuse it. Times and steps/s depend on the machine and its load; returns and checksums
depend only on the code, the seed, the CPU and the package versions (the record names
them).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys

import records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="records to regenerate (none: list them all)")
    args = parser.parse_args()
    if not args.names:
        for name in records.names():
            record = records.read(name)
            how = record.get("regenerate", f"(not kept; it measured: {record['command']})")
            print(f"{name}: commit {record['commit'][:10]}, {record['date']}\n    {how}")
        return
    for name in args.names:
        command = records.read(name).get("regenerate")
        if command is None:
            raise SystemExit(f"record {name!r} does not keep the command that wrote it")
        argv = shlex.split(command)
        print(f"regenerating {name}: {command}", flush=True)
        subprocess.run([sys.executable, *argv[1:]], cwd=records.ROOT, check=True)


if __name__ == "__main__":
    main()
