"""Sweeps: configs × settings × seeds as separate runs, locally or as SLURM job arrays.

    python -m sebulba.sweep --config=configs/ppo_cartpole.py --workdir=runs/sweep \
        --seeds=1,2,3 --set env.id=CartPole-v1,Acrobot-v1 [--set KEY=V1,V2 ...] \
        [--parallel=N] [--dry-run]
    python -m sebulba.sweep ... --slurm [--dry-run | --submit [--sbatch_args='...']]
    python -m sebulba.sweep ... --report

Every run is `python -m sebulba.main` in its own directory,
`WORKDIR/<key=value,...>/seed=<s>` (sebulba/experiments/sweep_plan.py has the naming rule), with its
output in `run.log` there. `--set` values use the syntax of `--config.KEY=VALUE` and are
separated by commas outside brackets and quotes: `--set mesh.learner_device_ids='(0,),(1,)'`
gives two values. `--config` may be repeated: the configs are then one more dimension.

Locally, N runs go at a time; the console shows the sweep's progress, not the runs'
output. A run is done when its summary.json exists: rerunning the same command skips
finished runs and resumes unfinished ones from their own checkpoints. A failed run is
reported (exit status 1 at the end) and the others go on. Ctrl-C, SIGTERM or SIGHUP
reaches the running runs as SIGTERM: they save a checkpoint and stop, and the sweep
exits 130 (Ctrl-C) or 0 (otherwise), like sebulba.main. A second signal kills the runs
unsaved. At the end WORKDIR/sweep.json holds the definition and the per-setting statistics
(sebulba/experiments/sweep_report.py), and the table is printed. A WORKDIR that holds a different
sweep is refused: one sweep, one directory. Every run's config is checked before any run
starts, as sebulba.main checks it before importing JAX (sebulba/config/run_plan.py).

`--slurm` writes WORKDIR/sweep.sbatch, a job array whose task i runs run i; above 1000
runs, Slurm's default limit on array task ids, one job array per slice of 1000 runs
(sebulba/experiments/sweep_slurm.py).
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from sebulba.errors import ConfigError
from sebulba.experiments import sweep_report, sweep_slurm
from sebulba.experiments.sweep_plan import (
    Run,
    Sweep,
    check_runs,
    check_workdir,
    parse_sweep,
    validate,
)
from sebulba.runtime import workdir as workdir_lib

_POLL_S = 0.2
_LOG_NAME = "run.log"
_EXIT_SIGINT = 130
# SIGHUP too: a closed terminal must not leave runs going that a rerun would duplicate.
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _error(message: str) -> int:
    print(f"sebulba.sweep: error: {message}", file=sys.stderr, flush=True)
    return 2


def _duration(seconds: float) -> str:
    return str(datetime.timedelta(seconds=round(seconds)))


@dataclass
class _Running:
    run: Run
    process: subprocess.Popen
    started: float


class LocalRunner:
    """Runs a sweep's unfinished runs as subprocesses, `parallel` at a time.

    `sweep` is anything with a `workdir` and `runs()` of objects with `index`, `workdir`,
    `done` and `main_arguments()` (a population's rounds pass their own,
    `sebulba.pbt.runs`); `name` prefixes the console lines; `command_prefix` goes before
    each run's command (`srun ...` inside a SLURM allocation).
    """

    def __init__(
        self,
        sweep: Sweep,
        parallel: int,
        out=sys.stdout,
        name: str = "sebulba.sweep",
        command_prefix: tuple[str, ...] = (),
    ):
        self.sweep = sweep
        self.parallel = parallel
        self.out = out
        self.name = name
        self.command_prefix = tuple(command_prefix)
        self.failures: dict[int, str] = {}
        self.durations: list[float] = []
        self.stop_signal: int | None = None
        self.running: list[_Running] = []
        self.pending: list[Run] = []
        self.total = len(sweep.runs())
        self.done = 0

    def _say(self, message: str) -> None:
        try:
            print(f"{self.name}: {message}", file=self.out, flush=True)
        except OSError:
            pass  # The console is gone (closed terminal or pipe); the runs go on.

    def _on_signal(self, signum: int, frame) -> None:
        del frame
        name = signal.Signals(signum).name
        if self.stop_signal is None:
            self.stop_signal = signum
            self._say(
                f"{name} received: stopping {len(self.running)} running run(s), each saves a "
                "checkpoint (send it again to kill them without saving)"
            )
            # SIGTERM whatever the sweep received: a run that has not yet installed its
            # handler (start-up) dies at once, with nothing to save, where a SIGINT could
            # be swallowed as a KeyboardInterrupt and leave it running.
            for entry in self.running:
                _signal_group(entry.process, signal.SIGTERM)
        else:
            self._say(f"second {name}: killing {len(self.running)} run(s)")
            for entry in self.running:
                _signal_group(entry.process, signal.SIGKILL)

    def _eta(self) -> str:
        if not self.durations:
            return "ETA ?"
        mean = sum(self.durations) / len(self.durations)
        now = time.monotonic()
        left = len(self.pending) * mean + sum(
            max(mean - (now - r.started), 0.0) for r in self.running
        )
        return f"ETA {_duration(left / self.parallel)}"

    def _progress(self, event: str) -> None:
        self._say(
            f"{self.done}/{self.total} done, {len(self.running)} running, {len(self.failures)} "
            f"failed, {len(self.pending)} pending, {self._eta()} ({event})"
        )

    def _start(self, run: Run) -> None:
        os.makedirs(run.workdir, exist_ok=True)
        command = [
            *self.command_prefix,
            sys.executable,
            "-m",
            "sebulba.main",
            *run.main_arguments(),
        ]
        log = open(os.path.join(run.workdir, _LOG_NAME), "a", encoding="utf-8")  # noqa: SIM115
        log.write(f"# {self.name} {datetime.datetime.now().isoformat()}: {shlex.join(command)}\n")
        log.flush()
        # A session of its own: Ctrl-C in the terminal reaches the sweep only, which
        # passes exactly one signal on (a second one would abort the run unsaved).
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},  # run.log follows the run live.
        )
        log.close()
        self.running.append(_Running(run, process, time.monotonic()))
        if self.stop_signal is not None:  # The signal came while this run was starting.
            _signal_group(process, signal.SIGTERM)
        self._progress(f"started {_relative(run, self.sweep)}")

    def _finish(self, entry: _Running, code: int) -> None:
        self.running.remove(entry)
        name = _relative(entry.run, self.sweep)
        if entry.run.done:
            self.done += 1
            self.durations.append(time.monotonic() - entry.started)
            self._progress(f"finished {name} in {_duration(self.durations[-1])}")
        elif self.stop_signal is not None:
            self._progress(f"stopped {name} (exit {code}); rerun the sweep to resume it")
        else:
            log = os.path.join(entry.run.workdir, _LOG_NAME)
            self.failures[entry.run.index] = f"exit {code}: {_last_message(log)}"
            self._progress(f"FAILED {name}: {self.failures[entry.run.index]} (log: {log})")

    def run(self) -> int:
        """Runs until every run has finished or failed, or a signal stopped the sweep."""
        runs = self.sweep.runs()
        self.pending = [run for run in runs if not run.done]
        self.done = len(runs) - len(self.pending)
        self._say(
            f"{len(runs)} runs in {self.sweep.workdir}: {self.done} done already, "
            f"{len(self.pending)} to run, {self.parallel} at a time"
        )
        previous = {sig: signal.signal(sig, self._on_signal) for sig in _STOP_SIGNALS}
        try:
            while self.running or (self.pending and self.stop_signal is None):
                while self.pending and len(self.running) < self.parallel and not self.stop_signal:
                    self._start(self.pending.pop(0))
                time.sleep(_POLL_S)
                for entry in list(self.running):
                    code = entry.process.poll()
                    if code is not None:
                        self._finish(entry, code)
        except BaseException:
            # The sweep itself failed: its runs must not go on unwatched. They save and stop.
            for entry in self.running:
                _signal_group(entry.process, signal.SIGTERM)
            for entry in self.running:
                entry.process.wait()
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if self.stop_signal == signal.SIGINT:
            return _EXIT_SIGINT
        if self.stop_signal is not None:
            return 0
        return 1 if self.failures else 0


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass  # Already gone.


def _relative(run: Run, sweep: Sweep) -> str:
    return os.path.relpath(run.workdir, sweep.workdir)


def _last_message(log_path: str) -> str:
    """A failed run's reason: its last `sebulba:` line, else its last line."""
    with open(log_path, encoding="utf-8", errors="replace") as f:
        lines = [line.strip() for line in f if line.strip()]
    own = [line for line in lines if line.startswith("sebulba")]
    return (own or lines or ["no output"])[-1]


def _slurm(sweep: Sweep, runs: list[Run], args: argparse.Namespace) -> int:
    """--slurm: prints, writes or submits the job-array scripts of `runs` (the sweep's)."""
    arrays = sweep_slurm.job_arrays(sweep, runs)
    scripts = {
        path: sweep_slurm.render_slurm(sweep, part, len(runs), path, args.parallel)
        for path, part in arrays
    }
    if args.dry_run:
        for path, script in scripts.items():
            if len(scripts) > 1:
                print(f"# ==> {path} <==")
            print(script, end="")
        return 0
    sweep_report.write_report(sweep, sweep_report.build_report(sweep))
    sweep_slurm.write_slurm_scripts(sweep, scripts)
    if len(arrays) > 1:
        cap = f"; --parallel={args.parallel} caps each" if args.parallel else ""
        print(
            f"sebulba.sweep: {len(runs)} runs are {len(arrays)} job arrays of at most "
            f"{sweep_slurm.MAX_ARRAY_TASKS} tasks (Slurm's default MaxArraySize is "
            f"{sweep_slurm.MAX_ARRAY_TASKS + 1}){cap}"
        )
    for path, part in arrays:
        if not args.submit:
            tasks = f"{len(part)} array tasks: runs {part[0].index}-{part[-1].index}"
            print(f"sebulba.sweep: wrote {path} ({tasks}); submit: sbatch {path}")
            continue
        command = ["sbatch", *shlex.split(args.sbatch_args), path]
        print(f"sebulba.sweep: {shlex.join(command)}", flush=True)
        status = subprocess.run(command, check=False).returncode
        if status != 0:
            return status
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sebulba.sweep",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("--config", action="append", required=True, help="FILE[:ARG]; repeat for several")
    add("--workdir", required=True, help="the sweep's directory; runs go in subdirectories")
    add("--seeds", default="1", help="comma-separated seeds (default: 1)")
    add("--set", action="append", metavar="KEY=V1,V2", help="a config key and its values")
    add("--parallel", type=int, default=None, help="runs at a time (local default 1; SLURM: cap)")
    add("--dry-run", action="store_true", help="print the commands or sbatch script; run nothing")
    add("--report", action="store_true", help="write sweep.json and print the table only")
    add(
        "--slurm",
        action="store_true",
        help="write WORKDIR/sweep.sbatch, a SLURM job array (above "
        f"{sweep_slurm.MAX_ARRAY_TASKS} runs: one WORKDIR/sweep-runs-FIRST-LAST.sbatch per slice)",
    )
    add("--submit", action="store_true", help="with --slurm: submit it with sbatch")
    add("--sbatch_args", default="", help="with --submit: options for sbatch, e.g. '-p gpu'")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.submit and not args.slurm:
        return _error("--submit needs --slurm")
    if args.parallel is not None and args.parallel < 1:
        return _error(f"--parallel={args.parallel}: must be at least 1")
    try:
        sweep = parse_sweep(args.workdir, args.config, args.seeds, args.set)
        validate(sweep)
        if not args.report:  # A report reads what runs wrote, whatever their configs.
            # A SLURM array task's run spans as many processes as sbatch gives it nodes.
            check_runs(sweep, num_processes=None if args.slurm else 1)
        check_workdir(sweep, report_only=args.report)
    except ConfigError as error:
        return _error(str(error))
    if args.submit and shutil.which("sbatch") is None:
        return _error("--submit: sbatch is not on PATH (render with --slurm and submit elsewhere)")
    runs = sweep.runs()
    if args.slurm:
        return _slurm(sweep, runs, args)
    if args.dry_run:
        for run in runs:
            state = "done" if run.done else "to run"
            command = shlex.join(["python", "-m", "sebulba.main", *run.main_arguments()])
            print(f"# run {run.index} ({state})\n{command}")
        return 0
    status = 0
    failures: dict[int, str] = {}
    if not args.report:
        # One sweep at a time in a directory: a second would start the runs the first is
        # running, each refused as in use, and count them failed.
        with workdir_lib.reserved([sweep.workdir], check=False):
            try:
                workdir_lib.hold(sweep.workdir)
            except ConfigError as error:
                return _error(str(error))
            # Written first, so that an interrupted sweep's directory is known as this sweep.
            sweep_report.write_report(sweep, sweep_report.build_report(sweep))
            runner = LocalRunner(sweep, args.parallel or 1)
            status = runner.run()
            failures = runner.failures
    report = sweep_report.build_report(sweep, failures)
    path = sweep_report.write_report(sweep, report)
    print(sweep_report.format_table(report), flush=True)
    for index, message in sorted(failures.items()):
        print(f"sebulba.sweep: run {_relative(runs[index], sweep)} failed: {message}")
    print(f"sebulba.sweep: results in {path}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
