"""A sweep's results: per-setting statistics over seeds, Atari aggregates, the console table.

Each finished run's `summary.json` gives its final return (`mean_return`: the mean of its
last 100 episodes), wall time and steps/s. Per setting, these are reported as mean ± sample
standard deviation over the seeds that finished. On Atari-57 games a setting also gets the
human-normalized score, and a sweep over two or more games (`--set env.id=...`) gets the
interquartile mean (IQM), median and mean of human-normalized scores over games, with 95%
stratified bootstrap confidence intervals when every game has at least two finished seeds
(rliable; Agarwal et al. 2021, "Deep RL at the Edge of the Statistical Precipice").
"""

from __future__ import annotations

import collections
import json
import os

import numpy as np

from sebulba.experiments.atari_scores import human_normalized_score
from sebulba.experiments.sweep_plan import Run, Sweep, config_name

TASK_KEY = "env.id"  # The swept key whose values are tasks, aggregated over for Atari.
_BOOTSTRAP_REPS = 2000


def summarize(values: list[float]) -> dict | None:
    """Mean, sample standard deviation (0 for one value) and count; None if no values."""
    if not values:
        return None
    array = np.asarray(values, dtype=float)
    std = float(array.std(ddof=1)) if len(array) > 1 else 0.0
    return {"mean": float(array.mean()), "std": std, "n": len(array)}


def setting_label(run: Run) -> str:
    """The setting's directory name, or the config's name for a sweep over seeds only."""
    return run.setting_name or config_name(run.config)


def run_record(run: Run, failure: str | None = None) -> dict:
    """What sweep.json says about one run: its place in the sweep, status and summary."""
    record = {
        "index": run.index,
        "workdir": run.workdir,
        "config": run.config,
        "setting": dict(run.setting),
        "seed": run.seed,
        "status": "pending",
    }
    if run.done:
        with open(run.summary_path, encoding="utf-8") as f:
            summary = json.load(f)
        record["status"] = "done"
        for field in ("mean_return", "wall_time_s", "sps", "global_step"):
            record[field] = summary.get(field)
        tasks = summary.get("tasks") or {}
        if len(tasks) > 1:
            # A joint run: its mean return mixes games, so each game is scored on its own
            # return and the run on its own aggregate (the median over its games).
            record["env_id"] = None
            record["task_human_normalized"] = {
                task_id: human_normalized_score(task_id, task["mean_return"])
                for task_id, task in tasks.items()
                if task.get("mean_return") is not None
            }
            record["human_normalized"] = summary.get("atari_median_hns")
        else:
            record["env_id"] = summary.get("env_id") or dict(run.setting).get(TASK_KEY)
            if record["env_id"] and record["mean_return"] is not None:
                record["human_normalized"] = human_normalized_score(
                    record["env_id"], record["mean_return"]
                )
    elif failure is not None:
        record["status"] = "failed"
        record["error"] = failure
    return record


def _values(records: list[dict], field: str) -> list[float]:
    return [r[field] for r in records if r["status"] == "done" and r.get(field) is not None]


def atari_aggregates(runs: list[Run], records: list[dict], reps: int = _BOOTSTRAP_REPS) -> dict:
    """Human-normalized IQM, median and mean over games, per setting of the other keys.

    Returns {label: {"games": G, "seeds": S, "iqm": [point, low, high], "median": [...],
    "mean": [...]}} (low and high only with S >= 2) for every group of runs with finished
    runs on at least two Atari-57 games; S is the fewest finished seeds of any game, and
    each game contributes its first S.
    """
    scores_by_group: dict[str, dict[str, list[float]]] = collections.defaultdict(dict)
    for run, record in zip(runs, records, strict=True):
        # Per game: a single-task run's score, or each game's score within a joint run.
        scores = record.get("task_human_normalized") or {
            record.get("env_id"): record.get("human_normalized")
        }
        # The setting's name without the task: the keys (and config) that vary.
        rest = [part for part in run.setting_name.split(",") if not part.startswith(TASK_KEY)]
        label = ",".join(part for part in rest if part) or config_name(run.config)
        for game, score in scores.items():
            if game is not None and score is not None:
                scores_by_group[label].setdefault(game, []).append(score)
    matrices = {}
    for label, games in scores_by_group.items():
        if len(games) >= 2:
            seeds = min(len(scores) for scores in games.values())
            # rliable's layout: [runs, tasks].
            matrices[label] = np.array([scores[:seeds] for scores in games.values()]).T
    if not matrices:
        return {}
    from rliable import library, metrics

    def aggregate(matrix: np.ndarray) -> np.ndarray:
        return np.array(
            [
                metrics.aggregate_iqm(matrix),
                metrics.aggregate_median(matrix),
                metrics.aggregate_mean(matrix),
            ]
        )

    names = ("iqm", "median", "mean")
    result = {}
    with_intervals = {label: m for label, m in matrices.items() if m.shape[0] >= 2}
    if with_intervals:
        points, intervals = library.get_interval_estimates(with_intervals, aggregate, reps=reps)
    for label, matrix in matrices.items():
        entry = {"games": int(matrix.shape[1]), "seeds": int(matrix.shape[0])}
        for i, name in enumerate(names):
            if label in with_intervals:
                low, high = intervals[label][0][i], intervals[label][1][i]
                entry[name] = [float(points[label][i]), float(low), float(high)]
            else:
                entry[name] = [float(aggregate(matrix)[i])]
        result[label] = entry
    return result


def build_report(
    sweep: Sweep, failures: dict[int, str] | None = None, reps: int = _BOOTSTRAP_REPS
) -> dict:
    """sweep.json's content: the definition, every run, per-setting statistics, Atari."""
    failures = failures or {}
    runs = sweep.runs()
    records = [run_record(run, failures.get(run.index)) for run in runs]
    groups: dict[tuple, list[dict]] = collections.OrderedDict()
    labels: dict[tuple, str] = {}
    for run, record in zip(runs, records, strict=True):
        key = (run.config, run.setting)
        groups.setdefault(key, []).append(record)
        labels[key] = setting_label(run)
    settings = []
    for key, group in groups.items():
        settings.append(
            {
                "setting": labels[key],
                "config": key[0],
                "values": dict(key[1]),
                "runs": len(group),
                "done": sum(r["status"] == "done" for r in group),
                "failed": sum(r["status"] == "failed" for r in group),
                "final_return": summarize(_values(group, "mean_return")),
                # A mean over seeds hides a seed that failed to learn; the table shows each.
                "final_return_per_seed": {
                    str(r["seed"]): r.get("mean_return") for r in group if r["status"] == "done"
                },
                "human_normalized": summarize(_values(group, "human_normalized")),
                "wall_time_s": summarize(_values(group, "wall_time_s")),
                "sps": summarize(_values(group, "sps")),
            }
        )
    return {
        "definition": sweep.definition(),
        "settings": settings,
        "atari": atari_aggregates(runs, records, reps),
        "runs": records,
    }


def write_report(sweep: Sweep, report: dict) -> str:
    """Writes WORKDIR/sweep.json atomically; returns its path."""
    path = os.path.join(sweep.workdir, "sweep.json")
    os.makedirs(sweep.workdir, exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    os.replace(path + ".tmp", path)
    return path


def _plus_minus(stats: dict | None, digits: int, thousands: bool = False) -> str:
    if stats is None:
        return "-"
    spec = f"{',' if thousands else ''}.{digits}f"
    return f"{stats['mean']:{spec}} ± {stats['std']:{spec}}"


def _per_seed(returns: dict[str, float | None]) -> str:
    shown = [f"{seed}: {value:.1f}" for seed, value in returns.items() if value is not None]
    return ", ".join(shown) or "-"


def _interval(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{values[0]:.3f} [{values[1]:.3f}, {values[2]:.3f}]"


def format_table(report: dict) -> str:
    """The console table: one row per setting, then the Atari aggregates if any."""
    atari = any(row["human_normalized"] for row in report["settings"])
    header = ["setting", "seeds done", "final return", "per seed", "wall time (s)", "steps/s"]
    if atari:
        header.insert(4, "human-normalized")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in report["settings"]:
        failed = f" ({row['failed']} failed)" if row["failed"] else ""
        done = f"{row['done']}/{row['runs']}{failed}"
        cells = [
            row["setting"],
            done,
            _plus_minus(row["final_return"], 1),
            _per_seed(row["final_return_per_seed"]),
            _plus_minus(row["wall_time_s"], 1),
            _plus_minus(row["sps"], 0, thousands=True),
        ]
        if atari:
            cells.insert(4, _plus_minus(row["human_normalized"], 3))
        lines.append("| " + " | ".join(cells) + " |")
    if report["atari"]:
        lines += [
            "",
            "Human-normalized score over games (IQM, median, mean; [95% stratified bootstrap CI]):",
            "",
            "| setting | games × seeds | IQM | median | mean |",
            "|---|---|---|---|---|",
        ]
        for label, entry in report["atari"].items():
            cells = [label, f"{entry['games']} × {entry['seeds']}"]
            cells += [_interval(entry[name]) for name in ("iqm", "median", "mean")]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
