"""A sweep as a SLURM job array: the sbatch script whose array task i runs run i.

Each task starts its run as slurm/sebulba.sbatch starts one: srun, one sebulba process per
node owning every GPU of its node, `--distributed`. `python -m sebulba.sweep --slurm`
writes the script; sebulba/sweep.py has the command.
"""

from __future__ import annotations

import os
import re
import shlex

from sebulba.experiments.sweep_plan import Sweep


def _bash_word(word: str) -> str:
    """`word` for bash: bare if plainly safe, else single-quoted (commas too, which
    shellcheck would read as a mistaken array separator)."""
    if re.fullmatch(r"[A-Za-z0-9_./:=@%+-]+", word):
        return word
    return "'" + word.replace("'", "'\\''") + "'"


def render_slurm(sweep: Sweep, parallel: int | None) -> str:
    """One sbatch script whose array task i runs run i of the sweep, as slurm/sebulba.sbatch.

    Every task is `srun ... python -m sebulba.main --distributed` with the run's arguments,
    so a task may span several nodes (sbatch --nodes=N) like a single job of
    slurm/sebulba.sbatch; `SEBULBA_PYTHON` and `SEBULBA_DRY_RUN=1` work the same way.
    """
    runs = sweep.runs()
    throttle = f"%{parallel}" if parallel else ""
    cases = "\n".join(
        f"  {run.index}) run=({' '.join(map(_bash_word, run.main_arguments()))}) ;;" for run in runs
    )
    return f"""#!/bin/bash
# sebulba sweep {sweep.workdir}: {len(runs)} runs as one SLURM job array; array task i
# runs run i ({os.path.join(sweep.workdir, "sweep.json")} lists them). Rendered by
# python -m sebulba.sweep.
#
#   sbatch [SBATCH OPTIONS] {os.path.join(sweep.workdir, "sweep.sbatch")}
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
    echo "sebulba sweep: no run for array task $task (runs 0-{len(runs) - 1})" >&2
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

echo "sebulba sweep: array task $task of {len(runs)} (job ${{SLURM_ARRAY_JOB_ID:-?}}," \\
  "restart ${{SLURM_RESTART_COUNT:-0}}) on ${{SLURM_JOB_NODELIST:-?}}, started $(date -Is)"
exec "${{srun_command[@]}}"
"""
