"""Sebulba: actor threads, the learner loop and the double-buffered handoff between them.

Implements the Sebulba architecture of Hessel et al. (2021, "Podracer architectures for
scalable reinforcement learning") with the deterministic one-step lag of Cleanba (Huang
et al. 2023): actor threads step envpool environments on the host CPUs and run batched
policy inference on actor devices, and a learner thread runs one jitted update over the
learner mesh, which spans the learner devices of every process. `Pipeline` runs it;
`rollout_struct` gives the global rollout's shapes and shardings and `lower_update` the
update lowered for the learner mesh. What the actor threads are made of (the policy step,
the scan loop, the rollout check, the handoff's primitives) lives in `sebulba.actors`;
with the Anakin runner (`sebulba.anakin`) it shares the agents, the `Rollout` contract,
the mesh, the lag schedule (`sebulba.lag_schedule`), the policy step, the config
sections, checkpoints, metrics and the workdir's outputs.

The schedule: learner update k consumes rollout k and produces parameter version k + 1;
rollout k is collected with version `max(1, k - policy_lag)`. Which version produced
which data is fixed by the schedule, never by timing: an actor waits for exactly the
version it needs, and the learner checks the version of every rollout it consumes.

Double buffering: each actor thread hands over at most one finished rollout while it
fills the next, and each actor device holds at most two parameter versions (the one in
use and the one arriving). With `policy_lag` L > 1 the buffers deepen to what the schedule
lets the actors run ahead: L finished rollouts per thread and L + 1 versions per device.
Only the learner thread (the caller of `Pipeline.run`) issues work on the learner mesh;
actor threads touch only their own devices.

Recurrent agents: each actor thread keeps its envs' carry on its actor device, from step
to step and rollout to rollout, resets it (`reset_carry`) where an observation starts an
episode, and stores the carry that obs[0] was processed with in `Rollout.initial_carry`.
Feed-forward agents go through the same code with a carry of `()`.

Any exception in any thread stops every thread and is re-raised by `Pipeline.run`.
"""

from __future__ import annotations

import functools
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from sebulba import fused_step
from sebulba.actors import rollout_check, scan_actor
from sebulba.actors.actor_step import actor_step
from sebulba.actors.consistency_check import ConsistencyCheck
from sebulba.actors.handoff import (
    ParamsStore,
    RunControl,
    RunStopped,
    StartGate,
    get_or_stop,
    put_or_stop,
)
from sebulba.actors.rollouts import (
    ActorRollout,
    EnvGroup,
    HostRollout,
    ScanCollector,
    ScanRollout,
    in_env_order,
)
from sebulba.agents.api import (
    Agent,
    EnvSpec,
    Rollout,
    rollout_env_axes,
    rollout_partition_specs,
)
from sebulba.config.sizes import Sizes
from sebulba.environments import spaces, thread_envs
from sebulba.environments.episodes import EpisodeTracker, learning_rewards
from sebulba.errors import InvalidRolloutError
from sebulba.lag_schedule import lagged_versions, required_policy_version
from sebulba.mesh import DeviceLayout
from sebulba.preflight.memory import update_compiler_options
from sebulba.runtime.distributed import EpisodeGatherer
from sebulba.update_report import UpdateReport


def copy_to_device(tree, device: jax.Device, *, may_alias: bool | None = None):
    """`jax.device_put(tree, device)`, also from another platform's devices.

    JAX copies an array between two backends (a GPU and the host's CPU devices, with
    `mesh.actor_platform="cpu"`) through host memory, and its transfer guard counts that
    hidden fetch as an implicit device-to-host transfer, which the pipeline's steady
    state disallows. Such leaves are fetched explicitly first (`jax.device_get`, which
    the guard allows), so it still catches every transfer nobody asked for.
    """

    def fetch_if_foreign(x):
        if isinstance(x, jax.Array) and any(d.platform != device.platform for d in x.devices()):
            return jax.device_get(x)
        return x

    return jax.device_put(jax.tree.map(fetch_if_foreign, tree), device, may_alias=may_alias)


def rollout_struct(
    agent: Agent, env_spec: EnvSpec, sizes: Sizes, layout: DeviceLayout, state
) -> Rollout:
    """Shapes, dtypes and shardings of the global rollout (for AOT compilation)."""
    T, B = sizes.num_steps, sizes.num_envs
    params = jax.eval_shape(agent.policy_params, state)
    obs = spaces.observation_struct(env_spec.observation, B)
    keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), B))
    carry = jax.eval_shape(lambda: agent.new_carry(B))
    _, _, outputs = jax.eval_shape(agent.recurrent_act, params, carry, obs, keys)
    action = env_spec.action
    example = Rollout(
        obs=spaces.observation_struct(env_spec.observation, T + 1, B),
        actions=jax.ShapeDtypeStruct((T, B, *action.shape), np.dtype(action.dtype)),
        rewards=jax.ShapeDtypeStruct((T, B), np.float32),
        terminations=jax.ShapeDtypeStruct((T, B), np.bool_),
        truncations=jax.ShapeDtypeStruct((T, B), np.bool_),
        valid=jax.ShapeDtypeStruct((T, B), np.bool_),
        policy_outputs=jax.tree.map(
            lambda v: jax.ShapeDtypeStruct((T + 1, *v.shape), v.dtype), outputs
        ),
        env_ids=jax.ShapeDtypeStruct((B,), np.int32),
        initial_carry=carry,
    )
    shardings = jax.tree.map(layout.sharding, rollout_partition_specs(example))
    return jax.tree.map(
        lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), example, shardings
    )


def lower_update(agent: Agent, layout: DeviceLayout, state, rollout: Rollout):
    """The learner update lowered for the learner mesh: the state placed as the agent's
    `partition_specs` say (replicated by default) and donated, the rollout sharded along
    its env axis (`rollout` holds its shapes and shardings)."""
    replicated = layout.replicated
    state_shardings = agent.state_shardings(state, layout.sharding)
    jitted = jax.jit(
        agent.update,
        in_shardings=(state_shardings, jax.tree.map(lambda s: s.sharding, rollout)),
        out_shardings=(state_shardings, replicated),
        donate_argnums=0,
    )
    return jitted.lower(state, rollout)


def lagged_to_publish(first_update: int, policy_lag: int, lagged) -> list[tuple[int, Any]]:
    """(version, params) of the lagged versions older than `first_update` that a run
    starting there hands its actors, each once; `lagged` holds
    `lagged_versions(first_update, policy_lag)` (None: a fresh run, which needs none).

    Raises:
      ValueError: a resumed run's lagged parameters are missing or of the wrong count.
    """
    versions = lagged_versions(first_update, policy_lag)
    needed = sorted({v for v in versions if v < first_update})
    if not needed:
        return []
    if lagged is None or len(lagged) != policy_lag:
        raise ValueError(
            f"resuming at update {first_update} with policy_lag {policy_lag} needs the "
            f"parameters of versions {needed}"
        )
    by_version = dict(zip(versions, lagged, strict=True))
    return [(v, by_version[v]) for v in needed]


class Pipeline:
    """Runs actor threads and the learner loop for one training run.

    Args:
      agent: the agent's pure functions.
      layout: actor devices and learner mesh.
      sizes: derived sizes of the run.
      envs_per_thread: one envpool pool per actor thread, created by the caller (main
        thread), in thread order.
      env_spec: the pools' spaces; the rollout's arrays are allocated, converted and
        sharded from it.
      seed: the run's seed (action sampling keys derive from it).
      policy_lag: 0 (synchronous), 1 (Cleanba's one-step lag) or L: rollout k is
        collected with version max(1, k - L).
      clip_rewards: clip learning rewards to their sign.
      learner_delay_s / actor_delay_s: injected delays (reproducibility tests).
      actor_delay_jitter_s: each rollout's actor delay also gets a uniform [0, this)
        draw, seeded by (seed, process, thread, update): actors whose speed jitters (the lag
        benchmark), the same jitter in every rerun; it changes timing only.
      transfer_guard: JAX transfer guard level for steady state ("disallow" proves
        every host/device transfer in the loop is explicit).
      consistency_checks: also re-derive every rollout from its records before the
        handoff (`sebulba.actors.consistency_check`; `debug.consistency_checks`).
      fused: run each update with the next rollout as one program (`sebulba.fused_step`;
        the caller has checked that the run allows it).
      actor_loop: "step" (Python enters every env step) or "scan" (each rollout is one
        XLA program, `sebulba.actors.scan_actor`; the caller has checked that the envs
        allow it). Both produce the same data.
    """

    def __init__(
        self,
        agent: Agent,
        layout: DeviceLayout,
        sizes: Sizes,
        envs_per_thread: Sequence[Any],
        *,
        env_spec: EnvSpec,
        seed: int,
        policy_lag: int,
        clip_rewards: bool,
        learner_delay_s: float = 0.0,
        actor_delay_s: float = 0.0,
        actor_delay_jitter_s: float = 0.0,
        transfer_guard: str = "disallow",
        consistency_checks: bool = False,
        actor_loop: str = "step",
        fused: bool = False,
    ):
        if actor_loop not in ("step", "scan"):
            raise ValueError(f"actor_loop must be 'step' or 'scan', got {actor_loop!r}")
        self.agent = agent
        self.layout = layout
        self.sizes = sizes
        self.replace_envs(envs_per_thread)
        self.env_spec = env_spec
        self.seed = seed
        self.policy_lag = policy_lag
        self.clip_rewards = clip_rewards
        self.learner_delay_s = learner_delay_s
        self.actor_delay_s = actor_delay_s
        self.actor_delay_jitter_s = actor_delay_jitter_s
        self.transfer_guard = transfer_guard
        self.consistency_checks = consistency_checks
        self.actor_loop = actor_loop
        self.fused = fused
        self._rollout_check = rollout_check.RolloutCheck(env_spec)
        self._actor_step = jax.jit(self._actor_step_fn)
        self._stack_outputs = jax.jit(self._stack_outputs_fn, static_argnums=1)
        self._split_carry = jax.jit(self._split_carry_fn, static_argnums=1)
        self._concat_pieces = jax.jit(self._concat_pieces_fn)
        self._compiled_update = None

    def replace_envs(self, envs_per_thread: Sequence[Any]) -> None:
        """Steps these pools (the first ones, or a resumed run's, made for its first update)."""
        if len(envs_per_thread) != self.sizes.num_actor_threads:
            raise ValueError("one env pool per actor thread is required")
        self.envs_per_thread = list(envs_per_thread)

    # ----- actor side -------------------------------------------------------------

    def _policy_step_fn(self, params, carry, obs, starts, env_ids, step_index):
        """-> (the carry obs was processed with, the next carry, actions, outputs)."""
        return self._actor_step_fn(params, carry, obs, starts, env_ids, step_index)[:4]

    def _actor_step_fn(self, params, carry, obs, starts, env_ids, step_index):
        return actor_step(self.agent, self.seed, params, carry, obs, starts, env_ids, step_index)

    @staticmethod
    def _split_carry_fn(carries_per_group: list, num_slices: int) -> list:
        """Per group, carries [n_g, ...] -> per learner slice [b, ...]."""
        carry = jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=0), *carries_per_group)
        return [
            jax.tree.map(lambda x, i=i: jnp.split(x, num_slices, axis=0)[i], carry)
            for i in range(num_slices)
        ]

    @staticmethod
    def _stack_outputs_fn(outputs_per_group: list[list[dict]], num_slices: int) -> list[dict]:
        """Per group, T + 1 steps of outputs [n_g, ...] -> per learner slice [T + 1, b, ...]."""
        stacked = jax.tree.map(
            lambda *xs: jnp.concatenate(xs, axis=1),
            *[jax.tree.map(lambda *xs: jnp.stack(xs), *group) for group in outputs_per_group],
        )
        return [
            jax.tree.map(lambda x, i=i: jnp.split(x, num_slices, axis=1)[i], stacked)
            for i in range(num_slices)
        ]

    def thread_env_offset(self, thread_index: int) -> int:
        """Global index of the first env of this process's actor thread."""
        threads_before = jax.process_index() * self.sizes.num_actor_threads + thread_index
        return threads_before * self.sizes.envs_per_thread

    def thread_env_ids(self, thread_index: int) -> np.ndarray:
        """[envs_per_thread] int32 global indices of the envs of this process's thread."""
        first = self.thread_env_offset(thread_index)
        return np.arange(first, first + self.sizes.envs_per_thread, dtype=np.int32)

    def piece_env_ids(self, thread_index: int) -> list[jax.Array]:
        """Per local learner device, the [b] int32 global env ids of the thread's piece, there."""
        learner_devices = self.layout.local_learner_devices
        slices = np.split(self.thread_env_ids(thread_index), len(learner_devices))
        return [jax.device_put(ids, d) for ids, d in zip(slices, learner_devices, strict=True)]

    def check_rollout(self, pieces: Sequence[Rollout], expected_env_ids) -> str | None:
        """Where a thread's rollout pieces break the spec (`RolloutCheck.problems`); None if
        they hold. `expected_env_ids` is the thread's `piece_env_ids`."""
        return self._rollout_check.problems(pieces, expected_env_ids)

    def hand_over(
        self,
        rollout: HostRollout | ScanRollout,
        *,
        update: int,
        version: int,
        params,
        device: jax.Device,
        who: str,
        expected_env_ids,
        consistency: ConsistencyCheck | None,
        params_wait_s: float,
    ) -> ActorRollout:
        """A collected rollout on the learner devices, checked, as the learner receives it.

        Raises:
          InvalidRolloutError: a value breaks the spec (or, with `consistency`, the records
            do not reproduce); the message starts with `who` collected it.
        """
        pieces = self._to_learner_devices(rollout)
        problem = self.check_rollout(pieces, expected_env_ids)
        if problem is None and consistency is not None:
            problem = consistency.problems(params, pieces, update, device)
        if problem is not None:
            raise InvalidRolloutError(
                f"{who} collected a bad rollout {update} with policy version {version}: "
                f"{problem}; the learner never saw it"
            )
        return ActorRollout(
            update=update,
            policy_version=version,
            pieces=pieces,
            episode_returns=rollout.episode_returns,
            episode_lengths=rollout.episode_lengths,
            episode_env_ids=rollout.episode_env_ids,
            params_wait_s=params_wait_s,
        )

    def _actor_groups(self, thread_index: int, envs, device, first_update: int) -> list[EnvGroup]:
        """The thread's env groups (fixed, in env order), reset, with their device state."""
        env_ids = self.thread_env_ids(thread_index)
        # Step (update - 1) * (T + 1) + t of the run draws the keys of step t of rollout
        # `update`; each rollout advances the counter by its T + 1 policy steps.
        first_step = np.int32((first_update - 1) * (self.sizes.num_steps + 1))
        groups, start = [], 0
        for pool in thread_envs.step_groups(envs):
            obs = spaces.host_observation(self.env_spec.observation, pool.reset()[0])
            size = len(jax.tree.leaves(obs)[0])
            columns = slice(start, start + size)
            groups.append(
                EnvGroup(
                    pool=pool,
                    columns=columns,
                    env_ids=jax.device_put(env_ids[columns], device),
                    step_index=jax.device_put(first_step, device),
                    tracker=EpisodeTracker(env_ids[columns]),
                    obs=obs,
                    # The envs (re)start here, so do their carries, also on resume.
                    carry=jax.device_put(self.agent.new_carry(size), device),
                    starts=np.ones(size, bool),
                )
            )
            start += size
        if start != self.sizes.envs_per_thread:
            raise ValueError(f"the thread's pools hold {start} envs, not env.num_envs")
        return groups

    def _actor_loop(self, thread_index, envs, store, handoff, first_update, gate, control):
        device_index = thread_index % len(self.layout.actor_devices)
        device = self.layout.actor_devices[device_index]
        groups = self._actor_groups(thread_index, envs, device, first_update)
        env_ids = self.thread_env_ids(thread_index)
        collect = functools.partial(self._collect, groups, env_ids)
        if self.actor_loop == "scan":
            collect = self._scan_collector(groups, device)
            first_version = required_policy_version(first_update, self.policy_lag)
            collect.compile(store.get(first_version, device_index))
        # Placed once: the rollout check reads them every rollout.
        expected_env_ids = self.piece_env_ids(thread_index)
        consistency = None
        if self.consistency_checks:
            consistency = ConsistencyCheck(
                self.agent, self.seed, self.sizes.num_steps, to_device=copy_to_device
            )
        gate.arrive_and_wait()
        for update in range(first_update, self.sizes.num_updates + 1):
            version = required_policy_version(update, self.policy_lag)
            wait_start = time.perf_counter()
            params = store.get(version, device_index)
            params_wait_s = time.perf_counter() - wait_start
            delay = self.actor_delay(thread_index, update)
            if delay:
                time.sleep(delay)
            who = (
                f"actor thread {thread_index} ({self.actor_loop} loop, {device.platform} "
                f"device {device.id})"
            )
            with jax.transfer_guard(self.transfer_guard):
                rollout = collect(params, device, control)
                handed = self.hand_over(
                    rollout,
                    update=update,
                    version=version,
                    params=params,
                    device=device,
                    who=who,
                    expected_env_ids=expected_env_ids,
                    consistency=consistency,
                    params_wait_s=params_wait_s,
                )
            put_or_stop(
                handoff,
                handed,
                control,
            )

    def actor_delay(self, thread_index: int, update: int) -> float:
        """The injected delay (s) before actor thread `thread_index` collects `update`."""
        if not self.actor_delay_jitter_s:
            return self.actor_delay_s
        rng = np.random.default_rng((self.seed, jax.process_index(), thread_index, update))
        draw = rng.random()
        return self.actor_delay_s + self.actor_delay_jitter_s * draw

    def _scan_collector(self, groups: list[EnvGroup], device) -> ScanCollector:
        """`collect(params, device, control)` of the scan loop (`scan_actor`)."""
        program, handles = scan_actor.build_rollout_program(
            self._actor_step_fn,
            self.env_spec,
            [group.pool for group in groups],
            self.sizes.num_steps,
            clip_rewards=self.clip_rewards,
            num_slices=len(self.layout.local_learner_devices),
        )
        states = [
            scan_actor.GroupState(
                handles=jax.device_put(group_handles, device),
                obs=jax.device_put(group.obs, device),
                starts=jax.device_put(group.starts, device),
                resetting=jax.device_put(group.tracker.resetting, device),
                carry=group.carry,
                step_index=group.step_index,
                env_ids=group.env_ids,
            )
            for group, group_handles in zip(groups, handles, strict=True)
        ]
        return ScanCollector(program, states, groups, self.sizes.num_steps)

    def _collect(self, groups: list[EnvGroup], env_ids, params, device, control) -> HostRollout:
        """Steps every group T times with `params`; returns the thread's host rollout.

        Groups take turns: while one group's envs step (envpool's threads, GIL released),
        the actor fetches the next group's actions and dispatches the stepped groups'
        next policy step. Which key, env and parameters meet at each step is fixed, so
        the data do not depend on timing.
        """
        T, n = self.sizes.num_steps, self.sizes.envs_per_thread
        action_spec = self.env_spec.action
        action_dtype = np.dtype(action_spec.dtype)
        rollout = HostRollout.empty(self.env_spec, T, n, env_ids)
        outputs = [[] for _ in groups]

        def dispatch(g: int, t: int) -> None:
            group = groups[g]
            rollout.record_obs(t, group)
            obs_on_device, starts_on_device = jax.device_put((group.obs, group.starts), device)
            carry_in, next_carry, group.actions, step_outputs, group.step_index = self._actor_step(
                params,
                group.carry,
                obs_on_device,
                starts_on_device,
                group.env_ids,
                group.step_index,
            )
            outputs[g].append(step_outputs)
            if t == 0:
                group.initial_carry = carry_in
            # obs[T] is processed again as obs[0] of the next rollout, from the same carry.
            group.carry = carry_in if t == T else next_carry

        for g in range(len(groups)):
            dispatch(g, 0)
        for t in range(T):
            control.raise_if_stopped()
            for group in groups:
                # Stored as sampled; the env steps with the spec's conversion of them
                # (e.g. Box actions clipped to the bounds).
                actions = np.asarray(jax.device_get(group.actions), action_dtype)
                rollout.actions[t, group.columns] = actions
                group.pool.send(action_spec.to_env(actions))
            for g, group in enumerate(groups):
                obs, raw_rewards, terminations, truncations, info = group.pool.recv()
                group.obs = spaces.host_observation(self.env_spec.observation, obs)
                rollout.record_step(t, group, raw_rewards, terminations, truncations, info)
                # An auto-reset step returns the first observation of an episode.
                group.starts = ~rollout.valid[t, group.columns]
                dispatch(g, t + 1)  # obs[T] and its outputs only bootstrap.
        rollout.rewards = learning_rewards(rollout.rewards, self.clip_rewards)
        num_slices = len(self.layout.local_learner_devices)
        rollout.policy_outputs = self._stack_outputs(outputs, num_slices)
        rollout.initial_carry = self._split_carry([g.initial_carry for g in groups], num_slices)
        return rollout

    def _to_learner_devices(self, rollout: HostRollout | ScanRollout) -> list[Rollout]:
        """One `Rollout` per local learner device: its slice of the thread's envs."""
        learner_devices = self.layout.local_learner_devices
        if isinstance(rollout, ScanRollout):
            return [
                copy_to_device(piece, device)
                for piece, device in zip(rollout.pieces, learner_devices, strict=True)
            ]
        slice_size = self.sizes.envs_per_thread // len(learner_devices)
        pieces = []
        for i, learner_device in enumerate(learner_devices):
            columns = slice(i * slice_size, (i + 1) * slice_size)
            piece = rollout.piece(columns, rollout.policy_outputs[i], rollout.initial_carry[i])
            pieces.append(copy_to_device(piece, learner_device))
        return pieces

    def _run_actor(self, *args):
        control = args[-1]
        try:
            self._actor_loop(*args)
        except RunStopped:
            pass
        except BaseException as error:  # noqa: BLE001 - handed to the learner thread.
            control.fail(error)

    # ----- learner side -----------------------------------------------------------

    @staticmethod
    def _concat_pieces_fn(pieces: list[Rollout]) -> Rollout:
        def concat(axis, *xs):
            return jnp.concatenate(xs, axis=axis)

        return jax.tree.map(concat, rollout_env_axes(pieces[0]), *pieces)

    def rollout_shardings(self, example: Rollout) -> Rollout:
        return jax.tree.map(self.layout.sharding, rollout_partition_specs(example))

    def _assemble(self, actor_rollouts: list[ActorRollout]) -> Rollout:
        """Builds the global rollout from every thread's per-device pieces, in place."""
        per_device = []
        for device_index in range(len(self.layout.local_learner_devices)):
            pieces = [r.pieces[device_index] for r in actor_rollouts]
            per_device.append(pieces[0] if len(pieces) == 1 else self._concat_pieces(pieces))
        shardings = self.rollout_shardings(per_device[0])
        num_envs = self.sizes.num_envs

        def global_array(axis, sharding, *shards):
            shape = list(shards[0].shape)
            shape[axis] = num_envs
            return jax.make_array_from_single_device_arrays(tuple(shape), sharding, list(shards))

        return jax.tree.map(global_array, rollout_env_axes(per_device[0]), shardings, *per_device)

    def rollout_struct(self, state) -> Rollout:
        """Shapes, dtypes and shardings of the global rollout (for AOT compilation)."""
        return rollout_struct(self.agent, self.env_spec, self.sizes, self.layout, state)

    def compile_update(self, state):
        """Compiles the learner update ahead of time; steady state cannot recompile."""
        lowered = lower_update(self.agent, self.layout, state, self.rollout_struct(state))
        # On CPU, XLA's memory-optimised scheduler keeps an unrolled minibatch loop to one
        # minibatch's activations at a time (see sebulba.preflight.memory).
        options = update_compiler_options(self.layout.local_learner_devices)
        self._compiled_update = lowered.compile(compiler_options=options)
        return self._compiled_update

    def use_compiled_update(self, compiled) -> None:
        """Runs `compiled`, the `compile_update` of a pipeline with the same agent, layout
        and sizes, instead of compiling the update again (runs that share one program)."""
        self._compiled_update = compiled

    def _publish(self, store: ParamsStore, version: int, params) -> None:
        """Copies policy parameters to every actor device and waits until they land.

        Copies are forced (`may_alias=False`) because the next update donates the
        learner state, and an actor device may be a learner device.
        """
        copies = [self.actor_copy(params, device) for device in self.layout.actor_devices]
        jax.block_until_ready(copies)
        store.publish(version, copies)

    def actor_copy(self, params, device: jax.Device):
        """A copy of policy parameters (replicated on the learner mesh) on actor `device`,
        from the local learner device's replica; never an alias of the learner's."""
        learner_device = self.layout.local_learner_devices[0]

        def local_copy(x):
            for shard in x.addressable_shards:
                if shard.device == learner_device:
                    return shard.data
            raise RuntimeError("parameters are not replicated on the local learner device")

        return copy_to_device(jax.tree.map(local_copy, params), device, may_alias=False)

    def run(
        self,
        state,
        *,
        first_update: int = 1,
        previous_params: Any = None,
        on_update: Callable[[UpdateReport, Any], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        ends_block: Callable[[int], bool] | None = None,
    ):
        """Trains from `first_update` to `sizes.num_updates`; returns the final state.

        Args:
          state: learner state, replicated on the learner mesh; version
            `first_update` of the parameters.
          first_update: the first update to run (1 for a fresh run).
          previous_params: when resuming with policy_lag L > 0, the policy parameters of
            versions `lagged_versions(first_update, L)` (oldest first), which collect the
            first L resumed rollouts.
          on_update: called by the learner thread after every update with the report
            and the new state.
          should_stop: polled after every update; True ends the run early (e.g. on
            SIGTERM) after the update completes.
          ends_block: the Anakin runner's (updates where its block of updates must
            end); here every update is a call of its own, so each ends one already.
        """
        del ends_block
        if self._compiled_update is None:
            self.compile_update(state)
        if self.fused:
            return fused_step.FusedLoop(self).run(
                state,
                first_update=first_update,
                previous_params=previous_params,
                on_update=on_update,
                should_stop=should_stop,
            )
        control = RunControl()
        # Episodes end on every process; the metrics need all of them, in env order.
        gather_episodes = None
        if jax.process_count() > 1:
            sizes = self.sizes
            capacity = sizes.num_actor_threads * sizes.envs_per_thread * sizes.num_steps
            gather_episodes = EpisodeGatherer(self.layout, capacity)
        # Version u + 1 arrives while actors may still collect with u + 1 - L.
        store = ParamsStore(len(self.layout.actor_devices), control, keep=self.policy_lag + 1)
        # An actor runs up to L rollouts ahead of the update in flight.
        handoffs = [queue.Queue(maxsize=max(1, self.policy_lag)) for _ in self.envs_per_thread]
        for version, params in lagged_to_publish(first_update, self.policy_lag, previous_params):
            self._publish(store, version, params)
        self._publish(store, first_update, self.agent.policy_params(state))
        gate = StartGate(len(self.envs_per_thread), control)
        threads = [
            threading.Thread(
                target=self._run_actor,
                args=(t, envs, store, handoffs[t], first_update, gate, control),
                name=f"sebulba-actor-{t}",
                daemon=True,
            )
            for t, envs in enumerate(self.envs_per_thread)
        ]
        for thread in threads:
            thread.start()
        try:
            for update in range(first_update, self.sizes.num_updates + 1):
                wait_start = time.perf_counter()
                actor_rollouts = [get_or_stop(q, control) for q in handoffs]
                rollout_wait_s = time.perf_counter() - wait_start
                expected = required_policy_version(update, self.policy_lag)
                for r in actor_rollouts:
                    if r.update != update or r.policy_version != expected:
                        raise RuntimeError(
                            f"lag schedule violated: update {update} got rollout {r.update} "
                            f"of version {r.policy_version}, expected version {expected}"
                        )
                if self.learner_delay_s:
                    time.sleep(self.learner_delay_s)
                with jax.transfer_guard(self.transfer_guard):
                    rollout = self._assemble(actor_rollouts)
                    state, metrics = self._compiled_update(state, rollout)
                    del rollout
                    self._publish(store, update + 1, self.agent.policy_params(state))
                episodes = tuple(
                    [x for r in actor_rollouts for x in getattr(r, name)]
                    for name in ("episode_returns", "episode_lengths", "episode_env_ids")
                )
                if gather_episodes is not None:
                    episodes = gather_episodes(*episodes)
                episode_returns, episode_lengths, episode_env_ids = in_env_order(*episodes)
                if on_update is not None:
                    on_update(
                        UpdateReport(
                            update=update,
                            global_step=update * self.sizes.steps_per_update,
                            actor_policy_version=expected,
                            learner_policy_version=update + 1,
                            rollout_wait_s=rollout_wait_s,
                            params_wait_s=float(np.mean([r.params_wait_s for r in actor_rollouts])),
                            episode_returns=episode_returns,
                            episode_lengths=episode_lengths,
                            episode_env_ids=episode_env_ids,
                            agent_metrics=metrics,
                        ),
                        state,
                    )
                if should_stop is not None and should_stop() and update < self.sizes.num_updates:
                    break
            if control.error is not None:
                raise control.error
        except BaseException as error:
            control.fail(error)
            raise
        finally:
            control.stop()
            for thread in threads:
                thread.join(timeout=10.0)
        return state
