"""The envs of one actor thread: its envpool pools, their worker threads, how they step.

Env seeds follow the global env index: env i of a pool whose first env has global
index g0 is seeded with `seed + g0 + i`, whatever thread or process steps it.

`SplitPool` steps an actor thread's envs as two fixed halves (two sync pools), so the
actor can run one half's policy while the other half's envs step (envpool's C++ threads
release the GIL): the overlap of simulation and inference of Weng et al. (2022), with
every step still returning every env of a half, in order.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import ml_collections
import numpy as np

from sebulba.environments.envpool_pools import make_envs
from sebulba.errors import ConfigError


class SplitPool:
    """One actor thread's envs as fixed groups of consecutive envs, each a sync pool.

    Behaves as one pool of all the envs (`reset`, `step`, `close`, the spaces), so code
    that steps envs whole works unchanged; the pipeline steps `groups` one at a time to
    overlap them with inference. Env i of the whole is env i - g of the group starting at
    g, seeded `seed + i` either way, so splitting changes no env's episodes.
    """

    def __init__(self, groups: list):
        self.groups = list(groups)
        self.observation_space = self.groups[0].observation_space
        self.action_space = self.groups[0].action_space

    def reset(self):
        results = [group.reset() for group in self.groups]
        return tuple(_concat_envs(*parts) for parts in zip(*results, strict=True))

    def step(self, actions):
        start = 0
        for group in self.groups:
            size = group.config["num_envs"]
            group.send(actions[start : start + size])
            start += size
        results = [group.recv() for group in self.groups]
        return tuple(_concat_envs(*parts) for parts in zip(*results, strict=True))

    def close(self) -> None:
        for group in self.groups:
            group.close()


def _concat_envs(*parts):
    """Joins per-group results (arrays [n, ...] or dicts of them) along the env axis."""
    if isinstance(parts[0], dict):
        return {key: _concat_envs(*(p[key] for p in parts)) for key in parts[0]}
    return np.concatenate([np.asarray(p) for p in parts], axis=0)


class SteppedWhole:
    """A pool (or a wrapper of one) driven through `send`/`recv` by its `step` alone."""

    def __init__(self, pool):
        self.pool = pool
        self._actions = None

    def reset(self):
        return self.pool.reset()

    def send(self, actions) -> None:
        self._actions = actions

    def recv(self):
        return self.pool.step(self._actions)


def step_groups(pool) -> list:
    """The groups of a thread's envs, in env order, each with `reset`, `send` and `recv`.

    A `SplitPool`'s halves, or the whole pool as one group. Anything else with a
    gymnasium-style `reset`/`step` (an envpool pool or a wrapper of one) is stepped whole,
    through its own `step`.
    """
    if isinstance(pool, SplitPool):
        return list(pool.groups)
    return [SteppedWhole(pool)]


class JointPool:
    """Several pools of consecutive envs (e.g. one per task) stepped as one pool.

    `send` hands every pool its envs' actions before `recv` waits for any, so the pools
    step concurrently (envpool's C++ threads release the GIL); results are joined along
    the env axis in env order. The pools must share their spaces (`sebulba.environments.tasks`).
    """

    def __init__(self, pools: list):
        self.pools = list(pools)
        self.observation_space = self.pools[0].observation_space
        self.action_space = self.pools[0].action_space
        self.config = {"num_envs": sum(pool.config["num_envs"] for pool in self.pools)}

    def reset(self):
        results = [pool.reset() for pool in self.pools]
        return tuple(_concat_envs(*parts) for parts in zip(*results, strict=True))

    def send(self, actions) -> None:
        start = 0
        for pool in self.pools:
            size = pool.config["num_envs"]
            pool.send(actions[start : start + size])
            start += size

    def recv(self):
        results = [pool.recv() for pool in self.pools]
        return tuple(_concat_envs(*parts) for parts in zip(*results, strict=True))

    def step(self, actions):
        self.send(actions)
        return self.recv()

    def close(self) -> None:
        for pool in self.pools:
            pool.close()


def thread_pool_sizes(task_layout, first_env: int, num_envs: int, *, split: bool) -> list[int]:
    """The sizes of the envpool pools `make_thread_envs` makes for these envs, in order."""
    halves = [(first_env, num_envs)]
    if split:
        first_half = num_envs // 2
        halves = [(first_env, first_half), (first_env + first_half, num_envs - first_half)]
    return [
        stop - start
        for first, count in halves
        for _, start, stop in task_layout.segments(first, count)
    ]


def available_cores() -> int:
    """CPU cores this process may run on: its affinity mask (a SLURM job's or a
    container's CPU set), which envpool's own default ignores."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # Not Linux.
        return os.cpu_count() or 1


def worker_threads(requested: int, pool_sizes: Sequence[int]) -> tuple[int, str]:
    """envpool worker threads per pool for all the pools of a process, and why.

    `requested` is `env.num_threads`; 0 shares this process's cores among its pools, so
    several actor threads' pools (or a joint run's, or `overlap_env_steps`' halves) do
    not each start one worker per core of the machine, as envpool's own default would.

    Raises:
      ConfigError: `requested` is more than both the largest pool's envs and the cores:
        such workers could only idle, and envpool aborts the process when it cannot
        start them (100,000 does).
    """
    cores = available_cores()
    if requested > max(max(pool_sizes), cores):
        raise ConfigError(
            f"env.num_threads ({requested}) is more than both the {max(pool_sizes)} envs of "
            f"this process's largest envpool pool and its {cores} cores: a worker steps one "
            f"env at a time, so the rest would idle; use at most {max(max(pool_sizes), cores)}, "
            "or 0 to size them from the cores"
        )
    if requested:
        return requested, f"env.num_threads={requested}"
    threads = max(1, min(min(pool_sizes), cores // len(pool_sizes)))
    return threads, f"env.num_threads=0: {cores} cores for {len(pool_sizes)} pool(s)"


def make_thread_envs(
    env_config: ml_collections.ConfigDict,
    task_layout,
    first_env: int,
    num_envs: int,
    seed_base: int,
    *,
    split: bool,
    num_threads: int | None = None,
):
    """The envs of one actor thread: global envs [first_env, first_env + num_envs).

    Global env g is seeded `seed_base + g` and runs the task that owns g
    (`sebulba.environments.tasks.TaskLayout`): the thread holds one pool per task block it overlaps,
    joined into one (`JointPool`) when there are several. With `split`
    (`pipeline.overlap_env_steps`) the thread's envs form two fixed halves, each built
    the same way, stepped as a `SplitPool`.

    Args:
      env_config: the `env` section of the config.
      task_layout: the run's `sebulba.environments.tasks.TaskLayout`.
      first_env: global index of the thread's first env.
      num_envs: envs of the thread (>= 2 if `split`).
      seed_base: seed of global env 0.
      split: step the envs as two fixed halves.
      num_threads: envpool worker threads per pool (default `env.num_threads`).
    """
    from sebulba.environments.tasks import task_env_config  # tasks imports nothing of envs.

    def envs_of(first: int, count: int):
        pools = [
            make_envs(
                task_env_config(env_config, task_layout.ids[task]),
                stop - start,
                seed_base + start,
                num_threads=num_threads,
            )
            for task, start, stop in task_layout.segments(first, count)
        ]
        return pools[0] if len(pools) == 1 else JointPool(pools)

    if not split:
        return envs_of(first_env, num_envs)
    first_half = num_envs // 2
    return SplitPool(
        [
            envs_of(first_env, first_half),
            envs_of(first_env + first_half, num_envs - first_half),
        ]
    )
