"""Population-based training across ordinary runs: `python -m sebulba.pbt`.

    python -m sebulba.pbt --config=configs/ppo_cartpole.py --workdir=runs/pbt \
        --set pbt.population=4 --set pbt.hyperparameters=learning_rate,ent_coef [--parallel=4]

Each member is an ordinary run of `python -m sebulba.main` (any config: the Sebulba
pipeline on envpool, Anakin, several processes) in `WORKDIR/member=<i>`, with seed
`seed + i`, `pbt.member=i` and its own values of the mutated keys as plain config values.
The population advances in rounds of `pbt.interval` env steps: every member runs until
the round's last update (`ckpt.stop_after_update`, a checkpoint and a stop as a
preemption would make), then the controller ranks the members by the mean of their
metrics lines' `episodic_return` over the round, and each replaced member's checkpoints
are replaced by a copy of its source's latest, which the member's next round resumes
through the ordinary resume path with its explored values (a member run may change its
mutated keys on resume, `sebulba.config.resume`). The decisions are
`sebulba.pbt.population`'s, so they are deterministic given the seed and the members'
metrics; `WORKDIR/population.json` holds the population's state after every round, and
rerunning the same command after a preemption continues from there (members that had
finished the round are not run again).

Locally, `--parallel` members run at a time (`sebulba.sweep`'s runner: Ctrl-C stops and
checkpoints them, a rerun resumes). Inside a SLURM allocation, `--srun` starts each member
as a job step (`srun --ntasks=1 --exclusive`), so one batch job holds the whole population
(slurm/README.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys

from sebulba import checkpoint as ckpt_lib
from sebulba.config.run_plan import plan
from sebulba.errors import ConfigError
from sebulba.experiments.sweep_plan import load_config
from sebulba.pbt.population import Population
from sebulba.pbt.settings import settings_of
from sebulba.runtime import workdir as workdir_lib
from sebulba.runtime.metrics import write_json
from sebulba.sweep import LocalRunner

STATE_FILE = "population.json"
SRUN = ("srun", "--ntasks=1", "--nodes=1", "--exclusive", "--kill-on-bad-exit=1")


def member_workdir(workdir: str, member: int) -> str:
    return os.path.join(workdir, f"member={member}")


def progress(run_dir: str, num_updates: int) -> int:
    """The last update a member run has finished: its newest checkpoint's, or every
    update once its summary.json exists."""
    if os.path.isfile(os.path.join(run_dir, "summary.json")):
        return num_updates
    steps = ckpt_lib.list_steps(ckpt_lib.checkpoints_dir(run_dir))
    return steps[-1] if steps else 0


def round_ends(interval_updates: int, num_updates: int) -> list[int]:
    """The last update of each round: multiples of the interval, then the run's last."""
    ends = list(range(interval_updates, num_updates, interval_updates))
    return [*ends, num_updates]


def round_returns(run_dir: str, first: int, last: int) -> list[float]:
    """The `episodic_return` of a member's metrics lines for updates first .. last."""
    found = []
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        for text in f:
            line = json.loads(text)
            if first <= line["update"] <= last and line.get("episodic_return") is not None:
                found.append(float(line["episodic_return"]))
    return found


@dataclasses.dataclass
class MemberRound:
    """One member's run up to `until` (the runner's view of a run)."""

    index: int
    workdir: str
    arguments: list[str]
    until: int
    num_updates: int

    def main_arguments(self) -> list[str]:
        return self.arguments

    @property
    def done(self) -> bool:
        return progress(self.workdir, self.num_updates) >= self.until


@dataclasses.dataclass
class Round:
    """The members' runs of one round (the runner's view of a sweep)."""

    workdir: str
    members: list[MemberRound]

    def runs(self) -> list[MemberRound]:
        return self.members


class PopulationOfRuns:
    """A population of `python -m sebulba.main` runs and its state file."""

    def __init__(self, config_file: str, overrides: list[str], workdir: str):
        self.config_file, self.overrides, self.workdir = config_file, list(overrides), workdir
        self.config = load_config(config_file, [f"--config.{o}" for o in overrides])
        if self.config.pbt.member >= 0:
            raise ConfigError("pbt.member is set by python -m sebulba.pbt for each member")
        self.sizes = plan(self.config, values_only=True).sizes
        self.settings = settings_of(self.config, self.sizes)
        if self.settings is None:
            raise ConfigError("pbt.population is 0: set it to the number of members (>= 2)")
        self.definition = {"config": config_file, "set": self.overrides}
        self.path = os.path.join(workdir, STATE_FILE)
        self.members = Population(self.settings, self.config.seed)
        self.considered_through = 0  # The last round end whose step was decided.
        self._load()

    def _load(self) -> None:
        if not os.path.isfile(self.path):
            return
        with open(self.path, encoding="utf-8") as f:
            saved = json.load(f)
        if saved.get("definition") != self.definition:
            raise ConfigError(
                f"{self.workdir} holds another population ({saved.get('definition')}): one "
                "population, one directory"
            )
        self.members = Population(self.settings, self.config.seed, saved["state"])
        self.considered_through = saved["considered_through"]

    def save(self, results: list[dict] | None = None) -> None:
        payload = {
            "definition": self.definition,
            "population": self.settings.population,
            "interval_updates": self.settings.interval_updates,
            "considered_through": self.considered_through,
            "generation": self.members.generation,
            "lineage": self.members.lineage,
            "state": self.members.state_dict(),
        }
        if results is not None:
            payload.update(results)
        write_json(self.path, payload)

    def member_arguments(self, member: int, until: int) -> list[str]:
        values = self.members.hyperparameters(member)
        stop = until if until < self.sizes.num_updates else 0
        return [
            f"--config={self.config_file}",
            f"--workdir={member_workdir(self.workdir, member)}",
            *(f"--config.{o}" for o in self.overrides),
            f"--config.seed={self.config.seed + member}",
            f"--config.pbt.member={member}",
            *(f"--config.agent.{name}={value!r}" for name, value in values.items()),
            f"--config.ckpt.stop_after_update={stop}",
        ]

    def round(self, until: int) -> Round:
        return Round(
            self.workdir,
            [
                MemberRound(
                    member,
                    member_workdir(self.workdir, member),
                    self.member_arguments(member, until),
                    until,
                    self.sizes.num_updates,
                )
                for member in range(self.settings.population)
            ],
        )

    def step(self, first: int, last: int) -> str:
        """The exploit/explore step after update `last`; returns its console line."""
        for member in range(self.settings.population):
            returns = round_returns(member_workdir(self.workdir, member), first, last)
            self.members.record(member, returns)
        sources = self.members.step(last, last * self.sizes.steps_per_update)
        self.considered_through = last
        if sources is not None:
            for member, source in enumerate(sources):
                if source != member:
                    self._copy_checkpoint(int(source), member, last)
            self.save()
        return self.members.describe_step(last, sources)

    def _copy_checkpoint(self, source: int, member: int, step: int) -> None:
        """Replaces `member`'s checkpoints by `source`'s of `step` (idempotent)."""
        source_dir = ckpt_lib.checkpoints_dir(member_workdir(self.workdir, source))
        source_dir = os.path.join(source_dir, str(step))
        target = ckpt_lib.checkpoints_dir(member_workdir(self.workdir, member))
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source_dir, os.path.join(target, str(step)))

    def results(self) -> dict:
        """The finished population: each member's return, checksum and values."""
        entries = []
        for member in range(self.settings.population):
            path = member_workdir(self.workdir, member)
            with open(os.path.join(path, "summary.json"), encoding="utf-8") as f:
                summary = json.load(f)
            summary["pbt"] = self.members.member_summary(member)
            write_json(os.path.join(path, "summary.json"), summary)
            entries.append(
                {
                    "member": member,
                    "workdir": os.path.abspath(path),
                    "seed": self.config.seed + member,
                    "mean_return": summary.get("mean_return"),
                    "params_checksum": summary["params_checksum"],
                    "hyperparameters": self.members.hyperparameters(member),
                    "copied_from": self.members.copied_from[member],
                }
            )
        ranked = [e for e in entries if e["mean_return"] is not None]
        best = None
        if ranked:
            best = max(ranked, key=lambda e: (e["mean_return"], -e["member"]))["member"]
        return {"best_member": best, "members": entries}


def run_population(population: PopulationOfRuns, parallel: int, command_prefix=()) -> int:
    """Runs the population's remaining rounds; returns the exit status."""
    ends = round_ends(population.settings.interval_updates, population.sizes.num_updates)
    first = 1
    for end in ends:
        if end <= population.considered_through:
            first = end + 1
            continue
        print(
            f"sebulba.pbt: round {ends.index(end) + 1} of {len(ends)}: every member to update "
            f"{end} of {population.sizes.num_updates}",
            flush=True,
        )
        runner = LocalRunner(
            population.round(end), parallel, name="sebulba.pbt", command_prefix=command_prefix
        )
        status = runner.run()
        if runner.stop_signal is not None:  # Stopped and checkpointed: a rerun resumes.
            return status
        if status != 0:
            print(
                "sebulba.pbt: a member failed (its run.log says why); rerun the same command "
                "to resume the population",
                flush=True,
            )
            return status
        if end < population.sizes.num_updates:
            print(f"sebulba.pbt: {population.step(first, end)}", flush=True)
        first = end + 1
    results = population.results()
    population.save(results)
    if results["best_member"] is not None:
        member = results["members"][results["best_member"]]
        values = ", ".join(f"{k} {v:.3g}" for k, v in member["hyperparameters"].items())
        print(
            f"sebulba.pbt: population done after {population.members.generation} pbt steps: "
            f"best member {member['member']} ({member['mean_return']:.1f}; {values}); every "
            f"member in {population.path}",
            flush=True,
        )
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sebulba.pbt",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("--config", required=True, help="FILE[:ARG]")
    add("--workdir", required=True, help="the population's directory; members go in member=<i>")
    add("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override")
    add("--parallel", type=int, default=1, help="members running at a time")
    add("--srun", action="store_true", help="start each member with srun (inside a SLURM job)")
    return parser


def _error(message: str) -> int:
    print(f"sebulba.pbt: error: {message}", file=sys.stderr, flush=True)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.parallel < 1:
        print(
            f"sebulba.pbt: error: --parallel={args.parallel}: must be at least 1", file=sys.stderr
        )
        return 2
    try:
        workdir_lib.check_workdir(args.workdir)
        population = PopulationOfRuns(args.config, args.set, args.workdir)
    except ConfigError as error:
        return _error(str(error))
    with workdir_lib.reserved([args.workdir], check=False):
        try:
            workdir_lib.hold(args.workdir)
        except ConfigError as error:
            return _error(str(error))
        population.save()  # The directory is this population's from the start.
        print(f"sebulba.pbt: {population.settings.describe()}; in {args.workdir}", flush=True)
        return run_population(population, args.parallel, SRUN if args.srun else ())
