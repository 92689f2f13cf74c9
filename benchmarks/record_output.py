"""Runs a benchmark command and keeps what it printed as a record the docs can quote.

    python benchmarks/record_output.py --name=ceilings_ppo_cartpole --markdown -- \\
        python benchmarks/ceilings.py --config=configs/ppo_cartpole.py
    python benchmarks/record_output.py --name=closing_sweep --markdown --from="| setting" \\
        --before="python -m sebulba.sweep ... --parallel=1" -- python -m sebulba.sweep ... --report

The command runs from the repository root with its output shown as it comes; its standard
output (from the first line that starts with `--from`, if given; the last `--tail` lines,
if given; without the lines that start with `--drop`) becomes `docs/records/NAME.json`'s
`output`, which a docs block `<!-- record:NAME output -->` shows verbatim, in a text
block, or as markdown with `--markdown` (for scripts that print markdown tables). Each
`--before` command runs first (e.g. the sweep whose report is recorded) and is recorded
with it. With `--transcript` the record is a console session instead: each command,
`--before` ones included, as `$ COMMAND` followed by (the last `--tail` lines of) what it
printed. A command that fails writes nothing: the record keeps its last good version.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys

import records


def run_and_capture(argv: list[str]) -> str:
    """Runs ARGV from the repository root, echoing its stdout; raises if it fails."""
    env = dict(os.environ)
    env["PYTHONPATH"] = records.ROOT + os.pathsep + env.get("PYTHONPATH", "")
    process = subprocess.Popen(
        argv, cwd=records.ROOT, env=env, stdout=subprocess.PIPE, text=True, bufsize=1
    )
    lines = []
    for line in process.stdout:
        sys.stdout.write(line)
        lines.append(line)
    if process.wait() != 0:
        raise SystemExit(f"record_output: {shlex.join(argv)} exited {process.returncode}")
    return "".join(lines)


def excerpt(
    output: str, start_prefix: str | None, tail: int | None, drop_prefix: str | None = None
) -> str:
    lines = output.splitlines()
    if drop_prefix is not None:
        lines = [line for line in lines if not line.startswith(drop_prefix)]
    if start_prefix is not None:
        starts = [i for i, line in enumerate(lines) if line.startswith(start_prefix)]
        if not starts:
            raise SystemExit(f"record_output: no output line starts with {start_prefix!r}")
        lines = lines[starts[0] :]
    if tail:
        lines = lines[-tail:]
    return "\n".join(lines).strip("\n") + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="the record: docs/records/NAME.json")
    parser.add_argument("--markdown", action="store_true", help="the output is markdown")
    parser.add_argument("--from", dest="start", default=None, help="keep from this line on")
    parser.add_argument("--tail", type=int, default=None, help="keep the last N lines")
    parser.add_argument("--drop", default=None, help="leave out lines that start with this")
    parser.add_argument("--before", action="append", default=[], help="a command run first")
    parser.add_argument(
        "--transcript", action="store_true", help="record every command and its output"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to record after --")
    session = []
    for before in args.before:
        printed = run_and_capture(_python_argv(shlex.split(before)))
        session.append(f"$ {before}\n{excerpt(printed, None, args.tail)}")
    output = excerpt(run_and_capture(_python_argv(command)), args.start, args.tail, args.drop)
    if args.transcript:
        output = "".join(session) + f"$ {shlex.join(command)}\n{output}"
    measured = " && ".join([*args.before, shlex.join(command)])
    path = records.write(
        args.name,
        measured,
        {"output": output, "format": "markdown" if args.markdown else "text"},
    )
    print(f"wrote {path}; now run: python benchmarks/render_docs.py", file=sys.stderr)


def _python_argv(argv: list[str]) -> list[str]:
    """`python ...` runs with this interpreter (the one with sebulba installed)."""
    return [sys.executable, *argv[1:]] if argv[:1] == ["python"] else argv


if __name__ == "__main__":
    main()
