"""A batch of JAX envs stepped from Python like an envpool pool, for a loaded policy.

`sebulba.load_policy(workdir).make_envs(n, seed)` returns envpool envs for a Sebulba run;
for an Anakin run (a `SUITE:TASK` env) it returns `HostJaxEnvs`, which offers the same
loop: `reset() -> (obs, info)` and `step(actions) -> (obs, rewards, terminations,
truncations, info)`, numpy in and out, with envpool's auto-reset convention
(`env_api.step_envs`: the step after an episode's end is the reset, ignoring the action).
Env i is reset with the key of (seed, 0, i) and stepped with the keys of (seed, t, i) from
the evaluation env stream, the keys `sebulba.evaluate` plays JAX episodes with, so two
batches built with the same seed step alike.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from sebulba import random_streams
from sebulba.anakin.env_api import BatchOfEnvs, reset_envs, step_envs


class HostJaxEnvs:
    """`num_envs` copies of a JAX env on one device, stepped from Python.

    Attributes:
      spec: the env's `EnvSpec` (observations and actions as the policy sees them).
      num_envs: the batch size.
    """

    def __init__(self, env: BatchOfEnvs, num_envs: int, seed: int = 0, device=None):
        self.spec = env.spec
        self.num_envs = num_envs
        self._seed = seed
        self._device = device or jax.devices()[0]
        self._ids = jax.device_put(np.arange(num_envs, dtype=np.int32), self._device)
        self._reset = jax.jit(functools.partial(self._reset_fn, env, seed))
        self._step = jax.jit(functools.partial(self._step_fn, env, seed))
        self._envs = None
        self._steps = 0

    @staticmethod
    def _reset_fn(env, seed, ids):
        return reset_envs(env, random_streams.evaluation_env_keys(seed, jnp.int32(0), ids))

    @staticmethod
    def _step_fn(env, seed, envs, actions, step, ids):
        keys = random_streams.evaluation_env_keys(seed, step, ids)
        return step_envs(env, envs, actions, keys)

    def reset(self) -> tuple[Any, dict]:
        """Starts every env's episode; -> (observations [n, ...] as numpy, {})."""
        self._envs = self._reset(self._ids)
        self._steps = 0
        return jax.device_get(self._envs.obs), {}

    def step(self, actions) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """One step of every env with `actions` [n, *action.shape] (numpy or jax).

        Returns (observations, rewards, terminations, truncations, info) as numpy, info
        holding each env's `env_id` and, where a step ends an episode, its return and
        length (`episode_return`, `episode_length`; 0 elsewhere).
        """
        if self._envs is None:
            raise RuntimeError("call reset() before step()")
        self._steps += 1
        actions = jax.device_put(np.asarray(actions), self._device)
        self._envs, stepped = self._step(self._envs, actions, jnp.int32(self._steps), self._ids)
        obs, stepped = jax.device_get((self._envs.obs, stepped))
        info = {
            "env_id": np.arange(self.num_envs, dtype=np.int32),
            "episode_return": stepped.episode_return,
            "episode_length": stepped.episode_length,
        }
        return obs, stepped.reward, stepped.terminated, stepped.truncated, info

    def close(self) -> None:
        """Nothing to release (envpool pools have a close(); this keeps the same loop)."""
