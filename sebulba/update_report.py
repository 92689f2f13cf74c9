"""What a runner (the Sebulba pipeline or the Anakin runner) reports after each update.

`sebulba.train` drives both runners through the same `run(..., on_update, ...)` and
hands every `UpdateReport` to the metrics (`sebulba.runtime.metrics.MetricsLogger`) and the
checkpoints, so neither needs to know which runner produced it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax


@dataclasses.dataclass
class UpdateReport:
    """What the learner reports after each update (device metrics are not yet fetched).

    The episodes that ended during the update's rollout, over every thread and process,
    come as three parallel lists (raw return, length in agent steps, global env index),
    sorted by env index (each env's episodes in the order they ended), so their order
    does not depend on how the envs are spread over threads and processes.
    """

    update: int
    global_step: int
    actor_policy_version: int
    learner_policy_version: int
    rollout_wait_s: float
    params_wait_s: float
    episode_returns: list[float]
    episode_lengths: list[int]
    episode_env_ids: list[int]
    agent_metrics: dict[str, jax.Array]
    # The last update of the program call that ran this one: the update itself, except in
    # an Anakin block (`pipeline.updates_per_call`), whose updates all report once it
    # returns. The metrics' steady state starts after the first call.
    last_update_of_call: int | None = None
    # `time.perf_counter()` when that call returned, where the caller records several
    # runs' reports of one call in turn (`--seeds`): each run's steady-state time is then
    # the program's, without the time spent recording and saving the others. None: the
    # time the report is recorded.
    call_returned_at: float | None = None
    # Metrics the run adds beside the agent's, written as they are: a population member's
    # hyperparameters and lineage (`sebulba.pbt.population.Population.member_metrics`).
    run_metrics: dict[str, Any] | None = None

    @property
    def call_ends_here(self) -> bool:
        return self.last_update_of_call in (None, self.update)
