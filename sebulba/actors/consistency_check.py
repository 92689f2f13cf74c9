"""`debug.consistency_checks`: each rollout re-derived from its own records before the handoff.

The rollout check (`sebulba.actors.rollout_check`) proves that every value lies within
its spec. A value can lie within its spec and still be wrong: a buffer read before it was
written, a copy that raced, observations of another step. A GPU investigation needs to
know which, so this check re-derives what a rollout's records say of one another:

* **policy outputs**: the policy evaluated again at every recorded observation, with the
  parameters of the version that collected the rollout, from the recorded initial carry
  and episode starts (`episode_starts(valid)`, the learner's replay rule), must give the
  recorded outputs;
* **actions**: sampled again in that evaluation with each step's actor keys (the actor
  stream of the step index and global env index, as `actor_step` draws them), they must
  be the recorded actions. Where the outputs agree and the actions do not, the sampling
  or the actions' copy is at fault; where the outputs disagree, the observations, the
  parameters or the policy's computation is;
* **observations**: obs[0] of rollout k + 1 must equal obs[T] of rollout k, the same env
  state processed again (not checked for the first rollout of a process).

The evaluation runs one program per learner-device piece on the actor device, at the
piece's batch size, so floating-point outputs may differ from the actors' calls in the
last bits; they are compared within a tolerance (`RTOL`, `ATOL`), everything else
exactly. It costs about one policy evaluation of the whole rollout per rollout
(`benchmarks/rollout_checks.py` measures it) and is off by default.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from sebulba.actors.actor_step import actor_step
from sebulba.agents.api import Agent, Rollout, episode_starts

# Recomputed floating-point outputs agree with the recorded ones within this.
RTOL = 1e-4
ATOL = 1e-5


def _mismatch(recomputed: jax.Array, recorded: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per [step, env], whether the two differ (within the tolerance for floats), and the
    largest absolute difference (0 for exact types)."""
    if jnp.issubdtype(recorded.dtype, jnp.inexact):
        difference = jnp.abs(recomputed.astype(recorded.dtype) - recorded)
        differs = difference > ATOL + RTOL * jnp.abs(recorded)
        largest = jnp.max(difference, initial=0.0)
    else:
        differs = recomputed != recorded
        largest = jnp.zeros((), jnp.float32)
    per_env = jnp.any(differs.reshape(*differs.shape[:2], -1), axis=-1)
    return per_env, largest.astype(jnp.float32)


class ConsistencyCheck:
    """One actor thread's consistency checks; it keeps the last rollout's final observations.

    Args:
      agent: the run's agent (its `act` is evaluated again).
      seed: the run's seed (the actor keys derive from it).
      num_steps: T, the rollout's length.
      to_device: `to_device(tree, device)` copies a piece to the actor device (also from
        another platform's devices); `jax.device_put` by default.
    """

    def __init__(
        self,
        agent: Agent,
        seed: int,
        num_steps: int,
        to_device: Callable[[Any, jax.Device], Any] = jax.device_put,
    ):
        self._agent = agent
        self._to_device = to_device
        self._seed = seed
        self._num_steps = num_steps
        self._replay = jax.jit(self._replay_fn)
        self._continues = jax.jit(self._continues_fn)
        self._final_obs = jax.jit(lambda obs: jax.tree.map(lambda x: x[-1], obs))
        self._last_obs: list | None = None
        self._last_update: int | None = None

    def _replay_fn(self, params, piece: Rollout, first_step_index: jax.Array) -> dict:
        """Per checked field, ([steps, b] mismatch, largest difference)."""
        starts = episode_starts(piece.valid)  # obs[0]'s carry is already reset.

        def step(loop, inputs):
            carry, step_index = loop
            obs, starts_t = inputs
            _, next_carry, actions, outputs, step_index = actor_step(
                self._agent, self._seed, params, carry, obs, starts_t, piece.env_ids, step_index
            )
            return (next_carry, step_index), (actions, outputs)

        loop = (piece.initial_carry, first_step_index)
        _, (actions, outputs) = jax.lax.scan(step, loop, (piece.obs, starts))
        paths = jax.tree_util.tree_flatten_with_path(outputs)[0]
        recorded = jax.tree.leaves(piece.policy_outputs)
        found = {
            f"policy_outputs{jax.tree_util.keystr(path)}": _mismatch(leaf, old)
            for (path, leaf), old in zip(paths, recorded, strict=True)
        }
        found["actions"] = _mismatch(actions[: self._num_steps], piece.actions)
        return found

    @staticmethod
    def _continues_fn(last_obs, obs) -> jax.Array:
        """[b] whether obs[0] of this rollout differs from the last rollout's obs[T]."""

        def differs(last, x):
            return jnp.any((x[0] != last).reshape(x.shape[1], -1), axis=-1)

        return jnp.any(jnp.stack(jax.tree.leaves(jax.tree.map(differs, last_obs, obs))), axis=0)

    def problems(
        self, params, pieces: Sequence[Rollout], update: int, device: jax.Device
    ) -> str | None:
        """What in rollout `update`'s pieces its records do not reproduce; None if all agree.

        Args:
          params: the policy parameters that collected the rollout, on `device`.
          pieces: the rollout's pieces (each on its learner device).
          update: the rollout's number (its first step index follows from it).
          device: the actor device that collected it, where the policy is evaluated.
        """
        first_step = jax.device_put(np.int32((update - 1) * (self._num_steps + 1)), device)
        local = [self._to_device(piece, device) for piece in pieces]
        replays = [self._replay(params, piece, first_step) for piece in local]
        continuing = self._last_obs is not None and self._last_update == update - 1
        breaks = (
            [
                self._continues(last, piece.obs)
                for last, piece in zip(self._last_obs, local, strict=True)
            ]
            if continuing
            else [None] * len(local)
        )
        self._last_obs = [self._final_obs(piece.obs) for piece in local]
        self._last_update = update
        replays, breaks, env_ids = jax.device_get(
            (replays, breaks, [piece.env_ids for piece in local])
        )
        return _report(replays, breaks, env_ids, update)


def _report(replays, breaks, env_ids, update: int) -> str | None:
    """The phrases of `ConsistencyCheck.problems` from the pieces' read-back mismatches."""
    first: dict[str, tuple[int, int]] = {}
    largest: dict[str, float] = {}
    for replay, ids in zip(replays, env_ids, strict=True):
        for name, (differs, difference) in replay.items():
            largest[name] = max(largest.get(name, 0.0), float(difference))
            if differs.any():
                step, column = np.argwhere(differs)[0]
                found = (int(step), int(ids[column]))
                first[name] = min(first.get(name, found), found)
    phrases = []
    for name, (step, env) in first.items():
        if name == "actions":
            what = "differ from their resampling"
        else:
            what = f"differ from their recomputation by up to {largest[name]:.3g}"
        phrases.append(f"{name} {what} (from step {step}, env {env})")
    broken_envs = [
        int(ids[column])
        for differs, ids in zip(breaks, env_ids, strict=True)
        if differs is not None
        for column in np.flatnonzero(differs)
    ]
    if broken_envs:
        listed = ", ".join(map(str, broken_envs[:5])) + (", ..." if len(broken_envs) > 5 else "")
        phrases.append(f"obs[0] differs from obs[T] of rollout {update - 1} (envs {listed})")
    return ", ".join(phrases) or None
