"""Joint multi-task training: which task each global env index belongs to.

`env.ids` names the tasks trained jointly by one policy (an empty tuple: the single task
`env.id`). The run's global envs, indices 0 .. N - 1 over every process and actor thread
(`Sizes.num_envs`), are cut into one contiguous block per task in `env.ids` order:
global env i belongs to task `i * K // N` for K tasks. The blocks depend on N and K
alone, never on how the envs are spread over threads, processes or learner devices, so
a run's data and episodes per task are the same in every layout with the same N. Block
sizes differ by at most one env (`N % K` of them are one env larger); every task needs at
least one env, so N >= K.

An actor thread steps its envs as one envpool pool per task block it overlaps
(`sebulba.environments.thread_envs.make_thread_envs`); the pipeline sees one set of envs
either way. Agents that treat tasks differently (PopArt) map `Rollout.env_ids` to tasks
with `TaskLayout.task_of_env`; metrics attribute each finished episode through its env
index.
"""

from __future__ import annotations

import dataclasses

import ml_collections
import numpy as np

from sebulba.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class TaskLayout:
    """The tasks of a run and the fixed block of global env indices of each.

    Attributes:
      ids: envpool task ids, in `env.ids` order (one id for a single-task run).
      num_envs: global envs of the run, N (`Sizes.num_envs`).
    """

    ids: tuple[str, ...]
    num_envs: int

    def __post_init__(self):
        if not self.ids:
            raise ValueError("a run has at least one task")
        if self.num_envs < len(self.ids):
            raise ConfigError(
                f"env.ids names {len(self.ids)} tasks but the run has {self.num_envs} envs "
                "(env.num_envs x pipeline.num_actor_threads x processes): every task needs "
                "at least one env"
            )

    @property
    def num_tasks(self) -> int:
        return len(self.ids)

    @property
    def is_multitask(self) -> bool:
        return len(self.ids) > 1

    def task_of_env(self, env_index):
        """Task index of global env index(es): an int, or a numpy / jax integer array."""
        return env_index * self.num_tasks // self.num_envs

    def block(self, task: int) -> range:
        """The global env indices of task `task` (an index into `ids`)."""
        return range(self._block_start(task), self._block_start(task + 1))

    def _block_start(self, task: int) -> int:
        return -(-task * self.num_envs // self.num_tasks)  # ceil(task * N / K)

    def segments(self, first_env: int, count: int) -> list[tuple[int, int, int]]:
        """The task blocks a range of global envs overlaps, in env order.

        Returns:
          (task index, first global env, end global env) for each contiguous piece of
          [first_env, first_env + count) that belongs to one task.
        """
        pieces, start, end = [], first_env, first_env + count
        while start < end:
            task = self.task_of_env(start)
            stop = min(end, self._block_start(task + 1))
            pieces.append((task, start, stop))
            start = stop
        return pieces

    def env_task_ids(self) -> np.ndarray:
        """[N] int32: the task index of every global env."""
        return self.task_of_env(np.arange(self.num_envs, dtype=np.int64)).astype(np.int32)


def task_ids(env_config: ml_collections.ConfigDict) -> tuple[str, ...]:
    """The run's task ids: `env.ids` if it names any, else `(env.id,)`."""
    ids = env_config.get("ids", ())
    return tuple(ids) if ids else (env_config.id,)


def task_env_config(
    env_config: ml_collections.ConfigDict, task_id: str
) -> ml_collections.ConfigDict:
    """The `env` section of one task: a copy with `id` = `task_id` and no `ids`."""
    single = ml_collections.ConfigDict(env_config.to_dict())
    single.id = task_id
    single.ids = ()
    return single


def task_layout(config: ml_collections.ConfigDict, num_envs: int) -> TaskLayout:
    """The `TaskLayout` of a run config with `num_envs` global envs (`Sizes.num_envs`)."""
    return TaskLayout(task_ids(config.env), num_envs)


def check_task_ids(env_config: ml_collections.ConfigDict) -> None:
    """Raises ConfigError naming env.ids unless it is a tuple of distinct task-id strings."""
    ids = env_config.get("ids", ())
    if isinstance(ids, str) or not isinstance(ids, tuple | list):
        raise ConfigError(f"env.ids must be a tuple of envpool task ids, got {ids!r}")
    for index, task_id in enumerate(ids):
        if not isinstance(task_id, str) or not task_id:
            raise ConfigError(f"env.ids[{index}] must be an envpool task id, got {task_id!r}")
    duplicates = sorted({i for i in ids if list(ids).count(i) > 1})
    if duplicates:
        raise ConfigError(f"env.ids names {duplicates[0]!r} twice: each task appears once")


def check_compatible(specs: dict[str, object]) -> None:
    """Raises ConfigError unless every task's `EnvSpec` has the first task's spaces.

    One policy acts in every task, so the observation structure (names, shapes, dtypes)
    and the action space must be identical. The message names the two tasks and only
    what differs (e.g. "'mission' shape (96,) vs (512,)"), never whole specs.
    """
    items = list(specs.items())
    first_id, first = items[0]
    for task_id, spec in items[1:]:
        if spec.action != first.action:
            raise ConfigError(
                f"env.ids: tasks {first_id!r} and {task_id!r} have different action spaces "
                f"({describe_action(first.action)} vs {describe_action(spec.action)}); "
                "jointly trained tasks must share one"
            )
        if spec.observation != first.observation:
            differences = "; ".join(observation_differences(first.observation, spec.observation))
            raise ConfigError(
                f"env.ids: tasks {first_id!r} and {task_id!r} have different observations "
                f"({differences}); jointly trained tasks must share their structure, shapes "
                "and dtypes"
            )


def describe_action(action) -> str:
    """An action spec in a few words: "Discrete(7)", "Box (6,)", "MultiDiscrete(3, 3)"."""
    kind = type(action).__name__
    if kind == "Discrete":
        return f"Discrete({action.num_actions})"
    if kind == "MultiDiscrete":
        return f"MultiDiscrete({', '.join(map(str, action.nvec))})"
    if kind == "Box":
        return f"Box {tuple(action.shape)} in [{min(action.low):g}, {max(action.high):g}]"
    return kind


# How messages name the fields of an observation's `ArraySpec` (others: their own name).
_FIELD_NAMES = {"num_values": "n"}


def observation_differences(first, other) -> list[str]:
    """What differs between two observation specs (an `ArraySpec` or a dict of them).

    Returns:
      one phrase per difference, e.g. ["'mission' shape (96,) vs (512,)",
      "'goal' only in the second"]; a key's matching fields are left out.
    """
    if isinstance(first, dict) != isinstance(other, dict):
        kinds = ["a dict" if isinstance(x, dict) else "one array" for x in (first, other)]
        return [f"{kinds[0]} vs {kinds[1]}"]
    if not isinstance(first, dict):
        return _array_differences("", first, other)
    phrases = [f"{key!r} only in the first" for key in first if key not in other]
    phrases += [f"{key!r} only in the second" for key in other if key not in first]
    for key in first:
        if key in other and first[key] != other[key]:
            phrases += _array_differences(f"{key!r} ", first[key], other[key])
    return phrases


def _array_differences(prefix: str, first, other) -> list[str]:
    phrases = []
    for field in dataclasses.fields(first):
        a, b = getattr(first, field.name), getattr(other, field.name, None)
        if a != b:
            phrases.append(f"{prefix}{_FIELD_NAMES.get(field.name, field.name)} {a} vs {b}")
    return phrases
