"""Resident memory of joint multi-task training: flat over updates, linear in envs.

    python benchmarks/multitask_memory.py                  # long run + scaling grid, ~10 min
    python benchmarks/multitask_memory.py --only=long --updates=20000
    python benchmarks/multitask_memory.py --only=scaling --tasks=1,2,4 --envs=8,32,128,512
    python benchmarks/multitask_memory.py --json=memory.json

Every measurement is a real `sebulba.train.train` run of PPO on MiniGrid-Empty tasks
(which share their spaces: 5x5, 6x6, 8x8, 16x16, in that order) in a fresh subprocess,
so no run inherits another's allocations. The process's resident set size (VmRSS, via
psutil) and the number of live Python objects are sampled from the `on_update` hook,
i.e. on the learner thread between updates. Updates are kept tiny (8 steps, one epoch,
one minibatch) so that thousands of them run in minutes; checkpoints, metrics.jsonl and
TensorBoard are written as in any run.

* long: one multi-task run (`--long_tasks` tasks, `--long_envs` envs) for `--updates`
  updates; prints RSS over time and the least-squares slope of RSS (MiB per 1000
  updates) and of the Python object count after the warm-up (`--warmup_fraction` of
  the updates: compilation, the first checkpoint, allocator growth).
* scaling: RSS after warm-up (the median of the samples in the second half of
  `--scaling_updates` updates) for every (tasks, global envs) of `--tasks` x `--envs`;
  prints the table, the per-env increment (a linear fit in envs per task count) and, at
  each env count, what more tasks add next to what their extra envpool pools cost on
  their own (the same pools built, reset and stepped without training, also each in a
  fresh subprocess).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

MINIGRID_TASKS = (
    "MiniGrid-Empty-5x5-v0",
    "MiniGrid-Empty-6x6-v0",
    "MiniGrid-Empty-8x8-v0",
    "MiniGrid-Empty-16x16-v0",
)
_MIB = 2**20
_SCALED = ("rss_mib", "malloc_used_mib")  # Compared across the scaling grid.
# Columns of the memory tables: sample field -> header (MiB).
_COLUMNS = {
    "rss_mib": "RSS",
    "anon_mib": "anonymous",
    "file_mib": "file-backed",
    "malloc_used_mib": "malloc used",
    "malloc_free_mib": "malloc free",
}


# ----------------------------------------------------------------------------------------
# Child processes: each measures one thing and prints one JSON line last.


def _rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / _MIB


class _MallInfo2(ctypes.Structure):
    """glibc's `struct mallinfo2` (glibc >= 2.33): malloc's totals over all arenas."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
        ).split()
    ]


def _malloc_totals() -> tuple[float, float]:
    """(MiB malloc has handed out and not got back, MiB it holds free), or NaNs."""
    try:
        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):  # Not glibc, or an older one.
        return float("nan"), float("nan")
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    return (info.uordblks + info.hblkhd) / _MIB, info.fordblks / _MIB


def _memory_sample() -> dict[str, float]:
    """VmRSS, its anonymous and file-backed parts, and malloc's bytes in use and free.

    The file-backed part (mapped libraries, jaxlib's above all) moves with the machine's
    page cache. The anonymous part holds, besides live data, the memory malloc keeps
    free for reuse: after compiling, about 175 MiB here, which glibc returns to the
    system only when the top of its heap becomes free (after several hundred updates
    in the long run). Growth of live data with updates therefore shows in malloc's bytes in use
    (and in the Python objects; Python's small-object arenas are not malloc's).
    """
    fields = {"VmRSS": "rss_mib", "RssAnon": "anon_mib", "RssFile": "file_mib"}
    sample = {name: float("nan") for name in fields.values()}
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in fields:
                    sample[fields[key]] = int(value.split()[0]) / 1024  # kB
    except OSError:  # Not Linux: the total only.
        sample["rss_mib"] = _rss_mib()
    sample["malloc_used_mib"], sample["malloc_free_mib"] = _malloc_totals()
    return sample


def _run_config(task_ids: tuple[str, ...], num_envs: int, updates: int, ckpt_every: int):
    from sebulba.agents import ppo
    from sebulba.config import base_config

    config = base_config(ppo.get_config())
    config.env.id = task_ids[0]
    config.env.ids = task_ids if len(task_ids) > 1 else ()
    config.env.num_envs = num_envs
    config.agent.network = "multi_input"
    config.agent.num_steps = 8
    config.agent.num_minibatches = 1
    config.agent.update_epochs = 1
    config.total_timesteps = updates * num_envs * config.agent.num_steps
    config.log.every_updates = 10
    config.log.console = "lines"
    config.log.console_every_s = 1e9  # Only the final line: the samples are the output.
    config.ckpt.every_updates = ckpt_every
    # Actor and learner on two virtual devices, as on an accelerator host.
    config.mesh.actor_device_ids = (0,)
    config.mesh.learner_device_ids = (1,)
    return config


def child_train(spec: dict) -> dict:
    """Trains as `spec` says; samples RSS every `sample_every` updates."""
    import gc

    import jax

    from sebulba import train

    jax.devices()  # The backend's own memory belongs to the baseline.
    baseline = _memory_sample()
    config = _run_config(tuple(spec["tasks"]), spec["envs"], spec["updates"], spec["ckpt_every"])
    start = time.perf_counter()
    samples = []

    def on_update(report, state) -> None:
        del state
        if report.update % spec["sample_every"] == 0 or report.update == 1:
            samples.append(
                {
                    "update": report.update,
                    "seconds": time.perf_counter() - start,
                    **_memory_sample(),
                    "python_objects": len(gc.get_objects()),
                }
            )

    with tempfile.TemporaryDirectory() as workdir:
        train.train(config, workdir, on_update=on_update)
    return {"baseline": baseline, "samples": samples}


def child_pools(spec: dict) -> dict:
    """RSS the run's envpool pools take on their own: built, reset and stepped."""
    import ml_collections

    from sebulba.environments import thread_envs
    from sebulba.environments.tasks import TaskLayout

    env_config = ml_collections.ConfigDict(
        {"id": spec["tasks"][0], "ids": tuple(spec["tasks"]), "num_threads": 0}
    )
    before = _memory_sample()
    pools = thread_envs.make_thread_envs(
        env_config, TaskLayout(tuple(spec["tasks"]), spec["envs"]), 0, spec["envs"], 1, split=False
    )
    pools.reset()
    actions = np.zeros(spec["envs"], np.int32)
    for _ in range(spec["steps"]):
        pools.step(actions)
    after = _memory_sample()
    pools.close()
    return {name: after[name] - before[name] for name in after}


def run_child(kind: str, spec: dict) -> dict:
    env = dict(os.environ)
    env.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    env["PYTHONPATH"] = os.pathsep.join(
        p
        for p in (
            os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            env.get("PYTHONPATH"),
        )
        if p
    )
    result = subprocess.run(
        [
            sys.executable,
            os.path.abspath(__file__),
            f"--child={kind}",
            f"--spec={json.dumps(spec)}",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"child {kind} {spec} failed:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------------------
# The parent: runs the children and reads their numbers.


def slope_per_1000(updates, values) -> float:
    """Least-squares slope of `values` against `updates`, per 1000 updates."""
    if len(updates) < 2:
        return float("nan")
    return float(np.polyfit(np.asarray(updates, float), np.asarray(values, float), 1)[0]) * 1000


def long_run(args) -> dict:
    tasks = MINIGRID_TASKS[: args.long_tasks]
    print(
        f"\n== long run: {len(tasks)} tasks ({', '.join(tasks)}), {args.long_envs} envs x 8 "
        f"steps, {args.updates} updates, memory every {args.sample_every} updates",
        flush=True,
    )
    spec = {
        "tasks": tasks,
        "envs": args.long_envs,
        "updates": args.updates,
        "sample_every": args.sample_every,
        "ckpt_every": args.ckpt_every,
    }
    start = time.perf_counter()
    result = run_child("train", spec)
    wall = time.perf_counter() - start
    samples, baseline = result["samples"], result["baseline"]
    warmup = int(args.updates * args.warmup_fraction)
    steady = [s for s in samples if s["update"] > warmup]
    print(
        f"{'update':>8} {'seconds':>8}"
        + "".join(f"{label:>13}" for label in _COLUMNS.values())
        + f"{'py objects':>12}"
    )
    print(f"{'(start)':>8} {'':>8}" + "".join(f"{baseline[c]:>13.1f}" for c in _COLUMNS))
    stride = max(1, len(samples) // args.max_rows)
    for i, s in enumerate(samples):
        if i % stride == 0 or i == len(samples) - 1:
            print(
                f"{s['update']:>8} {s['seconds']:>8.1f}"
                + "".join(f"{s[c]:>13.1f}" for c in _COLUMNS)
                + f"{s['python_objects']:>12,}"
                + ("" if s["update"] > warmup else "  (warm-up)")
            )
    updates = [s["update"] for s in steady]
    summary = {
        "tasks": list(tasks),
        "envs": args.long_envs,
        "updates": args.updates,
        "warmup_updates": warmup,
        "wall_s": wall,
        "start": baseline,
        "after_warmup": steady[0] if steady else None,
        "end": samples[-1],
        "samples": samples,
    }
    for name in (*_COLUMNS, "python_objects"):
        values = [s[name] for s in steady]
        summary[f"{name}_steady_min"] = min(values, default=float("nan"))
        summary[f"{name}_steady_max"] = max(values, default=float("nan"))
        summary[f"{name}_slope_per_1000_updates"] = slope_per_1000(updates, values)
    if not steady:
        print("no samples after the warm-up: raise --updates or lower --warmup_fraction")
        return summary
    first, end = steady[0], samples[-1]
    print(f"after the warm-up (updates {first['update']}..{end['update']}), MiB:")
    for name in ("rss_mib", "anon_mib", "malloc_used_mib"):
        print(
            f"  {_COLUMNS[name]:<13} start (JAX up) {baseline[name]:6.1f}, after warm-up "
            f"{first[name]:6.1f}, end {end[name]:6.1f}; min {summary[name + '_steady_min']:6.1f}"
            f" max {summary[name + '_steady_max']:6.1f}, slope "
            f"{summary[name + '_slope_per_1000_updates']:+6.2f} per 1000 updates"
        )
    print(
        f"  Python objects {summary['python_objects_steady_min']:,} .. "
        f"{summary['python_objects_steady_max']:,}, slope "
        f"{summary['python_objects_slope_per_1000_updates']:+.0f} per 1000 updates ({wall:.0f} s)",
        flush=True,
    )
    return summary


def scaling(args) -> dict:
    task_counts = [int(x) for x in args.tasks.split(",")]
    env_counts = [int(x) for x in args.envs.split(",")]
    print(
        f"\n== scaling: memory after warm-up (median over updates > {args.scaling_updates // 2} "
        f"of {args.scaling_updates}), tasks {task_counts} x global envs {env_counts}",
        flush=True,
    )
    rows = []
    for k in task_counts:
        for n in env_counts:
            tasks = MINIGRID_TASKS[:k]
            start = time.perf_counter()
            result = run_child(
                "train",
                {
                    "tasks": tasks,
                    "envs": n,
                    "updates": args.scaling_updates,
                    "sample_every": max(1, args.scaling_updates // 20),
                    "ckpt_every": args.ckpt_every,
                },
            )
            late = [s for s in result["samples"] if s["update"] > args.scaling_updates // 2]
            pools = run_child("pools", {"tasks": tasks, "envs": n, "steps": 32})
            row = {"tasks": k, "envs": n, "start": result["baseline"]}
            for name in _SCALED:
                row[name] = float(np.median([s[name] for s in late]))
                row[f"pools_{name}"] = pools[name]
            row["wall_s"] = time.perf_counter() - start
            rows.append(row)
            print(
                f"  tasks {k} envs {n:>4}: RSS {row['rss_mib']:6.1f} MiB, malloc used "
                f"{row['malloc_used_mib']:6.1f} (before training {row['start']['rss_mib']:.1f} / "
                f"{row['start']['malloc_used_mib']:.1f}); its pools alone: RSS "
                f"{row['pools_rss_mib']:+.1f}, malloc used {row['pools_malloc_used_mib']:+.1f} "
                f"({row['wall_s']:.0f} s)",
                flush=True,
            )
    table = {(r["tasks"], r["envs"]): r for r in rows}
    per_env = {}
    for name in _SCALED:
        print(f"\n{_COLUMNS[name]} after warm-up, MiB (rows: tasks, columns: global envs)")
        print("tasks " + "".join(f"{n:>9}" for n in env_counts) + "   MiB per env (fit)")
        for k in task_counts:
            values = [table[(k, n)][name] for n in env_counts]
            fit = float(np.polyfit(env_counts, values, 1)[0]) if len(env_counts) > 1 else np.nan
            per_env[f"{name}/{k}"] = fit
            print(f"{k:>5} " + "".join(f"{v:>9.1f}" for v in values) + f"   {fit:+.3f}")
    base = task_counts[0]
    print(
        f"\nwhat more tasks add at fixed envs, vs {base} task(s), MiB (training run | the "
        "extra pools alone): RSS | malloc used"
    )
    extra = []
    for n in env_counts:
        for k in task_counts[1:]:
            row = {"envs": n, "tasks": k}
            for name in (*_SCALED, *(f"pools_{name}" for name in _SCALED)):
                row[name] = table[(k, n)][name] - table[(base, n)][name]
            extra.append(row)
            print(
                f"  envs {n:>4}, tasks {k}: RSS {row['rss_mib']:+7.1f} | "
                f"{row['pools_rss_mib']:+5.1f}   malloc used {row['malloc_used_mib']:+7.1f} | "
                f"{row['pools_malloc_used_mib']:+5.1f}"
            )
    return {"rows": rows, "mib_per_env": per_env, "extra_for_tasks": extra}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("long", "scaling"), default=None)
    parser.add_argument("--updates", type=int, default=1000, help="updates of the long run")
    parser.add_argument("--long_tasks", type=int, default=4, choices=(1, 2, 3, 4))
    parser.add_argument("--long_envs", type=int, default=8)
    parser.add_argument("--sample_every", type=int, default=50)
    parser.add_argument("--warmup_fraction", type=float, default=0.25)
    parser.add_argument("--max_rows", type=int, default=32, help="RSS rows printed")
    parser.add_argument("--ckpt_every", type=int, default=250, help="ckpt.every_updates")
    parser.add_argument("--tasks", default="1,2,4", help="task counts of the scaling grid")
    parser.add_argument("--envs", default="8,32,128", help="global env counts of the grid")
    parser.add_argument("--scaling_updates", type=int, default=40)
    parser.add_argument("--json", default=None, help="also write the numbers to this file")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--spec", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        spec = json.loads(args.spec)
        result = child_train(spec) if args.child == "train" else child_pools(spec)
        print(json.dumps(result), flush=True)
        return
    import envpool
    import jax

    print(
        f"jax {jax.__version__}, envpool {envpool.__version__}, {os.cpu_count()} CPUs; "
        "PPO multi_input on MiniGrid-Empty tasks"
    )
    results = {}
    if args.only in (None, "long"):
        results["long"] = long_run(args)
    if args.only in (None, "scaling"):
        results["scaling"] = scaling(args)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
