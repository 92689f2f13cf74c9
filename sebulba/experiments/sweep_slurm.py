"""A sweep as SLURM job arrays: sbatch scripts whose array task i runs one run each.

Each task starts its run as slurm/sebulba.sbatch starts one: srun, one sebulba process per
node owning every GPU of its node, `--distributed`. A sweep of up to MAX_ARRAY_TASKS runs
is one array, WORKDIR/sweep.sbatch; a larger one is one array per slice of that many runs,
WORKDIR/sweep-runs-FIRST-LAST.sbatch. `python -m sebulba.sweep --slurm` writes the
scripts; sebulba/sweep.py has the command.
"""

from __future__ import annotations

import glob
import os
import re
import shlex

from sebulba.experiments.sweep_plan import Run, Sweep

# Slurm refuses array task ids from MaxArraySize on, 1001 unless the cluster raised it: a
# sweep of more runs becomes several job arrays of at most this many tasks, each from 0.
MAX_ARRAY_TASKS = 1000


def _bash_word(word: str) -> str:
    """`word` for bash: bare if plainly safe, else single-quoted (commas too, which
    shellcheck would read as a mistaken array separator)."""
    if re.fullmatch(r"[A-Za-z0-9_./:=@%+-]+", word):
        return word
    return "'" + word.replace("'", "'\\''") + "'"


def job_arrays(sweep: Sweep, runs: list[Run]) -> list[tuple[str, list[Run]]]:
    """The job arrays of `runs` (the sweep's) as (script path, runs): WORKDIR/sweep.sbatch
    with every run, or above MAX_ARRAY_TASKS runs one WORKDIR/sweep-runs-FIRST-LAST.sbatch
    per slice."""
    if len(runs) <= MAX_ARRAY_TASKS:
        return [(os.path.join(sweep.workdir, "sweep.sbatch"), runs)]
    arrays = []
    for start in range(0, len(runs), MAX_ARRAY_TASKS):
        part = runs[start : start + MAX_ARRAY_TASKS]
        name = f"sweep-runs-{part[0].index}-{part[-1].index}.sbatch"
        arrays.append((os.path.join(sweep.workdir, name), part))
    return arrays


def render_slurm(sweep: Sweep, runs: list[Run], total: int, path: str, parallel: int | None) -> str:
    """An sbatch script at `path` whose array task i runs `runs[i]` (of the sweep's `total`),
    as slurm/sebulba.sbatch.

    Every task is `srun ... python -m sebulba.main --distributed` with the run's arguments,
    so a task may span several nodes (sbatch --nodes=N) like a single job of
    slurm/sebulba.sbatch; `SEBULBA_PYTHON` and `SEBULBA_DRY_RUN=1` work the same way.
    """
    first, last = runs[0].index, runs[-1].index
    run_of_task = f"{first} + i" if first else "i"
    throttle = f"%{parallel}" if parallel else ""
    cases = "\n".join(
        f"  {task}) run=({' '.join(map(_bash_word, run.main_arguments()))}) ;;"
        for task, run in enumerate(runs)
    )
    others = (
        ""
        if len(runs) == total
        else "# The other runs are in the other sweep-runs-*.sbatch beside this script: Slurm\n"
        f"# refuses array task ids of {MAX_ARRAY_TASKS + 1} and more by default (MaxArraySize).\n"
    )
    return f"""#!/bin/bash
# sebulba sweep {sweep.workdir}: runs {first}-{last} of {total} as one SLURM job array;
# array task i runs run {run_of_task} ({os.path.join(sweep.workdir, "sweep.json")} lists
# them). Rendered by python -m sebulba.sweep.
{others}#
#   sbatch [SBATCH OPTIONS] {path}
#
# Each task is one run, started like slurm/sebulba.sbatch starts one: one sebulba
# process per node, owning every GPU of its node. The #SBATCH lines are defaults that
# sbatch options override (e.g. --nodes=2 --gpus-per-node=8 for multi-node runs).
# --signal=TERM@120 lets a run save a checkpoint before the time limit; --requeue and
# resubmitting resume unfinished runs, and finished ones print "nothing to do".
#SBATCH --job-name=sebulba-sweep
#SBATCH --array=0-{len(runs) - 1}{throttle}
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=1
#SBATCH --cpus-per-task=16
#SBATCH --output=sebulba-sweep-%A_%a.out
#SBATCH --open-mode=append
#SBATCH --signal=TERM@120
#SBATCH --requeue
set -euo pipefail

# Relative config and workdir paths resolve from where the sweep was rendered.
cd {shlex.quote(os.getcwd())}
python=${{SEBULBA_PYTHON:-python}}
task=${{SLURM_ARRAY_TASK_ID:?submit this script with sbatch: it is a job array}}

case $task in
{cases}
  *)
    echo "sebulba sweep: no run for array task $task (tasks 0-{len(runs) - 1})" >&2
    exit 2
    ;;
esac

if [[ -n ${{SLURM_CPUS_PER_TASK:-}} ]]; then
  export SRUN_CPUS_PER_TASK=${{SRUN_CPUS_PER_TASK:-$SLURM_CPUS_PER_TASK}}
fi
# One task per node even where sbatch was given --ntasks or --ntasks-per-node, whose
# SLURM_NTASKS srun would inherit: each extra task would claim the same GPUs.
if [[ -z ${{SLURM_JOB_NUM_NODES:-}} ]]; then
  echo "sebulba sweep: SLURM_JOB_NUM_NODES is not set: submit with sbatch" \\
    "(a dry run: set it to the job's node count)" >&2
  exit 2
fi
nodes=$SLURM_JOB_NUM_NODES
srun_command=(srun "--nodes=$nodes" "--ntasks=$nodes" --ntasks-per-node=1 --label
  "$python" -m sebulba.main --distributed "${{run[@]}}")

if [[ ${{SEBULBA_DRY_RUN:-0}} == 1 ]]; then
  printf -v line ' %q' "${{srun_command[@]}}"
  printf '%s\\n' "${{line# }}"
  exit 0
fi

echo "sebulba sweep: run $(({first} + task)) of {total}, array task $task (job" \\
  "${{SLURM_ARRAY_JOB_ID:-?}}, restart ${{SLURM_RESTART_COUNT:-0}}) on" \\
  "${{SLURM_JOB_NODELIST:-?}}, started $(date -Is)"
exec "${{srun_command[@]}}"
"""


def write_slurm_scripts(sweep: Sweep, scripts: dict[str, str]) -> None:
    """Writes `scripts` (by path) and removes the sweep's scripts they replace.

    A sweep that grew past MAX_ARRAY_TASKS runs leaves no script of its old split behind
    for a habitual `sbatch WORKDIR/sweep.sbatch` to start.
    """
    stale = glob.glob(os.path.join(glob.escape(sweep.workdir), "sweep-runs-*-*.sbatch"))
    for path in [os.path.join(sweep.workdir, "sweep.sbatch"), *stale]:
        if path not in scripts and os.path.exists(path):
            os.remove(path)
    for path, script in scripts.items():
        with open(path, "w", encoding="utf-8") as f:
            f.write(script)
