"""Population-based training in Anakin: a population's members as one vmapped program.

    python -m sebulba.main --config=configs/ppo_minatar.py:Breakout,cpu,anakin \
        --workdir=runs/pbt --config.pbt.population=8

trains 8 members together, member i with seed `seed + i`, each into `WORKDIR/member=<i>`,
the complete workdir a run of its own writes (`sebulba.evaluate` and `load_policy` read
it). Each member's hyperparameters (`pbt.hyperparameters`) are an input of the compiled
program, one value per member, which the agent reads as traced numbers: the same program
runs whatever values the members hold, as optax's injected hyperparameters let a step
size change without recompiling. Every `pbt.interval` env steps the host ranks the
members and the bottom ones take a copy of a top member's learner state (parameters,
optimiser state, statistics, lagged parameters) and explore its hyperparameters
(`sebulba.pbt.population`); their envs keep running. The metrics lines carry each
member's hyperparameters and lineage, `summary.json` a `pbt` section, and
`WORKDIR/population.json` the whole population. A stop checkpoints every member with the
population's state, and the same command resumes it bit for bit.
"""

from __future__ import annotations

import time

import jax
import ml_collections

from sebulba import checkpoint as ckpt_lib
from sebulba.anakin import seeds as seeds_lib
from sebulba.config.run_plan import plan
from sebulba.errors import ConfigError
from sebulba.pbt.settings import in_one_program
from sebulba.runtime import workdir as workdir_lib


def member_workdir(workdir: str, member: int) -> str:
    """Where member `member` of a population writes: `WORKDIR/member=<member>`."""
    return f"{workdir.rstrip('/')}/member={member}"


def train_population(
    config: ml_collections.ConfigDict,
    workdir: str,
    stop_signals: ckpt_lib.StopSignals | None = None,
) -> list:
    """Trains the population `config.pbt` describes; returns the members' final states.

    Raises:
      ConfigError: before any work, for a config without a population, one that is not an
        Anakin run, a bad `pbt` section, a bad member workdir, or members that stopped
        after different updates.
    """
    started_at = time.perf_counter()  # Every member's wall time counts start-up and compiling.
    if not in_one_program(config):
        raise ConfigError("pbt.population is 0: this config trains one run, not a population")
    plan(config, values_only=True)  # The `pbt` section's values, before any workdir.
    seeds = tuple(config.seed + member for member in range(config.pbt.population))
    workdirs = [member_workdir(workdir, member) for member in range(len(seeds))]
    configs = seeds_lib.seeded_configs(config, seeds, workdirs)
    with workdir_lib.reserved(workdirs, check=jax.process_index() == 0):
        return seeds_lib.train_stacked(
            config,
            workdir,
            seeds,
            configs,
            workdirs,
            stop_signals,
            started_at,
            population=True,
        )
