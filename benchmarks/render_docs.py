"""Renders the result blocks of README.md and docs/*.md from the records in docs/records/.

    python benchmarks/render_docs.py           # rewrites every block from its record
    python benchmarks/render_docs.py --check   # exit 1 naming each stale block

A block is the text between `<!-- record:NAME STYLE -->` and `<!-- /record:NAME -->`;
NAME is a record (`docs/records/NAME.json`) and STYLE how it is shown: `table` (one row
per seed, then where and how it was measured), `line` (one sentence for prose), or
`output` (what a benchmark printed, recorded by `benchmarks/record_output.py`: markdown
as it is, text in a code block, then where and how it was measured).
Nothing between the markers is written by hand: tests/test_records.py fails when a block
differs from what its record renders.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import sys

import records

BLOCK = re.compile(
    r"(<!-- record:(?P<name>[\w.-]+) (?P<style>\w+) -->\n)(?P<body>.*?)"
    r"(<!-- /record:(?P=name) -->)",
    re.DOTALL,
)


def documents() -> list[str]:
    return [os.path.join(records.ROOT, "README.md")] + sorted(
        glob.glob(os.path.join(records.ROOT, "docs", "*.md"))
    )


def provenance(record: dict) -> str:
    machine, versions = record["machine"], record["versions"]
    dirty = " with uncommitted changes" if record["dirty"] else ""
    return (
        f"`{record['command']}`, commit {record['commit'][:10]}{dirty}, {record['date']}, "
        f"{machine['cpu']} ({machine['cores']} cores), jax {versions['jax']}, "
        f"envpool {versions['envpool']}; `docs/records/{record['name']}.json`"
    )


def render(name: str, style: str) -> str:
    record = records.read(name)
    if style == "output":
        output = record["values"]["output"]
        if record["values"]["format"] != "markdown":
            output = f"```text\n{output}```\n"
        return f"{output}\nRecorded by {provenance(record)}.\n"
    seeds = record["values"]["seeds"]
    if style in ("line", "tasksline"):
        if style == "line":
            returns = [f"{seeds[s]['mean_return']:.1f}" for s in seeds]
            counted = "mean return of the last 100 episodes"
        else:  # A joint run: summary.json's `mean_return` averages its tasks' own means.
            returns = [f"{seeds[s]['mean_return']:.3g}" for s in seeds]
            counted = "the mean over tasks of each task's last 100 episodes"
        listed = ", ".join(returns[:-1]) + f" and {returns[-1]}" if len(returns) > 1 else returns[0]
        which = f"seeds {', '.join(seeds)} end" if len(seeds) > 1 else f"seed {list(seeds)[0]} ends"
        return f"{which} at {listed} ({counted}; record `docs/records/{name}.json`)\n"
    if style == "table":
        rows = [
            "| seed | final mean return (last 100 episodes) | evaluation: mean (min) | "
            "steps/s | wall time | params_checksum |",
            "|---|---|---|---|---|---|",
        ]
        for seed, result in seeds.items():
            evaluation = result.get("eval")
            evaluated = "-"
            if evaluation and "levels" in evaluation:  # Procgen: each level set, then the gap.
                evaluated = ", ".join(
                    f"{name} levels {fields['mean_return']:.1f} ({fields['min_return']:.0f})"
                    # Training levels first, as evaluate prints them.
                    for name, fields in sorted(
                        evaluation["levels"].items(), key=lambda item: item[0] != "train"
                    )
                )
                episodes = {fields["episodes"] for fields in evaluation["levels"].values()}
                evaluated += f" over {'/'.join(map(str, sorted(episodes)))} episodes each"
                if "generalization_gap" in evaluation:
                    evaluated += f"; gap {evaluation['generalization_gap']:.1f}"
            elif evaluation:
                # A multi-task evaluation has a mean over tasks and no single minimum.
                minimum = evaluation.get("min_return")
                lowest = f" ({minimum:.0f})" if minimum is not None else ""
                mean, episodes = evaluation["mean_return"], evaluation["episodes"]
                greedy = " greedy" if evaluation.get("greedy") else ""
                evaluated = f"{mean:.1f}{lowest} over {episodes}{greedy} episodes"
            rows.append(
                f"| {seed} | {result['mean_return']:.1f} | {evaluated} | {result['sps']:,.0f} | "
                f"{result['wall_time_s']:.0f} s | `{result['params_checksum'][:12]}` |"
            )
        return "\n".join(rows) + f"\n\nRecorded by {provenance(record)}.\n"
    raise ValueError(
        f"record block {name}: unknown style {style!r} (table, line, tasksline, output)"
    )


def rendered(text: str) -> str:
    def replace(match: re.Match) -> str:
        body = render(match["name"], match["style"])
        return match.group(1) + body + match.group(5)

    return BLOCK.sub(replace, text)


def stale_blocks() -> list[str]:
    """Each document whose record blocks differ from their records' rendering."""
    stale = []
    for path in documents():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if rendered(text) != text:
            stale.append(os.path.relpath(path, records.ROOT))
    return stale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale blocks")
    args = parser.parse_args()
    if args.check:
        stale = stale_blocks()
        for path in stale:
            print(f"{path}: record blocks are stale; run python benchmarks/render_docs.py")
        sys.exit(1 if stale else 0)
    for path in documents():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        new = rendered(text)
        if new != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
            print(f"rendered {os.path.relpath(path, records.ROOT)}")


if __name__ == "__main__":
    main()
