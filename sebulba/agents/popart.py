"""PopArt value normalisation per task (van Hasselt et al. 2016; Hessel et al. 2019).

"Preserving Outputs Precisely, while Adaptively Rescaling Targets": the value head has
one linear output per task, trained on *normalised* targets. For an env of task t the
network's normalised value is n_t(s), and its value in reward units is
`scale[t] * n_t(s) + shift[t]`, where `shift[t]` and `scale[t]` are the running mean and
standard deviation of task t's value targets ("Multi-task deep RL with PopArt", Hessel et
al. 2019, the multi-task form: one (shift, scale, second moment) per task, each moved only
by its own task's targets).

* ART: the statistics follow the targets. Every valid target of task t counts as one
  step of size beta (`agent.popart_step_size`) towards it, mean and second moment alike;
  the n targets of a batch, seen at once, move the statistics by `1 - (1 - beta)^n`
  towards their batch mean (n steps of beta if the targets were equal; about n beta for
  small n beta; never past the batch mean, whatever the batch size). The scale is
  `sqrt(second moment - shift^2)` clipped to [`popart_scale_lb`, `popart_scale_ub`].
* POP: whenever the statistics change, the value head's kernel and bias are rescaled
  (`rlax.pop`) so that every task's unnormalised value is unchanged, exactly in real
  arithmetic and to float rounding in float32.

The normalised, unnormalised and per-task selections use rlax's PopArt functions
(`rlax.normalize`, `rlax.unnormalize`, `rlax.unnormalize_linear`, `rlax.pop`); the
statistics are an `rlax.PopArtState` of [K] arrays. The batch update is written here
because `rlax.art` adds beta times the error of every sample, which overshoots the batch
mean once a task has more than 1 / beta samples per update (and our batches are sums
over the whole global batch, so the step would depend on the batch size).

The statistics belong to the learner state (`learner.PopArtTrainState.popart`), are saved
with it, and travel to the actors inside the policy parameters when `act` needs them
(PPO's behaviour values). docs/agents.md ("PopArt") says in what order an update uses
them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import chex
import jax
import jax.numpy as jnp
import rlax
from flax import traverse_util

from sebulba.config.validation import POSITIVE, Range, check_ranges
from sebulba.errors import ConfigError

# The name of the value head's linear layer when PopArt is on (`networks.py`).
VALUE_HEAD = "popart_value"

# The interval of every numeric PopArt key; `popart_of` refuses values outside them.
HYPERPARAMETER_RANGES = {
    "popart_step_size": Range(0, 1, low_open=True),
    "popart_scale_lb": POSITIVE,
    "popart_scale_ub": POSITIVE,
}


def initial_state(num_tasks: int) -> rlax.PopArtState:
    """Shift 0, scale 1, second moment 1 for each of `num_tasks` tasks (rlax's prior)."""
    return rlax.PopArtState(
        shift=jnp.zeros((num_tasks,), jnp.float32),
        scale=jnp.ones((num_tasks,), jnp.float32),
        second_moment=jnp.ones((num_tasks,), jnp.float32),
    )


def task_moments(targets: jax.Array, valid: jax.Array, tasks: jax.Array, num_tasks: int):
    """Per-task sufficient statistics of valid targets: counts, sums, sums of squares.

    Sums over a sharded batch are global reductions, and sums of micro-batches add up,
    so the moments of a batch do not depend on how it is split.

    Args:
      targets: [..., B] float value targets (unnormalised).
      valid: [..., B] bool or 0/1, which targets count.
      tasks: [..., B] (or broadcastable) int task index of each target.
      num_tasks: K.

    Returns:
      [3, K] float32: counts, sums and sums of squares of each task's valid targets.
    """
    weight = jnp.broadcast_to(valid, targets.shape).astype(jnp.float32)
    one_hot = jax.nn.one_hot(jnp.broadcast_to(tasks, targets.shape), num_tasks)  # [..., B, K]
    targets = targets.astype(jnp.float32)
    columns = jnp.stack([weight, weight * targets, weight * jnp.square(targets)])
    return jnp.einsum("n...,...k->nk", columns, one_hot)


def updated_state(
    state: rlax.PopArtState,
    moments: jax.Array,
    *,
    step_size: float,
    scale_lb: float,
    scale_ub: float,
) -> rlax.PopArtState:
    """ART: the statistics moved towards each task's batch moments.

    Args:
      state: the statistics, [K] each.
      moments: [3, K] from `task_moments` (counts, sums, sums of squares).
      step_size: beta, the step of one target.
      scale_lb, scale_ub: bounds of the scale (standard deviation).

    Returns:
      The new statistics. A task without valid targets keeps its statistics.
    """
    chex.assert_shape(moments, (3, state.shift.shape[0]))
    counts, sums, squares = moments
    safe_counts = jnp.maximum(counts, 1.0)
    # 1 - (1 - beta)^n, accurately for small beta; 0 when n = 0 (also for beta = 1).
    rate = jnp.where(counts > 0, -jnp.expm1(counts * jnp.log1p(-step_size)), 0.0)
    shift = state.shift + rate * (sums / safe_counts - state.shift)
    second_moment = state.second_moment + rate * (squares / safe_counts - state.second_moment)
    variance = jnp.clip(second_moment - jnp.square(shift), scale_lb**2, scale_ub**2)
    new = rlax.PopArtState(shift=shift, scale=jnp.sqrt(variance), second_moment=second_moment)
    return jax.tree.map(jax.lax.stop_gradient, new)


def _value_head_path(params: Any) -> tuple:
    """The flattened-dict path of the value head's parameters (`VALUE_HEAD`)."""
    paths = {path[:-1] for path in traverse_util.flatten_dict(params) if VALUE_HEAD in path}
    if len(paths) != 1:
        raise ValueError(f"expected one {VALUE_HEAD!r} layer in the parameters, found {paths}")
    return paths.pop()


def preserved_params(params: Any, old: rlax.PopArtState, new: rlax.PopArtState) -> Any:
    """POP: network parameters whose unnormalised values under `new` equal those under `old`.

    Rescales the value head's kernel [D, K] and bias [K] with `rlax.pop` (which names
    them w and b); every other parameter is returned as it is.
    """
    flat = traverse_util.flatten_dict(params)
    head = _value_head_path(params)
    popped = rlax.pop({"w": flat[(*head, "kernel")], "b": flat[(*head, "bias")]}, old, new)
    flat[(*head, "kernel")] = popped["w"]
    flat[(*head, "bias")] = popped["b"]
    return traverse_util.unflatten_dict(flat)


def all_unnormalized(state: rlax.PopArtState, normalized: jax.Array) -> jax.Array:
    """Every task's unnormalised value: normalized [..., K] -> scale * normalized + shift."""
    return rlax.unnormalize(state, normalized, jnp.arange(state.shift.shape[0]))


def select_task(values: jax.Array, tasks: jax.Array) -> jax.Array:
    """The column of each sample's task: values [..., K], tasks [...] -> [...]."""
    return jnp.take_along_axis(values, tasks[..., None], axis=-1)[..., 0]


@dataclasses.dataclass(frozen=True)
class PopArt:
    """An agent's PopArt settings for a run (`popart_of`).

    Attributes:
      enabled: `agent.popart`.
      layout: the run's `sebulba.environments.tasks.TaskLayout` (which task each global env runs).
      step_size, scale_lb, scale_ub: beta and the scale bounds.
    """

    enabled: bool
    layout: Any
    step_size: float
    scale_lb: float
    scale_ub: float

    @property
    def num_tasks(self) -> int:
        return self.layout.num_tasks

    @property
    def value_heads(self) -> int | None:
        """Outputs of the value head: one per task when on; None (a scalar value) when off."""
        return self.num_tasks if self.enabled else None

    def init(self) -> rlax.PopArtState | None:
        return initial_state(self.num_tasks) if self.enabled else None

    def tasks(self, env_ids: jax.Array) -> jax.Array:
        """[B] int32 task index of the global env ids [B]."""
        return self.layout.task_of_env(env_ids).astype(jnp.int32)

    def update(
        self, params: Any, state: rlax.PopArtState, moments: jax.Array
    ) -> tuple[Any, rlax.PopArtState]:
        """ART then POP: (network params preserving every output, new statistics)."""
        new = updated_state(
            state,
            moments,
            step_size=self.step_size,
            scale_lb=self.scale_lb,
            scale_ub=self.scale_ub,
        )
        return preserved_params(params, state, new), new

    def moments(self, targets: jax.Array, valid: jax.Array, tasks: jax.Array) -> jax.Array:
        """`task_moments` for this run's K tasks."""
        return task_moments(targets, valid, tasks, self.num_tasks)

    def metrics(self, state: rlax.PopArtState) -> dict[str, jax.Array]:
        """`popart_shift/<task id>` and `popart_scale/<task id>` of every task."""
        out = {}
        for index, task_id in enumerate(self.layout.ids):
            out[f"popart_shift/{task_id}"] = state.shift[index]
            out[f"popart_scale/{task_id}"] = state.scale[index]
        return out


def check_config(agent_config: Any) -> None:
    """Raises ConfigError naming the field for a bad `agent.popart*` value."""
    check_ranges(agent_config, "agent", HYPERPARAMETER_RANGES)
    if agent_config.popart_scale_ub <= agent_config.popart_scale_lb:
        raise ConfigError(
            f"agent.popart_scale_ub ({agent_config.popart_scale_ub}) must exceed "
            f"agent.popart_scale_lb ({agent_config.popart_scale_lb})"
        )


def popart_of(config: Any, task_layout: Any) -> PopArt:
    """The `PopArt` a run config asks for, over the tasks of `task_layout`
    (`sebulba.environments.tasks`).

    Raises:
      ConfigError: naming the field, for a bad `agent.popart*` value.
    """
    agent_config = config.agent
    check_config(agent_config)
    return PopArt(
        enabled=bool(agent_config.popart),
        layout=task_layout,
        step_size=float(agent_config.popart_step_size),
        scale_lb=float(agent_config.popart_scale_lb),
        scale_ub=float(agent_config.popart_scale_ub),
    )
