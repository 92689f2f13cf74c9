"""What a run is made of once its config has passed its checks (`RunSetup`), where a run
(segment) starts (`StartPoint`), and the learner state's first version, created already
placed on the learner mesh."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import ml_collections

from sebulba import random_streams
from sebulba.agents.api import Agent, EnvSpec
from sebulba.anakin.env_api import BatchOfEnvs
from sebulba.config.sizes import Sizes
from sebulba.mesh import DeviceLayout


@dataclasses.dataclass
class RunSetup:
    """Everything a run needs, built and checked before any output is written."""

    config: ml_collections.ConfigDict
    sizes: Sizes
    layout: DeviceLayout
    envs_per_thread: list[Any]
    env_spec: EnvSpec
    agent: Agent
    # "scan" or "step": `pipeline.actor_loop` resolved for these envs; "anakin" for a JAX
    # env, which the Anakin runner steps inside its one program.
    actor_loop: str
    actor_loop_reason: str  # Why that loop, for the log.
    # An Anakin run's env (a joint run's: one per task); None for envpool (Sebulba).
    jax_env: BatchOfEnvs | None = None
    # `pipeline.fused` resolved: update k and rollout k + 1 as one program, and why.
    fused: bool = False
    fused_reason: str = "an Anakin run acts and learns in one program already"

    @functools.cached_property
    def learner_state_shapes(self):
        """The learner state's shapes and dtypes, without computing it (traced once)."""
        return state_shapes(self.agent, self.config.seed)


def state_shapes(agent: Agent, seed: int):
    """The shapes and dtypes of the learner state `agent.init` makes for `seed`."""
    return jax.eval_shape(agent.init, random_streams.init_key(seed))


@dataclasses.dataclass
class StartPoint:
    """Where a run (segment) starts: from scratch, or after a restored checkpoint.

    Attributes:
      state: learner state (version `first_update`), replicated on the learner mesh.
      first_update: the first update to run.
      previous_params: the lagged parameters (policy_lag L > 0): versions
        `lagged_versions(first_update, L)`, oldest first; None for a fresh run.
      meta: the restored checkpoint's metadata (empty for a fresh run).
      env_state: an Anakin run's restored env state (None: fresh envs, or Sebulba).
    """

    state: Any
    first_update: int = 1
    previous_params: Any = None
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    env_state: Any = None


def compile_init(setup: RunSetup) -> Callable[[], Any]:
    """The learner state's init program, compiled but not run (nothing of the state exists
    yet); calling the result creates the state already placed on the learner mesh
    (`Agent.partition_specs`)."""
    shapes = setup.learner_state_shapes
    shardings = setup.agent.state_shardings(shapes, setup.layout.sharding)
    key = random_streams.init_key(setup.config.seed)
    init = jax.jit(setup.agent.init, out_shardings=shardings).lower(key).compile()
    return functools.partial(init, key)


def init_learner_state(setup: RunSetup):
    """Creates the learner state already placed on the learner mesh (`Agent.partition_specs`)."""
    return compile_init(setup)()
