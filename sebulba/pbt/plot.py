"""The figure of a population (`python -m sebulba.plot WORKDIR` on a PBT run's workdir).

One panel of each member's return against env steps, then one per mutated hyperparameter:
each member's value against env steps (log scale), as its metrics lines report them
(`pbt/<name>`). Dotted vertical lines mark the exploit/explore steps; a member that was
replaced shows a jump in its values there, and its return continues from its source's.
"""

from __future__ import annotations

import json
import os

import numpy as np

from sebulba.runtime.workdir import runs_inside

MEMBER_PREFIX = "member="


def member_dirs(path: str) -> list[str]:
    """A population workdir's members, in member order ([] if `path` is not one)."""
    runs = [run for run in runs_inside(path) if os.path.basename(run).startswith(MEMBER_PREFIX)]
    return sorted(runs, key=lambda run: int(os.path.basename(run)[len(MEMBER_PREFIX) :]))


def _lines(run_dir: str) -> list[dict]:
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _names(run_dir: str) -> list[str]:
    with open(os.path.join(run_dir, "config.json"), encoding="utf-8") as f:
        text = json.load(f)["pbt"]["hyperparameters"]
    return [name.strip() for name in text.split(",") if name.strip()]


def plot_population(path: str, out: str, plt) -> dict:
    """Draws the population in `path` into `out`; returns what it drew.

    Raises:
      ValueError: `path` holds no member with a metrics line yet.
    """
    runs = member_dirs(path)
    series = {
        run: _lines(run) for run in runs if os.path.isfile(os.path.join(run, "metrics.jsonl"))
    }
    series = {run: lines for run, lines in series.items() if lines}
    if not series:
        raise ValueError(f"{path} holds no population member with a metrics line yet")
    names = _names(runs[0])
    fig, axes = plt.subplots(1, 1 + len(names), figsize=(6 * (1 + len(names)), 4.5), squeeze=False)
    axes = axes[0]
    steps_at = []
    for index, (run, lines) in enumerate(series.items()):
        color, label = f"C{index % 10}", os.path.basename(run)
        points = [
            (x["global_step"], x["episodic_return"])
            for x in lines
            if x.get("episodic_return") is not None
        ]
        if points:
            axes[0].plot(*np.asarray(points).T, color=color, label=label)
        steps = np.asarray([x["global_step"] for x in lines], float)
        for panel, name in enumerate(names, start=1):
            values = np.asarray([x.get(f"pbt/{name}", np.nan) for x in lines], float)
            axes[panel].step(steps, values, where="pre", color=color, label=label)
        generations = [x.get("pbt/generation", 0) for x in lines]
        steps_at = [
            lines[i]["global_step"]
            for i in range(1, len(lines))
            if generations[i] != generations[i - 1]
        ] or steps_at
    for ax in axes:
        for step in steps_at:
            ax.axvline(step, color="0.7", linestyle=":", linewidth=0.8)
        ax.set_xlabel("env steps")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("episodic return")
    for panel, name in enumerate(names, start=1):
        axes[panel].set_yscale("log")
        axes[panel].set_ylabel(f"agent.{name}")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(
        handles, labels, loc="lower center", ncol=min(len(labels), 8), fontsize=8, frameon=False
    )
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return {"population": len(series), "hyperparameters": names, "steps": len(steps_at)}
