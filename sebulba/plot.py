"""Learning curves from run directories.

    python -m sebulba.plot runs/ppo_s1 runs/ppo_s2 runs/impala_s1 --out=curves.png
    python -m sebulba.plot runs/sweep        # a sebulba.sweep directory: runs/sweep/curves.png

Without `--out` the figure goes to `curves.png` in the first directory given. Nothing is
dropped silently: where a curve's mean covers only the range its runs share, or the runs
share none (each is then drawn alone), a note under the panel says so; the legend sits
below the panels, covering none of them.

Runs whose configs differ only by `seed` are one curve (a sweep's runs: one curve per
setting); two runs of one curve with the same seed are flagged on stderr and in the
output, since they are one experiment run twice rather than two samples. A curve is
their mean and a 95% bootstrap confidence band, against env steps and against wall-clock
time. When the runs cover two or more Atari-57 games, a third panel aggregates
human-normalized final scores per agent (median and interquartile mean with stratified
bootstrap confidence intervals, via rliable; Agarwal et al. 2021).

A population's workdir (`pbt.population`, its `member=<i>` runs) given alone gets its own
figure: each member's return, and each mutated hyperparameter's value per member, against
env steps, the exploit/explore steps marked (`sebulba.pbt.plot`); given beside other runs,
its members are one curve like a `--seeds` directory's.

Multi-task runs (`env.ids`; their metrics lines hold `episodic_return/<task id>`) get one
panel per task, return against env steps, and an aggregate panel: the mean return over
the tasks, or for a set of Atari-57 games the median human-normalized score over them,
each task counted at its newest return; single-task runs given alongside appear in the
panel of their task.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import sys

import numpy as np

from sebulba.experiments.atari_scores import human_normalized_score
from sebulba.pbt.plot import member_dirs, plot_population
from sebulba.runtime.workdir import check_writable_dir, runs_inside

# Config sections that change how a run is logged or saved, not what it learns.
_NOT_EXPERIMENT_KEYS = ("seed", "log", "ckpt")
_GRID_POINTS = 200
TASK_RETURN_PREFIX = "episodic_return/"  # A multi-task run's metric of one task's return.
_BOOTSTRAP_SAMPLES = 1000
_NAMED_TASKS = 3  # A curve of more tasks is labelled by their count.
_PANEL_COLUMNS = 4  # A multi-task figure's panels per row.


@dataclasses.dataclass
class Run:
    """One run directory: its config and its (step, wall time, return) series."""

    path: str
    config: dict
    steps: np.ndarray
    wall_times: np.ndarray
    returns: np.ndarray
    label: str | None = None  # A sweep run's curve label: the sweep and its setting.
    # A multi-task run's (env steps [n], episodic returns [n]) of each task, in env.ids
    # order, from the `episodic_return/<task id>` of its metrics lines; {} for one task.
    task_returns: dict[str, tuple[np.ndarray, np.ndarray]] = dataclasses.field(default_factory=dict)

    @property
    def task_ids(self) -> list[str]:
        """The run's tasks: `env.ids`, or its one `env.id`."""
        return list(self.config["env"].get("ids") or [self.config["env"]["id"]])

    @property
    def final_return(self) -> float:
        summary_path = os.path.join(self.path, "summary.json")
        if os.path.exists(summary_path):
            with open(summary_path, encoding="utf-8") as f:
                value = json.load(f).get("mean_return")
            if value is not None:
                return float(value)
        return float(np.mean(self.returns[-10:]))


def load_run(path: str) -> Run:
    """Reads `config.json` and `metrics.jsonl` of a run; raises ValueError if unusable."""
    config_path = os.path.join(path, "config.json")
    metrics_path = os.path.join(path, "metrics.jsonl")
    for required in (config_path, metrics_path):
        if not os.path.exists(required):
            raise ValueError(f"{path} is not a run directory: {os.path.basename(required)} missing")
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    ids = config["env"].get("ids") or []
    points, task_points = [], {task_id: [] for task_id in ids} if len(ids) > 1 else {}
    with open(metrics_path, encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            for task_id, series in task_points.items():
                value = record.get(f"{TASK_RETURN_PREFIX}{task_id}")
                if value is not None:
                    series.append((record["global_step"], value))
            if record.get("episodic_return") is not None:
                points.append(
                    (
                        record["global_step"],
                        record.get("wall_time_s", 0.0),
                        record["episodic_return"],
                    )
                )
    if not points:
        raise ValueError(f"{path} has no finished episodes in metrics.jsonl yet")
    steps, wall, returns = (np.asarray(c, float) for c in zip(*points, strict=True))
    task_returns = {
        task_id: tuple(np.asarray(c, float).reshape(-1) for c in zip(*series, strict=True))
        if series
        else (np.zeros(0), np.zeros(0))
        for task_id, series in task_points.items()
    }
    return Run(path, config, steps, wall, returns, task_returns=task_returns)


def group_by_config(runs: list[Run]) -> dict[str, list[Run]]:
    """Groups runs whose configs are equal but for seed and logging; keys are labels."""
    groups: dict[str, list[Run]] = collections.OrderedDict()
    labels: dict[str, str] = {}
    for run in runs:
        key = json.dumps(
            {k: v for k, v in run.config.items() if k not in _NOT_EXPERIMENT_KEYS}, sort_keys=True
        )
        if key not in labels:
            ids = run.task_ids
            env = "+".join(ids) if len(ids) <= _NAMED_TASKS else f"{len(ids)} tasks"
            base = run.label or (
                f"{run.config['agent']['name']} {env} lag={run.config['pipeline']['policy_lag']}"
            )
            taken = sum(label.startswith(base) for label in labels.values())
            labels[key] = base if not taken else f"{base} ({taken + 1})"
        groups.setdefault(labels[key], []).append(run)
    return groups


def load_runs(paths: list[str]) -> list[Run]:
    """Loads run directories; a sweep directory (with sweep.json) stands for its runs, and
    so does a `--seeds` directory (its `seed=<seed>` workdirs, one curve).

    A sweep's runs are labelled `<sweep directory name>/<setting>`; its runs that have
    not started, or not finished an episode, yet are skipped with a note on stderr.
    """
    runs = []
    for path in paths:
        seed_runs = [] if os.path.exists(os.path.join(path, "config.json")) else runs_inside(path)
        if seed_runs and not os.path.exists(os.path.join(path, "sweep.json")):
            # A --seeds directory (WORKDIR/seed=<seed>): its seeds make one curve.
            runs += [load_run(run_dir) for run_dir in seed_runs]
            continue
        if not os.path.exists(os.path.join(path, "sweep.json")):
            runs.append(load_run(path))
            continue
        name = os.path.basename(os.path.normpath(path))
        run_dirs = []
        for parent, dirs, files in os.walk(path):
            if "config.json" in files and "metrics.jsonl" in files:
                run_dirs.append(parent)
                dirs.clear()  # Not into its checkpoints.
        for run_dir in sorted(run_dirs):
            setting = os.path.relpath(os.path.dirname(run_dir), path)
            try:
                run = load_run(run_dir)
            except ValueError as error:
                print(f"sebulba.plot: skipping {error}", file=sys.stderr)
                continue
            run.label = name if setting == "." else f"{name}/{setting}"
            runs.append(run)
    return runs


def repeated_seeds(groups: dict[str, list[Run]]) -> list[dict]:
    """Runs of one curve that share a seed: the same experiment twice, not two samples."""
    repeated = []
    for label, runs in groups.items():
        by_seed = collections.defaultdict(list)
        for run in runs:
            by_seed[run.config.get("seed")].append(run.path)
        repeated += [
            {"curve": label, "seed": seed, "runs": paths}
            for seed, paths in by_seed.items()
            if len(paths) > 1
        ]
    return repeated


def mean_and_band(xs: list[np.ndarray], ys: list[np.ndarray], seed: int = 0):
    """Interpolates runs on a common grid; returns grid, mean and 95% bootstrap band."""
    end = min(x[-1] for x in xs)
    start = max(x[0] for x in xs)
    grid = np.linspace(start, end, _GRID_POINTS) if end > start else np.array([end])
    curves = np.stack([np.interp(grid, x, y) for x, y in zip(xs, ys, strict=True)])
    mean = curves.mean(axis=0)
    if len(curves) == 1:
        return grid, mean, mean, mean
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(curves), size=(_BOOTSTRAP_SAMPLES, len(curves)))
    boot_means = curves[picks].mean(axis=1)
    low, high = np.percentile(boot_means, [2.5, 97.5], axis=0)
    return grid, mean, low, high


def atari_aggregates(groups: dict[str, list[Run]]) -> dict[str, dict[str, tuple]]:
    """Median and IQM of human-normalized scores per agent, with 95% stratified CIs.

    Returns {agent label: {"median": (point, low, high), "iqm": (...)}} for agents with
    runs on at least two Atari-57 games; {} otherwise.
    """
    per_agent: dict[str, dict[str, list[float]]] = collections.defaultdict(dict)
    for runs in groups.values():
        for run in runs:
            if run.task_returns:  # A multi-task run: its games are aggregated per run.
                continue
            env_id = run.config["env"]["id"]
            score = human_normalized_score(env_id, run.final_return)
            if score is None:
                continue
            agent = f"{run.config['agent']['name']} lag={run.config['pipeline']['policy_lag']}"
            per_agent[agent].setdefault(env_id, []).append(score)
    scores = {}
    for agent, games in per_agent.items():
        if len(games) < 2:
            continue
        num_runs = min(len(v) for v in games.values())  # rliable needs a full matrix.
        scores[agent] = np.array([v[:num_runs] for v in games.values()]).T  # [runs, games]
    if not scores:
        return {}
    from rliable import library, metrics

    def aggregate(matrix):
        return np.array([metrics.aggregate_median(matrix), metrics.aggregate_iqm(matrix)])

    points, intervals = library.get_interval_estimates(scores, aggregate, reps=2000)
    return {
        agent: {
            name: (
                float(points[agent][i]),
                float(intervals[agent][0][i]),
                float(intervals[agent][1][i]),
            )
            for i, name in enumerate(("median", "iqm"))
        }
        for agent in scores
    }


def task_aggregate(run: Run) -> tuple[np.ndarray, np.ndarray, str]:
    """A multi-task run's aggregate over its tasks at each step where every task has a return.

    A task's value at a step is its newest `episodic_return/<task id>` so far. For a set of
    Atari-57 games the aggregate is the median human-normalized score over the games
    (`sebulba.experiments.atari_scores`), otherwise the mean return over the tasks.

    Returns:
      steps [n], aggregate [n], and what the aggregate is ("median human-normalized score"
      or "mean return over tasks").
    """
    ids = list(run.task_returns)
    atari = all(human_normalized_score(task_id, 0.0) is not None for task_id in ids)
    steps = np.unique(np.concatenate([run.task_returns[t][0] for t in ids]))
    latest = []  # [tasks, steps]: each task's newest return at each step (-1: none yet).
    for task_id in ids:
        task_steps, returns = run.task_returns[task_id]
        index = np.searchsorted(task_steps, steps, side="right") - 1
        values = returns[np.maximum(index, 0)] if len(returns) else np.zeros(len(steps))
        if atari:
            values = np.array([human_normalized_score(task_id, v) for v in values])
        latest.append(np.where(index >= 0, values, np.nan))
    latest = np.array(latest).reshape(len(ids), len(steps))
    complete = ~np.isnan(latest).any(axis=0)
    values = np.median(latest, axis=0) if atari else np.mean(latest, axis=0)
    kind = "median human-normalized score" if atari else "mean return over tasks"
    return steps[complete], values[complete], kind


def _plot_tasks(groups: dict[str, list[Run]], flagged: set[str], plt):
    """The figure of multi-task runs: one panel per task, then the aggregate over tasks.

    Returns:
      (figure, {task id: {curve label: runs drawn}} in panel order, {curve label: what
      its aggregate is} for the multi-task curves).
    """
    task_ids = list(dict.fromkeys(t for runs in groups.values() for r in runs for t in r.task_ids))
    columns = min(_PANEL_COLUMNS, len(task_ids) + 1)
    rows = -(-(len(task_ids) + 1) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5 * columns, 4 * rows), squeeze=False)
    axes = axes.ravel()
    for ax in axes[len(task_ids) + 1 :]:
        ax.axis("off")
    panels = {task_id: {} for task_id in task_ids}
    aggregates = {}
    notes: dict[int, list[str | None]] = collections.defaultdict(list)
    for index, (label, runs) in enumerate(groups.items()):
        note = ", seeds repeated!" if label in flagged else ""
        color = f"C{index % 10}"
        for panel, task_id in enumerate(task_ids):
            series = [_task_series(run, task_id) for run in runs]
            series = [s for s in series if s is not None and len(s[0])]
            if series:
                curve = f"{label} (n={len(series)}{note})"
                notes[panel].append(_draw_curve(axes[panel], series, curve, color, "env step"))
                panels[task_id][label] = len(series)
        multitask = [run for run in runs if run.task_returns]
        series = [task_aggregate(run) for run in multitask]
        kinds = {kind for _, _, kind in series}
        series = [(steps, values) for steps, values, _ in series if len(steps)]
        if series:
            curve = f"{label} (n={len(series)}{note})"
            aggregate_ax = axes[len(task_ids)]
            notes[len(task_ids)].append(_draw_curve(aggregate_ax, series, curve, color, "env step"))
            aggregates[label] = kinds.pop()
    for ax, task_id in zip(axes, task_ids, strict=False):
        ax.set_title(task_id, fontsize=9)
        ax.set_ylabel("episodic return")
    aggregate_ax = axes[len(task_ids)]
    aggregate_ax.set_title("aggregate over tasks", fontsize=9)
    aggregate_ax.set_ylabel(" / ".join(sorted(set(aggregates.values()))) or "no aggregate yet")
    for panel, ax in enumerate(axes[: len(task_ids) + 1]):
        ax.set_xlabel("env steps")
        ax.grid(alpha=0.3)
        _annotate(ax, notes[panel])
    _legend_below(fig, axes[: len(task_ids) + 1])
    return fig, panels, aggregates


def _task_series(run: Run, task_id: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(env steps, returns) of one task of a run: its own series, or a one-task run's."""
    if run.task_returns:
        return run.task_returns.get(task_id)
    return (run.steps, run.returns) if run.task_ids == [task_id] else None


def _draw_curve(
    ax, series: list[tuple[np.ndarray, np.ndarray]], label: str, color: str, unit: str = ""
) -> str | None:
    """The mean of runs' (x, y) series and, for two runs or more, its 95% bootstrap band.

    The mean covers only the x range every run shares. Returns a note for the figure
    whenever that hides data: the runs' curves are cut to the shared range, or (no shared
    range at all, e.g. wall-clock times that do not overlap) each run is drawn alone.
    """
    xs = [x for x, _ in series]
    start, end = max(x[0] for x in xs), min(x[-1] for x in xs)
    if len(series) > 1 and end <= start:
        for index, (x, y) in enumerate(series):
            ax.plot(x, y, color=color, alpha=0.6, label=label if index == 0 else None)
        return f"{label}: the {len(series)} runs share no {unit or 'x'} range; each drawn alone"
    grid, mean, low, high = mean_and_band(xs, [y for _, y in series])
    ax.plot(grid, mean, label=label, color=color)
    if len(series) > 1:
        ax.fill_between(grid, low, high, color=color, alpha=0.2)
    furthest = max(x[-1] for x in xs)
    earliest = min(x[0] for x in xs)
    span = max(furthest - earliest, 1e-9)
    if (furthest - end) / span > 0.01 or (start - earliest) / span > 0.01:
        return (
            f"{label}: mean over the {unit or 'x'} range all runs share, "
            f"{start:,.0f}-{end:,.0f} (runs span {earliest:,.0f}-{furthest:,.0f})"
        )
    return None


def _annotate(ax, notes: list[str | None]) -> None:
    """Writes what a panel leaves out under its x axis label."""
    notes = [note for note in notes if note]
    if notes:
        ax.annotate(
            "\n".join(notes),
            xy=(0, 0),
            xycoords="axes fraction",
            xytext=(0, -34),
            textcoords="offset points",
            va="top",
            fontsize=7,
            color="0.3",
        )


def _legend_below(fig, axes) -> None:
    """One legend for the figure, below every panel, so that it covers none of them."""
    handles, labels = {}, []
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in handles:
                handles[label] = handle
                labels.append(label)
    if labels:
        fig.legend(
            [handles[label] for label in labels],
            labels,
            loc="lower center",
            ncol=min(len(labels), 3),
            fontsize=8,
            frameon=False,
        )


def plot(run_dirs: list[str], out: str) -> dict:
    """Draws the learning curves (and Atari aggregates) of `run_dirs` into `out`.

    A missing folder of `out` is created (only once the runs have loaded).

    Raises:
      ValueError: a run cannot be read, or `out` cannot be written (a folder, below a
        file, or in a folder this process cannot write); raised before any drawing.
    """
    if os.path.isdir(out):
        raise ValueError(f"--out {out} is a folder: name the image file, e.g. {out}/curves.png")
    check_writable_dir(os.path.dirname(os.path.abspath(out)), "the folder of --out")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if len(run_dirs) == 1 and member_dirs(run_dirs[0]):
        # A population's workdir: each member's curve and hyperparameters.
        return plot_population(run_dirs[0], out, plt)
    groups = group_by_config(load_runs(run_dirs))
    repeated = repeated_seeds(groups)
    for entry in repeated:
        print(
            f"sebulba.plot: warning: curve {entry['curve']!r} has {len(entry['runs'])} runs with "
            f"seed {entry['seed']}: {', '.join(entry['runs'])}",
            file=sys.stderr,
        )
    flagged = {entry["curve"] for entry in repeated}
    if any(run.task_returns for runs in groups.values() for run in runs):
        fig, panels, task_aggregates = _plot_tasks(groups, flagged, plt)
        _save(fig, out, plt)
        return {
            "curves": {k: len(v) for k, v in groups.items()},
            "tasks": panels,
            "task_aggregates": task_aggregates,
            "repeated_seeds": repeated,
        }
    aggregates = atari_aggregates(groups)
    panels = 3 if aggregates else 2
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.5))
    notes: list[list[str | None]] = [[], []]
    for index, (label, runs) in enumerate(groups.items()):
        note = ", seeds repeated!" if label in flagged else ""
        curve, color = f"{label} (n={len(runs)}{note})", f"C{index % 10}"
        for panel, (xs, unit) in enumerate(
            (([r.steps for r in runs], "env step"), ([r.wall_times for r in runs], "time (s)"))
        ):
            series = list(zip(xs, [r.returns for r in runs], strict=True))
            notes[panel].append(_draw_curve(axes[panel], series, curve, color, unit))
    axes[0].set_xlabel("env steps")
    axes[1].set_xlabel("wall-clock time (s)")
    for panel, ax in enumerate(axes[:2]):
        ax.set_ylabel("episodic return")
        ax.grid(alpha=0.3)
        _annotate(ax, notes[panel])
    _legend_below(fig, axes[:2])
    if aggregates:
        ax = axes[2]
        for row, values in enumerate(aggregates.values()):
            for col, name in enumerate(("median", "iqm")):
                point, low, high = values[name]
                y = row + 0.2 * col
                ax.errorbar(
                    point,
                    y,
                    xerr=[[point - low], [high - point]],
                    fmt="o",
                    label=name if row == 0 else None,
                    color=f"C{col}",
                )
        ax.set_yticks(range(len(aggregates)), list(aggregates))
        ax.set_xlabel("human-normalized score (95% stratified bootstrap CI)")
        ax.legend(fontsize=8)
    _save(fig, out, plt)
    return {
        "curves": {k: len(v) for k, v in groups.items()},
        "atari_aggregates": aggregates,
        "repeated_seeds": repeated,
        "notes": [note for panel in notes for note in panel if note],
    }


def _save(fig, out: str, plt) -> None:
    # Room below the panels for the legend and the notes of what a panel leaves out.
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sebulba.plot", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "run_dirs", nargs="+", help="run directories (--workdir of each run) or sweep directories"
    )
    parser.add_argument(
        "--out",
        default=None,
        help="output image (missing folders are created); default: curves.png in the first "
        "run or sweep directory",
    )
    args = parser.parse_args(argv)
    out = args.out or os.path.join(args.run_dirs[0], "curves.png")
    try:
        result = plot(args.run_dirs, out)
    except ValueError as error:
        print(f"sebulba.plot: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps({"out": os.path.abspath(out), **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
