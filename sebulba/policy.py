"""A trained policy to act with: `policy = sebulba.load_policy(workdir)`, `policy(obs)`.

    policy = sebulba.load_policy("runs/ppo_cartpole")          # newest checkpoint, sampling
    policy = sebulba.load_policy("runs/pong", checkpoint=100, greedy=True)
    actions = policy(obs)  # obs: a batch [B, ...] as the run's envs return it

The run's config (`workdir/config.json`), its agent and network, and the parameters of a
checkpoint all come from the workdir; the policy runs jitted on one device, whatever
layout trained it. `sebulba.evaluate` loads its policy through this module too.

Sampling is deterministic: the actions of call n depend only on the observations, the
parameters, the seed and n (`inference_keys`), so two fresh loads act alike. Greedy
acting takes the agent's `act_greedy` (the policy's most likely action).

`policy.make_envs(num_envs, seed)` builds envpool envs with the run's env settings (the
Atari action space and frame stack included), the envs the policy expects;
`policy.check_env(envs)` refuses, in one line, envs built otherwise whose observations or
actions differ from the policy's, and `policy(obs)` refuses observations of another shape
or dtype kind, or other dict keys.

A recurrent policy (`agent.core="lstm"`) carries its state from call to call, one row
per observation row; it restarts from the initial carry when the batch size changes,
on `policy.reset()`, and for the rows flagged by `episode_starts`.

A run on a JAX-native env (Anakin, `env.id` = `SUITE:TASK`) loads alike, its spec read
from the `JaxEnv` instead of an envpool pool: `policy(obs)` takes the observations that
env returns, `policy.jax_env` is that env (`reset(key)`, `step(state, action, key)`;
`sebulba.anakin.env_api.reset_envs` and `step_envs` run a batch of them), and
`policy.make_envs`, which builds envpool envs, refuses in one line.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

import jax
import ml_collections
import numpy as np

from sebulba import checkpoint as ckpt_lib
from sebulba.agents import resolve_agent
from sebulba.agents.api import Agent, EnvSpec, Params, reset_carry
from sebulba.anakin import suites as anakin_suites
from sebulba.anakin.env_api import JaxEnv
from sebulba.anakin.host_envs import HostJaxEnvs
from sebulba.config import base_config
from sebulba.config.run_plan import plan
from sebulba.environments import envpool_pools, envpool_registry, spaces, system_libraries, tasks
from sebulba.errors import ConfigError
from sebulba.random_streams import inference_keys
from sebulba.runtime import workdir as workdir_lib


class PolicyError(Exception):
    """A workdir's policy cannot be loaded or called; the message says why in one line."""


def load_run_config(workdir: str) -> ml_collections.ConfigDict:
    """A run's resolved config, set up to act on one device whatever layout trained it
    (and to log nowhere: a machine without wandb loads a run that logged to it).

    Raises:
      PolicyError: `workdir` holds no config.json, or one that is not a run's config.
    """
    path = os.path.join(workdir, "config.json")
    if not os.path.exists(path):
        hint = workdir_lib.not_a_workdir_hint(workdir)
        raise PolicyError(f"{path} not found: {workdir} is not a sebulba workdir{hint}")
    try:
        with open(path, encoding="utf-8") as f:
            stored = json.load(f)
        if not isinstance(stored, dict):
            raise TypeError(f"a JSON {type(stored).__name__}, not an object")
        config = with_current_defaults(stored)
        config.mesh.actor_device_ids = (0,)
        config.mesh.learner_device_ids = (0,)
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        # A damaged file (json's errors are ValueErrors), or one without a run's sections.
        raise PolicyError(
            f"{path} is not a run's config ({type(error).__name__}: {error})"
        ) from None
    if "log" in config:
        config.log.wandb = False
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
      task_ids: the tasks the run trained on (one, or those of `env.ids`).
      env_observation: the observation spec of the run's envs as they return it, before
        `env.observation_indices` selects components.
      jax_env: a run on a JAX-native env: that env, as the suite describes it (its spec
        before `env.observation_indices`); None for envpool tasks.
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
        env_observation: Any = None,
        jax_env: JaxEnv | None = None,
    ):
        self.config, self.env_spec, self.agent, self.params = config, env_spec, agent, params
        self.checkpoint = restored.step
        self.checkpoint_path = restored.path
        self.global_step = restored.meta.get("global_step")
        self.greedy, self.seed, self.device = greedy, seed, device
        self.task_ids = tasks.task_ids(config.env)
        self.env_observation = env_spec.observation if env_observation is None else env_observation
        self.jax_env = jax_env
        self.calls = 0  # Calls of `__call__` so far: the step index of the next keys.
        self._actions = jax.jit(functools.partial(policy_actions, agent, greedy, seed))
        self._carry = None  # The recurrent state of the current batch's rows, on `device`.

    def make_envs(
        self, num_envs: int, seed: int = 0, *, task: str | None = None, render: bool = False
    ):
        """envpool envs this policy acts in: the run's env settings, `seed + i` for env i.

        Args:
          num_envs: envs stepped together (a batch of `num_envs` observations per step).
          seed: seed of env 0.
          task: for a joint run (`env.ids`), the task to play, one of `task_ids`; a
            single-task run needs none.
          render: enable `envs.render(env_ids)` (see
            `sebulba.environments.envpool_pools.make_envs`).

        For a run on a JAX env (Anakin) the envs are `sebulba.anakin.host_envs.HostJaxEnvs`
        on the policy's device, stepped from Python with the same loop (`render` is
        envpool's only).

        Raises:
          PolicyError: a joint run without `task`, a task it did not train on, or
            `render` for a JAX env.
        """
        if task is None and len(self.task_ids) > 1:
            raise PolicyError(
                f"this run trained on {len(self.task_ids)} tasks: pass task= one of "
                f"{', '.join(self.task_ids)}"
            )
        if task is not None and task not in self.task_ids:
            raise PolicyError(
                f"task {task!r} is not one this run trained on: {', '.join(self.task_ids)}"
            )
        env_config = tasks.task_env_config(self.config.env, task or self.task_ids[0])
        if envpool_registry.is_jax_env(env_config.id):
            if render:
                raise PolicyError(
                    f"{env_config.id} is a JAX env: render=True draws envpool envs only"
                )
            jax_env = anakin_suites.make_env(env_config.id)
            return HostJaxEnvs(jax_env, num_envs, seed=seed, device=self.device)
        try:
            return envpool_pools.make_envs(env_config, num_envs, seed=seed, render=render)
        except (ConfigError, system_libraries.RenderingError) as error:
            raise PolicyError(str(error)) from None

    def check_env(self, envs) -> None:
        """Raises PolicyError, in one line, unless `envs` observe and act as the policy's.

        Compares the spaces of an envpool pool (or any env with gymnasium
        `observation_space` and `action_space`) with the run's: e.g. Breakout-v5 built
        with envpool's default 4 actions for a policy trained on the full 18.
        """
        task_id = self.env_spec.env_id
        try:
            observation = spaces.observation_spec_of(envs.observation_space, task_id)
            action = spaces.action_spec_of(envs.action_space, task_id)
        except (AttributeError, ConfigError) as error:
            raise PolicyError(f"envs cannot be checked against the policy: {error}") from None
        for what, got, want in (
            ("observations", observation, self.env_observation),
            ("actions", action, self.env_spec.action),
        ):
            if got != want:
                raise PolicyError(
                    f"the envs' {what} {_describe(got)} differ from the policy's "
                    f"{_describe(want)} ({_settings_hint(self.config.env)}): build them "
                    "with policy.make_envs(num_envs, seed)"
                )

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
        given = spaces.dict_tree(obs)
        try:
            kinds = spaces.map_observation(_same_kind, spec, given)
            obs = spaces.host_observation(spec, given)
            shapes = spaces.map_observation(lambda s, x: ("B", *x.shape[1:]), spec, obs)
            rows = {x.shape[0] for x in jax.tree.leaves(obs) if x.ndim}
            batched = all(np.ndim(x) > 0 for x in jax.tree.leaves(obs)) and len(rows) == 1
        except (ValueError, TypeError):
            shapes, batched, kinds = None, False, [True]
        if not batched or shapes != expected:
            got = jax.tree.map(np.shape, given)
            raise PolicyError(
                f"obs of shape {got} is not a batch {expected} of "
                f"{self.env_spec.env_id} observations"
            )
        if not all(jax.tree.leaves(kinds)):
            got = jax.tree.map(lambda x: np.asarray(x).dtype.name, given)
            want = spaces.map_observation(lambda s: s.dtype, spec)
            raise PolicyError(
                f"obs of dtype {got} cannot be {self.env_spec.env_id} observations of "
                f"dtype {want}: build the envs with policy.make_envs(num_envs, seed)"
            )
        return obs


def _same_kind(spec: spaces.ArraySpec, x) -> bool:
    """Whether observations of x's dtype convert to the spec's without changing kind.

    float64 -> float32 and int64 -> int32 are what envpool returns and `host_observation`
    converts; floats for uint8 screens, say, come from another env or another wrapper.
    """
    return bool(np.can_cast(np.asarray(x).dtype, spec.dtype, casting="same_kind"))


def _describe(spec) -> str:
    """A spec in a few words: "uint8 (4, 84, 84)", "Discrete(18)", or a dict of them."""
    if isinstance(spec, spaces.ArraySpec):
        return f"{spec.dtype} {spec.shape}"
    if isinstance(spec, dict):
        return "{" + ", ".join(f"{k}: {_describe(v)}" for k, v in spec.items()) + "}"
    if isinstance(spec, spaces.Discrete):
        return f"Discrete({spec.num_actions})"
    if isinstance(spec, spaces.MultiDiscrete):
        return f"MultiDiscrete({list(spec.nvec)})"
    return f"Box{spec.shape}"


def _settings_hint(env_config: ml_collections.ConfigDict) -> str:
    """The env settings of the run that shape its spaces, for a mismatch message."""
    ids = tasks.task_ids(env_config)
    if not envpool_registry.is_atari(ids[0]):
        return f"the run trained on {', '.join(ids)}"
    return (
        f"the run trained on {', '.join(ids)} with env.full_action_space="
        f"{env_config.full_action_space}, env.frame_stack={env_config.frame_stack}"
    )


def _carry_rows(carry, num_rows: int) -> int:
    """Rows of a carry; an empty (feed-forward) carry fits any batch."""
    leaves = jax.tree.leaves(carry)
    return leaves[0].shape[0] if leaves else num_rows


def policy_actions(
    agent: Agent, greedy: bool, seed: int, params, carry, obs, starts, step, row_ids
):
    """(carry, actions [B, ...]) of `agent`: its `act_greedy`, or `act` with `inference_keys`.

    The pure function a `Policy` jits; evaluation of a JAX env calls it inside its
    episode program (`sebulba.anakin.episodes`). The carry of the rows in `starts` is
    reset first (`reset_carry`); row i samples with key (seed, step, row_ids[i]).
    """
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
      PolicyError: in one line: not a workdir, no such checkpoint, a config.json that
        fails the run's checks (`sebulba.config.run_plan`), or an agent without
        `act_greedy` when `greedy`.
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
        # The run's own validation pass, laid out on the one device the policy acts on.
        run = plan(config, [device], num_processes=meta.get("num_processes", 1))
        # Every task of a multi-task run shares the first task's spaces (checked by the
        # plan); `env.id` means nothing when `env.ids` names the tasks.
        first_task = tasks.task_env_config(config.env, tasks.task_ids(config.env)[0])
        env_observation, jax_env = _env_observation(first_task)
    except ConfigError as error:
        raise PolicyError(f"cannot rebuild the agent from config.json: {error}") from None
    env_spec, agent = run.env_spec, run.agent
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
        env_observation=env_observation,
        jax_env=jax_env,
    )


def _env_observation(env_config: ml_collections.ConfigDict) -> tuple[Any, JaxEnv | None]:
    """(one task's observations as its envs return them, the JaxEnv or None).

    The spec the agent sees may differ (`env.observation_indices`, an action mask): a
    JAX env describes itself; an envpool task is probed with a one-env pool.
    """
    if envpool_registry.is_jax_env(env_config.id):
        jax_env = anakin_suites.make_env(env_config.id)
        return jax_env.spec.observation, jax_env
    probe = envpool_pools.make_envs(env_config, 1, seed=0)
    try:
        return spaces.observation_spec_of(probe.observation_space, env_config.id), None
    finally:
        probe.close()
