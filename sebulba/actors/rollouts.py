"""What an actor thread collects, on its way to the learner.

`EnvGroup` is a fixed group of an actor thread's envs stepped as one pool, with everything
per env; the step loop fills a `HostRollout` on the host step by step, the scan loop's
`ScanCollector` returns a `ScanRollout` of pieces on the actor device; either becomes an
`ActorRollout` on the learner devices, which the handoff carries to the learner
(`sebulba.pipeline`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from sebulba.agents.api import EnvSpec, Rollout
from sebulba.environments import spaces
from sebulba.environments.episodes import EpisodeTracker, game_overs


@dataclasses.dataclass
class ActorRollout:
    """One actor thread's share of rollout `update`, already on the learner devices.

    Attributes:
      update: the rollout (and update) number, from 1.
      policy_version: the parameter version that collected it.
      pieces: one `Rollout` per local learner device, holding that device's env slice.
      episode_returns: raw returns of episodes that ended during the rollout.
      episode_lengths: their lengths in agent steps.
      episode_env_ids: the global env index each of them ran in.
      params_wait_s: time the actor waited for its parameters before collecting.
    """

    update: int
    policy_version: int
    pieces: list[Rollout]
    episode_returns: list[float]
    episode_lengths: list[int]
    episode_env_ids: list[int]
    params_wait_s: float


@dataclasses.dataclass
class EnvGroup:
    """A fixed group of consecutive envs of an actor thread, stepped as one pool.

    Everything per env lives here, split by the same columns as the envs themselves.

    Attributes:
      pool: the group's envs, with `reset`, `send` and `recv` (`thread_envs.step_groups`).
      columns: the group's envs among the thread's envs.
      env_ids: [n] int32 global env indices, on the actor device.
      step_index: int32 scalar on the actor device, the next policy step's index.
      tracker: the envs' running episode returns and reset flags.
      obs: the envs' current observations on the host, each leaf [n, ...].
      actions: [n] actions of the last dispatched policy step, on the actor device.
      carry: the envs' recurrent carry (leaves [n, ...]) on the actor device; `()` for
        feed-forward agents.
      starts: [n] bool on the host, where `obs` starts an episode (reset the carry).
      initial_carry: the carry obs[0] of the current rollout was processed with.
    """

    pool: Any
    columns: slice
    env_ids: jax.Array
    step_index: jax.Array
    tracker: EpisodeTracker
    obs: Any
    actions: jax.Array | None = None
    carry: Any = ()
    starts: np.ndarray | None = None
    initial_carry: Any = ()


@dataclasses.dataclass
class HostRollout:
    """One actor thread's rollout on the host, time-major, filled in place step by step.

    Fresh buffers every rollout: a device copy on a CPU backend may alias host memory.
    """

    obs: Any  # Leaves [T + 1, n, ...].
    actions: np.ndarray  # [T, n, *action.shape]
    rewards: np.ndarray  # [T, n] float32, raw until `learning_rewards`.
    terminations: np.ndarray  # [T, n] bool
    truncations: np.ndarray  # [T, n] bool
    valid: np.ndarray  # [T, n] bool
    env_ids: np.ndarray  # [n] int32
    episode_returns: list[float] = dataclasses.field(default_factory=list)
    episode_lengths: list[int] = dataclasses.field(default_factory=list)
    episode_env_ids: list[int] = dataclasses.field(default_factory=list)
    policy_outputs: list[Any] = dataclasses.field(default_factory=list)  # Per learner slice.
    initial_carry: list[Any] = dataclasses.field(default_factory=list)  # Per learner slice.

    @classmethod
    def empty(cls, env_spec: EnvSpec, T: int, n: int, env_ids: np.ndarray) -> HostRollout:
        action = env_spec.action
        return cls(
            obs=spaces.map_observation(
                lambda s: np.empty((T + 1, n, *s.shape), s.dtype), env_spec.observation
            ),
            actions=np.empty((T, n, *action.shape), np.dtype(action.dtype)),
            rewards=np.empty((T, n), np.float32),
            terminations=np.empty((T, n), bool),
            truncations=np.empty((T, n), bool),
            valid=np.empty((T, n), bool),
            env_ids=env_ids,
        )

    def record_obs(self, t: int, group: EnvGroup) -> None:
        def write(buffer, x):
            buffer[t, group.columns] = x

        jax.tree.map(write, self.obs, group.obs)

    def record_step(self, t, group: EnvGroup, raw_rewards, terminations, truncations, info) -> None:
        columns = group.columns
        self.valid[t, columns] = group.tracker.step(
            raw_rewards,
            terminations,
            truncations,
            self.episode_returns,
            self.episode_lengths,
            self.episode_env_ids,
            game_overs(terminations, info),
        )
        self.rewards[t, columns] = raw_rewards
        self.terminations[t, columns] = terminations
        self.truncations[t, columns] = truncations

    def piece(self, columns: slice, policy_outputs, initial_carry) -> Rollout:
        return Rollout(
            obs=jax.tree.map(lambda x: x[:, columns], self.obs),
            actions=self.actions[:, columns],
            rewards=self.rewards[:, columns],
            terminations=self.terminations[:, columns],
            truncations=self.truncations[:, columns],
            valid=self.valid[:, columns],
            policy_outputs=policy_outputs,
            env_ids=self.env_ids[columns],
            initial_carry=initial_carry,
        )


@dataclasses.dataclass
class ScanRollout:
    """One actor thread's rollout from the scan loop: per learner slice, on the actor device."""

    pieces: list[Rollout]
    episode_returns: list[float] = dataclasses.field(default_factory=list)
    episode_lengths: list[int] = dataclasses.field(default_factory=list)
    episode_env_ids: list[int] = dataclasses.field(default_factory=list)


class ScanCollector:
    """An actor thread's scan loop: its rollout program, its env groups' device state
    (`states`, carried from rollout to rollout) and their episode bookkeeping.

    Calling it, `collect(params, device, control) -> ScanRollout`, runs one rollout.
    """

    def __init__(self, program, states: list, groups: list[EnvGroup], num_steps: int):
        self.program = program
        self.states = states
        self._groups = groups
        self._num_steps = num_steps

    def compile(self, params) -> None:
        self.program.compile(params, self.states)

    def __call__(self, params, device, control) -> ScanRollout:
        del device
        control.raise_if_stopped()
        self.states, episode_fields, pieces = self.program(params, self.states)
        return self.collected(episode_fields, pieces)

    def collected(self, episode_fields, pieces: list[Rollout]) -> ScanRollout:
        """The rollout of `pieces`, its episodes recorded from its `episode_fields`."""
        raw_rewards, terminations, truncations, ended_games = jax.device_get(episode_fields)
        rollout = ScanRollout(pieces)
        # The episodes, in the step loop's order (step by step, group by group).
        for t in range(self._num_steps):
            for group in self._groups:
                columns = group.columns
                group.tracker.step(
                    raw_rewards[t, columns],
                    terminations[t, columns],
                    truncations[t, columns],
                    rollout.episode_returns,
                    rollout.episode_lengths,
                    rollout.episode_env_ids,
                    ended_games[t, columns],
                )
        return rollout


def in_env_order(
    returns: Sequence[float], lengths: Sequence[int], env_ids: Sequence[int]
) -> tuple[list[float], list[int], list[int]]:
    """Episodes (three parallel lists) sorted by global env index, stably.

    Each env's episodes keep the order in which they ended; the result is the same
    whichever threads, env groups or processes the episodes were collected by.
    """
    order = np.argsort(np.asarray(env_ids, np.int64), kind="stable")
    return (
        [returns[i] for i in order],
        [lengths[i] for i in order],
        [env_ids[i] for i in order],
    )
