"""A trained policy to act with: `policy = sebulba.load_policy(workdir)`, `policy(obs)`.

    policy = sebulba.load_policy("runs/ppo_cartpole")          # newest checkpoint, sampling
    policy = sebulba.load_policy("runs/pong", checkpoint=100, greedy=True)
    actions = policy(obs)  # obs: a batch [B, ...] as the run's envpool envs return it

The run's config (`workdir/config.json`), its agent and network, and the parameters of a
checkpoint all come from the workdir; the policy runs jitted on one device, whatever
layout trained it. `sebulba.evaluate` loads its policy through this module too.

Sampling is deterministic: the actions of call n depend only on the observations, the
parameters, the seed and n (`inference_keys`), so two fresh loads act alike. Greedy
acting takes the agent's `act_greedy` (the policy's most likely action).

A recurrent policy (`agent.core="lstm"`) carries its state from call to call, one row
per observation row; it restarts from the initial carry when the batch size changes,
on `policy.reset()`, and for the rows flagged by `episode_starts`.
"""

from __future__ import annotations

import functools
import json
import os

import jax
import ml_collections
import numpy as np

from sebulba import checkpoint as ckpt_lib
from sebulba import envs as envs_lib
from sebulba import spaces, tasks
from sebulba.agents import resolve_agent
from sebulba.agents.api import Agent, EnvSpec, Params, reset_carry
from sebulba.config import base_config
from sebulba.errors import ConfigError
from sebulba.random_streams import inference_keys
from sebulba.sizes import derive_sizes


class PolicyError(Exception):
    """A workdir's policy cannot be loaded or called; the message says why in one line."""


def load_run_config(workdir: str) -> ml_collections.ConfigDict:
    """A run's resolved config, set up to act on one device whatever layout trained it.

    Raises:
      PolicyError: `workdir` holds no config.json.
    """
    path = os.path.join(workdir, "config.json")
    if not os.path.exists(path):
        raise PolicyError(f"{path} not found: {workdir} is not a sebulba workdir")
    with open(path, encoding="utf-8") as f:
        config = with_current_defaults(json.load(f))
    config.mesh.actor_device_ids = (0,)
    config.mesh.learner_device_ids = (0,)
    return config


def with_current_defaults(stored: dict) -> ml_collections.ConfigDict:
    """A stored config, with every key added since it was written at its default.

    A run written by an older sebulba lacks newer keys (e.g. `env.use_fire_reset`); their
    defaults keep the behaviour that run had, so its checkpoints stay loadable.
    """
    try:
        config = base_config(resolve_agent(stored["agent"]["name"]).get_config())
    except (KeyError, ConfigError):  # No usable agent name: the stored keys are all we have.
        return ml_collections.ConfigDict(stored)
    _overlay(config, stored)
    return config


def _overlay(config: ml_collections.ConfigDict, stored: dict) -> None:
    """Writes `stored` over `config`, keeping the keys `stored` lacks."""
    with config.unlocked():  # Keys an older or custom agent had and this one lacks stay.
        for name, value in stored.items():
            default = config.get(name)
            if isinstance(value, dict) and isinstance(default, ml_collections.ConfigDict):
                _overlay(default, value)
            elif isinstance(value, list) and isinstance(default, tuple):
                config[name] = tuple(value)  # JSON stores tuples as lists.
            else:
                config[name] = value


class Policy:
    """A checkpoint's policy, jitted on one device.

    Attributes:
      config: the run's config (with a one-device mesh).
      env_spec: the observations and actions the policy expects.
      agent: the agent the run trained.
      params: the policy parameters of the checkpoint, on `device`.
      checkpoint: the update after which the checkpoint was saved.
      checkpoint_path: its directory.
      global_step: env steps the run had taken at that checkpoint.
      greedy: whether actions are the most likely ones instead of samples.
      seed: the seed of the sampling keys (`inference_keys`).
      device: where the policy runs.
    """

    def __init__(
        self,
        *,
        config: ml_collections.ConfigDict,
        env_spec: EnvSpec,
        agent: Agent,
        params: Params,
        restored: ckpt_lib.Restored,
        greedy: bool,
        seed: int,
        device: jax.Device,
    ):
        self.config, self.env_spec, self.agent, self.params = config, env_spec, agent, params
        self.checkpoint = restored.step
        self.checkpoint_path = restored.path
        self.global_step = restored.meta.get("global_step")
        self.greedy, self.seed, self.device = greedy, seed, device
        self.calls = 0  # Calls of `__call__` so far: the step index of the next keys.
        self._actions = jax.jit(functools.partial(_actions, agent, greedy, seed))
        self._carry = None  # The recurrent state of the current batch's rows, on `device`.

    def reset(self) -> None:
        """Starts every row's episode anew: the next call begins from the initial carry."""
        self._carry = None

    def __call__(self, obs: np.ndarray, episode_starts: np.ndarray | None = None) -> np.ndarray:
        """Actions for a batch of observations; call n samples with keys (seed, n, row).

        Args:
          obs: a batch of observations, as the run's envpool envs return them: an array
            [B, ...] or a dict of them, shaped like `env_spec.observation`.
          episode_starts: [B] bool, rows whose episode begins with `obs` (a recurrent
            policy restarts their carry); None: no row does.

        Returns:
          [B, *env_spec.action.shape] actions (numpy), as sampled: pass them through
          `env_spec.action.to_env` to step an env (it clips Box actions to the bounds).
        """
        # Counted on a converted copy: `actions` converts the observations as they came.
        num_rows = len(jax.tree.leaves(self._batch(obs))[0])
        row_ids = np.arange(num_rows, dtype=np.int32)
        actions = self.actions(obs, step=self.calls, row_ids=row_ids, episode_starts=episode_starts)
        self.calls += 1
        return actions

    def actions(
        self,
        obs: np.ndarray,
        *,
        step: int,
        row_ids: np.ndarray,
        episode_starts: np.ndarray | None = None,
    ) -> np.ndarray:
        """Actions with explicit key indices: row i samples with key (seed, step, row_ids[i]).

        Args:
          obs: a batch [B, ...] of observations (see `__call__`).
          step: the step index of the keys.
          row_ids: [B] int32 stable row ids (e.g. episode indices).
          episode_starts: [B] bool rows whose episode begins with `obs` (see `__call__`).

        Returns:
          [B, *env_spec.action.shape] actions (numpy).

        Raises:
          PolicyError: `obs` is not a batch of this policy's observations.
        """
        obs = self._batch(obs)
        num_rows = len(jax.tree.leaves(obs)[0])
        starts = np.zeros(num_rows, bool) if episode_starts is None else episode_starts
        if self._carry is None or _carry_rows(self._carry, num_rows) != num_rows:
            self._carry = jax.device_put(self.agent.new_carry(num_rows), self.device)
        inputs = (obs, np.asarray(starts, bool), np.int32(step), np.asarray(row_ids, np.int32))
        self._carry, actions = self._actions(
            self.params, self._carry, *jax.device_put(inputs, self.device)
        )
        return np.asarray(actions)

    def _batch(self, obs):
        """`obs` as a batch of the policy's observations, converted as the actors do."""
        spec = self.env_spec.observation
        expected = spaces.map_observation(lambda s: ("B", *s.shape), spec)
        try:
            obs = spaces.host_observation(spec, obs)
            shapes = spaces.map_observation(lambda s, x: ("B", *x.shape[1:]), spec, obs)
            rows = {x.shape[0] for x in jax.tree.leaves(obs) if x.ndim}
            batched = all(np.ndim(x) > 0 for x in jax.tree.leaves(obs)) and len(rows) == 1
        except (ValueError, TypeError):
            shapes, batched = None, False
        if not batched or shapes != expected:
            got = jax.tree.map(np.shape, spaces.dict_tree(obs))
            raise PolicyError(
                f"obs of shape {got} is not a batch {expected} of "
                f"{self.env_spec.env_id} observations"
            )
        return obs


def _carry_rows(carry, num_rows: int) -> int:
    """Rows of a carry; an empty (feed-forward) carry fits any batch."""
    leaves = jax.tree.leaves(carry)
    return leaves[0].shape[0] if leaves else num_rows


def _actions(agent: Agent, greedy: bool, seed: int, params, carry, obs, starts, step, row_ids):
    """(carry, actions [B, ...]) of `agent`: its `act_greedy`, or `act` with `inference_keys`."""
    carry = reset_carry(carry, starts, agent.new_carry(row_ids.shape[0]))
    if greedy:
        return agent.recurrent_act_greedy(params, carry, obs)
    keys = inference_keys(seed, step, row_ids)
    carry, actions, _ = agent.recurrent_act(params, carry, obs, keys)
    return carry, actions


def load_policy(
    workdir: str,
    checkpoint: int | None = None,
    greedy: bool = False,
    *,
    seed: int | None = None,
    device: jax.Device | None = None,
) -> Policy:
    """Loads the policy of a run's checkpoint: `actions = load_policy(workdir)(obs)`.

    Args:
      workdir: the run's `--workdir` (holds config.json and checkpoints/).
      checkpoint: the update of the checkpoint to load; None: the newest valid one.
      greedy: act with the most likely action instead of sampling.
      seed: seeds the sampling keys; None: the run's `seed`.
      device: where to run; None: the first local device.

    Returns:
      A callable `Policy`: `policy(obs [B, ...]) -> actions [B, ...]`.

    Raises:
      PolicyError: in one line: not a workdir, no such checkpoint, or the agent cannot be
        rebuilt (or has no `act_greedy` when `greedy`).
    """
    workdir = os.path.abspath(workdir)
    config = load_run_config(workdir)
    directory = ckpt_lib.checkpoints_dir(workdir)
    available = ckpt_lib.list_steps(directory)
    if not available:
        raise PolicyError(f"no checkpoint in {directory}: nothing to evaluate")
    if checkpoint is not None and checkpoint not in available:
        raise PolicyError(
            f"no checkpoint {checkpoint} in {directory}: available checkpoints are "
            f"{', '.join(map(str, available))}"
        )
    device = device or jax.local_devices()[0]
    # The learner state's shapes may follow the global env count (e.g. the per-env
    # returns of reward scaling), which counts the processes that trained the run.
    meta = ckpt_lib.read_meta(directory, available[-1] if checkpoint is None else checkpoint)
    try:
        # Every task of a multi-task run shares the first task's spaces (checked when it
        # trained); `env.id` means nothing when `env.ids` names the tasks.
        first_task = tasks.task_env_config(config.env, tasks.task_ids(config.env)[0])
        probe = envs_lib.make_envs(first_task, 1, seed=0)
        env_spec = envs_lib.env_spec_of(first_task, probe)
        probe.close()
        sizes = derive_sizes(config, num_processes=meta.get("num_processes", 1))
        agent = resolve_agent(config.agent.name).make(config, env_spec, sizes)
    except ConfigError as error:
        raise PolicyError(f"cannot rebuild the agent from config.json: {error}") from None
    if greedy and agent.act_greedy is None:
        raise PolicyError(
            f"agent {config.agent.name!r} defines no act_greedy: it can only sample "
            "(load without greedy)"
        )
    shapes = jax.eval_shape(agent.init, jax.random.key(config.seed))
    abstract = ckpt_lib.abstract_replicated(shapes, jax.sharding.SingleDeviceSharding(device))
    try:
        restored = ckpt_lib.restore(directory, abstract, step=checkpoint)
    except (ValueError, ConfigError) as error:
        raise PolicyError(str(error)) from None
    if restored is None:
        raise PolicyError(f"no valid checkpoint in {directory} (see the warnings above)")
    return Policy(
        config=config,
        env_spec=env_spec,
        agent=agent,
        params=agent.policy_params(restored.state),
        restored=restored,
        greedy=greedy,
        seed=config.seed if seed is None else seed,
        device=device,
    )
