"""The actors' rollout as one XLA program: envpool's XLA interface inside a jitted scan.

`pipeline.actor_loop="step"` enters Python at every env step (a jitted policy call, a
copy of the observations in and of the actions out, envpool's `send`/`recv` from
Python). With `"scan"` an actor thread runs a whole rollout, T x (policy -> send ->
recv), as one jitted `jax.lax.scan` on its actor device, through the custom calls that
envpool registers with XLA (`pool.xla()`), and enters Python once per rollout.

The data are those of the step loop, bit for bit (tests/test_scan_actor.py): the same
policy function (`sebulba.actors.actor_step`) meets the same observations, carries, start
flags and step counter, one call per env group in the step loop's order; actions reach
the env converted as the step loop converts them (`env_actions`); the rollout's
validity flags and episode starts come from the same rule as `envs.EpisodeTracker`'s,
which then records the episodes on the host from the rollout's rewards and flags.

Which tasks can: envpool's XLA interface declares its arrays with envpool's dtypes,
and JAX holds float64 and int64 arrays as 32-bit ones unless `jax_enable_x64` is on,
so a task whose observations or actions are float64 (MuJoCo, dm_control) would have
envpool write 8-byte values into 4-byte buffers. Such tasks, TPU actor devices (envpool
has CPU and GPU kernels only) and pools that are not envpool's keep the step loop:
`unsupported_reason` says why, and `auto` logs it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from sebulba import program_order
from sebulba.agents.api import EnvSpec, Rollout, UpdatePlan, rollout_env_axes
from sebulba.environments import episodes as episodes_lib
from sebulba.environments import spaces, thread_envs

# The name scope of the update's pieces in a fused program: its instructions' op names
# hold it, so a reader of the compiled module (`sebulba.preflight.schedule`) finds them.
UPDATE_PIECE_SCOPE = "update_piece"
# Platforms for which envpool ships kernels of its XLA custom calls.
_XLA_PLATFORMS = {"cpu": 0, "gpu": 1, "cuda": 1}


def _not_persistently_cached() -> contextlib.AbstractContextManager:
    """A context in which the thread's compilations are not written to JAX's disk cache.

    envpool's custom calls name their pool by its address in this process (the call
    target's name and a `handle` attribute), so a rollout program's cache key is new in
    every process: an entry written to disk could never be read again, and every run
    would add one. Raising JAX's minimum compile time for a cache write, for this thread
    only, keeps them out. The setting's thread-local form is JAX's internal config
    (public `jax.config.update` would change it for every thread); where a JAX version
    lacks it, entries are written as before.
    """
    try:
        from jax._src import config as jax_config

        return jax_config.persistent_cache_min_compile_time_secs(float("inf"))
    except (ImportError, AttributeError, TypeError):
        return contextlib.nullcontext()


def pools_of(group: Any) -> list[Any]:
    """The envpool pools behind one env group of `thread_envs.step_groups`, in env order."""
    inner = group.pool if isinstance(group, thread_envs.SteppedWhole) else group
    return list(inner.pools) if isinstance(inner, thread_envs.JointPool) else [inner]


def _task_name(pool: Any) -> str:
    return type(pool).__name__.removesuffix("GymnasiumEnvPool").removesuffix("EnvPool")


def unsupported_reason(
    groups: Sequence[Any], device: jax.Device, action_spec: spaces.ActionSpec
) -> str | None:
    """Why the thread's env groups cannot be stepped inside a scan on `device`; None if they can."""
    kernel = _XLA_PLATFORMS.get(device.platform)
    if kernel is None:
        return f"envpool's XLA interface has no kernels for {device.platform} actor devices"
    for group in groups:
        for pool in pools_of(group):
            if not hasattr(pool, "_xla"):
                return f"the envs ({type(pool).__name__}) are not an envpool pool"
            for name, (_, (in_specs, out_specs), capsules) in pool._xla():
                if capsules[kernel] is None:
                    return f"envpool has no {device.platform} kernel for {_task_name(pool)}"
                for dtype, _ in (*in_specs, *out_specs):
                    held = jax.dtypes.canonicalize_dtype(dtype)
                    if held != np.dtype(dtype):
                        return (
                            f"envpool's XLA {name} of {_task_name(pool)} passes "
                            f"{np.dtype(dtype).name} arrays, which JAX holds as {held.name} "
                            "(jax_enable_x64 is off)"
                        )
            mismatch = _action_mismatch(action_spec, pool)
            if mismatch:
                return mismatch
    return None


def choose_actor_loop(
    requested: str,
    groups_per_thread: Sequence[Sequence[Any]],
    devices_per_thread: Sequence[jax.Device],
    action_spec: spaces.ActionSpec,
) -> tuple[str, str]:
    """The loop ("scan" or "step") every actor thread runs, and why.

    `requested` is `pipeline.actor_loop`. One loop for all threads keeps the threads alike;
    "auto" takes scan only where every thread's envs and device allow it.

    Raises:
      ValueError: "scan" was requested where it cannot run (the reason).
    """
    if requested == "step":
        return "step", "Python steps the envs"
    reasons = (
        unsupported_reason(groups, device, action_spec)
        for groups, device in zip(groups_per_thread, devices_per_thread, strict=True)
    )
    reason = next((r for r in reasons if r is not None), None)
    if reason is not None:
        if requested == "scan":
            raise ValueError(f"pipeline.actor_loop is 'scan', but {reason}; use 'auto' or 'step'")
        return "step", reason
    envs_per_thread = [
        sum(pool.config["num_envs"] for group in groups for pool in pools_of(group))
        for groups in groups_per_thread
    ]
    unverified = unverified_reason(devices_per_thread, envs_per_thread)
    if unverified is None:
        return "scan", "envpool's XLA interface steps the envs inside each rollout's program"
    if requested == "scan":
        return "scan", f"requested, although {unverified}"
    return "step", f"{unverified}; pipeline.actor_loop='scan' runs it anyway"


@dataclasses.dataclass(frozen=True)
class VerifiedScan:
    """The scan rollouts a test has shown to give the step loop's data on one platform.

    Attributes:
      max_threads_per_device: actor threads sharing one device (None: any number).
      min_envs_per_thread: envs in one thread's rollout program.
    """

    max_threads_per_device: int | None = None
    min_envs_per_thread: int = 1


# Per platform, as far as tests have shown scan rollouts equal to the step loop's (a
# platform not listed: none). CPU: any shape (tests/test_scan_actor.py). GPU: what
# tests/gpu has shown on an H100 and an H200: one actor thread per device with 128 envs.
# IMPALA Atari's scan rollouts of 64 and 32 envs per program, with one thread or two,
# handed the learner data that made update 1's losses non-finite on an H200
# (docs/architecture.md, "The actor loop on GPUs"); until tests/gpu shows the cause
# fixed, `auto` does not choose them.
VERIFIED_SCAN: dict[str, VerifiedScan] = {
    "cpu": VerifiedScan(),
    "gpu": VerifiedScan(max_threads_per_device=1, min_envs_per_thread=128),
}


def unverified_reason(
    devices_per_thread: Sequence[jax.Device], envs_per_thread: Sequence[int]
) -> str | None:
    """Why scan rollouts on these devices, of these sizes, are not verified to give the
    step loop's data; None if they are."""
    threads_on: dict[tuple[str, int], int] = {}
    for device in devices_per_thread:
        key = (device.platform, device.id)
        threads_on[key] = threads_on.get(key, 0) + 1
    for (platform, _), threads in threads_on.items():
        verified = VERIFIED_SCAN.get(platform, VerifiedScan(max_threads_per_device=0))
        limit = verified.max_threads_per_device
        if limit is not None and threads > limit:
            return (
                f"scan rollouts of {threads} actor threads sharing one {platform} device "
                f"are not verified (verified: {limit or 'none'})"
            )
    for device, envs in zip(devices_per_thread, envs_per_thread, strict=True):
        least = VERIFIED_SCAN.get(device.platform, VerifiedScan()).min_envs_per_thread
        if envs < least:
            return (
                f"scan rollouts of {envs} envs per actor thread on a {device.platform} device "
                f"are not verified (verified: {least} or more)"
            )
    return None


def env_actions(action_spec: spaces.ActionSpec, actions: jax.Array) -> jax.Array:
    """The actions the env receives, as `ActionSpec.to_env` makes them on the host.

    Box actions are clipped in float32 to the float32 bounds: rounding commutes with
    clipping, so this equals the host's float64 clip rounded to envpool's float32.
    """
    if isinstance(action_spec, spaces.Box):
        low = np.reshape(np.asarray(action_spec.low, np.float32), action_spec.shape)
        high = np.reshape(np.asarray(action_spec.high, np.float32), action_spec.shape)
        return jnp.clip(actions.astype(jnp.float32), low, high)
    return actions.astype(jnp.int32)


def device_observation(observation_spec: Any, obs: Any) -> Any:
    """envpool's observations as the spec's arrays, on the device (`spaces.host_observation`)."""

    def convert(spec: spaces.ArraySpec, x) -> jax.Array:
        x = jnp.asarray(x).astype(spec.dtype)
        return x if spec.components is None else x[..., list(spec.components)]

    return spaces.map_observation(convert, observation_spec, spaces.dict_tree(obs))


def _action_mismatch(action_spec: spaces.ActionSpec, pool: Any) -> str | None:
    """How the actions `env_actions` makes differ from what `pool` reads; None if they match."""
    dtype = np.dtype(action_spec.dtype)  # What `env_actions` sends.
    for key, spec in pool.spec.action_array_spec.items():
        if key in ("env_id", "players.env_id"):
            continue
        # envpool writes the player axis of a per-env scalar as -1.
        shape = tuple(size for size in spec.shape if size != -1)
        if np.dtype(spec.dtype) != dtype or shape != tuple(action_spec.shape):
            return (
                f"{_task_name(pool)} reads {key} as {np.dtype(spec.dtype).name} {shape}, "
                f"not the {dtype.name} {tuple(action_spec.shape)} of the policy's actions"
            )
    return None


@dataclasses.dataclass
class GroupState:
    """What one env group carries from step to step and rollout to rollout, on its device.

    Attributes:
      handles: one envpool handle per pool of the group (uint8 arrays; envpool's custom
        calls return the same buffer, which orders them).
      obs: the observations about to be processed, leaves [n, ...].
      starts: [n] bool, where `obs` starts an episode.
      resetting: [n] bool, where the last step ended an episode (so the next is
        envpool's auto-reset, `valid` False).
      carry: the recurrent carry `obs` is processed with (`()` for feed-forward agents).
      step_index: int32 scalar, the next policy step's index.
      env_ids: [n] int32 global env indices.
    """

    handles: tuple
    obs: Any
    starts: jax.Array
    resetting: jax.Array
    carry: Any
    step_index: jax.Array
    env_ids: jax.Array


jax.tree_util.register_dataclass(
    GroupState,
    data_fields=["handles", "obs", "starts", "resetting", "carry", "step_index", "env_ids"],
    meta_fields=[],
)


def split_envs(rollout: Rollout, num_slices: int) -> list[Rollout]:
    """The rollout as `num_slices` rollouts of consecutive envs."""
    axes = rollout_env_axes(rollout)
    parts = jax.tree.map(lambda axis, x: jnp.split(x, num_slices, axis=axis), axes, rollout)
    return [jax.tree.map(lambda axis, x, i=i: x[i], axes, parts) for i in range(num_slices)]


@dataclasses.dataclass(frozen=True)
class _Work:
    """Device work to queue between an env step's sends and receives: `run(carry, index)
    -> carry`, `index` an int32 scalar (which outer step: it passes the same ordering as
    the carry, so that work it selects cannot start before the sends either)."""

    carry: Any
    index: jax.Array
    run: Callable[[Any, jax.Array], Any]


def _plain_steps(env_step: Callable, loop, count: int):
    """`count` env steps with nothing between their sends and receives: (loop, the steps'
    outputs [count, ...], or None when count is 0)."""
    if count == 0:
        return loop, None

    def body(loop, _):
        loop, per_group, _ = env_step(loop)
        return loop, per_group

    return jax.lax.scan(body, loop, None, length=count)


def _joined_steps(*parts):
    """Per-step outputs [n_i, ...] (None: no steps) joined along the step axis."""
    parts = [part for part in parts if part is not None]
    return jax.tree.map(lambda *xs: jnp.concatenate(xs), *parts)


def _steps_with_plan(env_step: Callable, loop, num_steps: int, plan: UpdatePlan):
    """The rollout's T env steps with the plan's pieces queued between sends and receives.

    With N outer steps of k pieces: where N <= T, slot m of N spans T // N env steps, the
    first k of which (k <= T // N) each carry piece (m, u), and the T mod N env steps left
    over come first, with nothing between; where N > T (N a multiple of T), env step t
    carries the N / T outer steps from t N / T on, whole, as a loop of `UpdatePlan.step`
    (one body per step, compiled as `UpdatePlan.run` compiles it). `fused_step.unsupported_reason`
    checks that one of the two holds. Slots are a `lax.scan`, or written out where the
    plan is unrolled (XLA:CPU's convolution gradients).

    Returns:
      (loop, the steps' outputs [T, ...], the plan's carry after its last piece).
    """
    N, k = plan.num_steps, plan.pieces_per_step
    if N > num_steps:
        per_env_step = N // num_steps

        def slot(carry, t):
            def pieces(plan_carry, first):
                return plan.steps(plan_carry, first, per_env_step)

            loop, plan_carry = carry
            work = _Work(plan_carry, t * per_env_step, pieces)
            loop, per_group, plan_carry = env_step(loop, work)
            return (loop, plan_carry), jax.tree.map(lambda x: x[None], per_group)

        num_slots, per_slot, leading = num_steps, 1, None
    else:
        per_slot = num_steps // N

        def slot(carry, m):
            loop, plan_carry = carry
            outputs = []
            for u in range(k):
                work = _Work(plan_carry, m, lambda c, m, u=u: plan.piece(c, m, u))
                loop, per_group, plan_carry = env_step(loop, work)
                outputs.append(jax.tree.map(lambda x: x[None], per_group))
            loop, rest = _plain_steps(env_step, loop, per_slot - k)
            return (loop, plan_carry), _joined_steps(*outputs, rest)

        num_slots = N
        loop, leading = _plain_steps(env_step, loop, num_steps - N * per_slot)
    if plan.unroll:
        carry, slots = (loop, plan.carry), []
        for index in range(num_slots):
            carry, outputs = slot(carry, jnp.int32(index))
            slots.append(outputs)
        slots = _joined_steps(*slots)
    else:
        indices = jnp.arange(num_slots, dtype=jnp.int32)
        carry, slots = jax.lax.scan(slot, (loop, plan.carry), indices)
        slots = jax.tree.map(lambda x: x.reshape(num_slots * per_slot, *x.shape[2:]), slots)
    loop, plan_carry = carry
    return loop, _joined_steps(leading, slots), plan_carry


def build_rollout_program(
    actor_step: Callable,
    env_spec: EnvSpec,
    groups: Sequence[Any],
    num_steps: int,
    *,
    clip_rewards: bool,
    num_slices: int,
) -> tuple[RolloutProgram, list[tuple]]:
    """The rollout program of one actor thread, and the envpool handles it starts from.

    `actor_step(params, carry, obs, starts, env_ids, step_index)` is the step loop's
    policy step (-> carry it used, next carry, actions, outputs, step_index + 1). The
    program takes `(params, [GroupState per group])` and returns `(next_states,
    (raw_rewards, terminations, truncations, game_overs), pieces)`: the groups' states
    for the next rollout, the [T, n] arrays the host's episode bookkeeping reads, and
    the thread's rollout as `num_slices` `Rollout`s of consecutive envs (one per local
    learner device), still on the actor device.
    """
    for group in groups:
        for pool in pools_of(group):
            # A wrong dtype or shape would be misread by envpool's custom call, or crash it.
            mismatch = _action_mismatch(env_spec.action, pool)
            if mismatch:
                raise ValueError(mismatch)
    xla_fns = [[pool.xla() for pool in pools_of(group)] for group in groups]
    pool_sizes = [[pool.config["num_envs"] for pool in pools_of(group)] for group in groups]
    action_spec = env_spec.action

    def send(states: list[GroupState], actions: list[jax.Array]) -> list[tuple]:
        handles = []
        groups_in_order = zip(states, actions, xla_fns, pool_sizes, strict=True)
        for state, group_actions, fns, sizes in groups_in_order:
            to_env = env_actions(action_spec, group_actions)
            offsets = np.cumsum([0, *sizes])
            handles.append(
                tuple(
                    send(handle, to_env[offsets[i] : offsets[i + 1]])
                    for i, (handle, (_, _, send, _)) in enumerate(
                        zip(state.handles, fns, strict=True)
                    )
                )
            )
        return handles

    def recv(handles: list[tuple]):
        results = []
        for group_handles, fns in zip(handles, xla_fns, strict=True):
            receivers = [recv for _, recv, _, _ in fns]
            received = [recv(h) for h, recv in zip(group_handles, receivers, strict=True)]
            new_handles = tuple(handle for handle, _ in received)
            parts = [result for _, result in received]
            obs = jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=0), *[p[0] for p in parts])
            rewards, terminations, truncations = (
                jnp.concatenate([p[i] for p in parts], axis=0) for i in (1, 2, 3)
            )
            ended_games = jnp.concatenate(
                [episodes_lib.game_overs(p[2], p[4]) for p in parts], axis=0
            )
            results.append((new_handles, obs, rewards, terminations, truncations, ended_games))
        return results

    def send_and_recv(states: list[GroupState], actions: list[jax.Array], work):
        """One env step of every group; `work` (a `_Work` or None) runs between the sends
        and the receives, while the envs step on the host's threads."""
        handles = send(states, actions)
        # Every pool is sent its actions before any result is awaited, so all pools
        # step at once (the step loop's order: all sends, then all receives), and the
        # work runs after the sends and before the receives. Both orders are data
        # (`program_order`), which every backend's scheduler must keep: a send
        # synchronises the device's stream, so work queued before it would hold the
        # envs back; queued before a receive, it runs while they step. The work's
        # inputs and outputs pass what `UpdatePlan.step` passes them through between
        # pieces, so that XLA fuses and rounds each piece as in the threaded update.
        sent = program_order.completion_flag(handles)
        if work is None:
            return recv(program_order.after(sent, handles)), None
        carry = jax.lax.optimization_barrier(program_order.after(sent, work.carry))
        with jax.named_scope(UPDATE_PIECE_SCOPE):  # Names the piece's kernels in the module.
            carry = jax.lax.optimization_barrier(work.run(carry, work.index))
        done = program_order.completion_flag(carry)
        return recv(program_order.after(done, handles)), carry

    def policy(params, state: GroupState):
        return actor_step(
            params, state.carry, state.obs, state.starts, state.env_ids, state.step_index
        )

    def rollout_program(params, states: list[GroupState], plan: UpdatePlan | None = None):
        first = [policy(params, state) for state in states]
        initial_carry = [carry_in for carry_in, *_ in first]
        # The loop carries, per group: its state (carry: the next carry), the actions
        # and the carry of the observation just processed.
        loop = [
            (dataclasses.replace(s, carry=next_carry, step_index=step_index), actions, carry_in)
            for s, (carry_in, next_carry, actions, _, step_index) in zip(states, first, strict=True)
        ]

        def env_step(loop, work=None):
            """One env step of every group, then the policy at what it returned."""
            group_states = [state for state, _, _ in loop]
            received, work_carry = send_and_recv(
                group_states, [actions for _, actions, _ in loop], work
            )
            new_loop, per_group = [], []
            for (state, actions, _), (handles, raw_obs, rewards, terms, truncs, ends) in zip(
                loop, received, strict=True
            ):
                # envs.EpisodeTracker's rule: a step after an episode's end is envpool's
                # reset (invalid), and it returns the next episode's first observation.
                valid = jnp.logical_not(state.resetting)
                obs = device_observation(env_spec.observation, raw_obs)
                state = dataclasses.replace(
                    state,
                    handles=handles,
                    obs=obs,
                    starts=jnp.logical_not(valid),
                    resetting=jnp.logical_or(terms, truncs),
                )
                carry_in, next_carry, next_actions, outputs, step_index = policy(params, state)
                new_loop.append(
                    (
                        dataclasses.replace(state, carry=next_carry, step_index=step_index),
                        next_actions,
                        carry_in,
                    )
                )
                per_group.append((obs, actions, rewards, terms, truncs, valid, outputs, ends))
            return new_loop, per_group, work_carry

        if plan is None:
            loop, steps = _plain_steps(env_step, loop, num_steps)
            plan_carry = None
        else:
            loop, steps, plan_carry = _steps_with_plan(env_step, loop, num_steps, plan)
        # obs[T] is processed again as obs[0] of the next rollout, from the same carry.
        next_states = [dataclasses.replace(state, carry=carry_in) for state, _, carry_in in loop]

        def joined(axis, *xs):
            return jnp.concatenate(xs, axis=axis)

        def with_first(firsts, rest):
            return jax.tree.map(lambda f, r: jnp.concatenate([f[None], r], axis=0), firsts, rest)

        def across_groups(index: int):
            return jax.tree.map(lambda *xs: joined(1, *xs), *[step[index] for step in steps])

        raw_rewards = across_groups(2)
        # envs.learning_rewards, on the device.
        rewards = jnp.sign(raw_rewards) if clip_rewards else raw_rewards
        obs = [with_first(s.obs, step[0]) for s, step in zip(states, steps, strict=True)]
        outputs = [with_first(f[3], step[6]) for f, step in zip(first, steps, strict=True)]
        rollout = Rollout(
            obs=jax.tree.map(lambda *xs: joined(1, *xs), *obs),
            actions=across_groups(1),
            rewards=rewards,
            terminations=across_groups(3),
            truncations=across_groups(4),
            valid=across_groups(5),
            policy_outputs=jax.tree.map(lambda *xs: joined(1, *xs), *outputs),
            env_ids=joined(0, *[s.env_ids for s in states]),
            initial_carry=jax.tree.map(lambda *xs: joined(0, *xs), *initial_carry),
        )
        episode_fields = (
            raw_rewards,
            rollout.terminations,
            rollout.truncations,
            across_groups(7),  # envs.game_overs: which terminations end the scored episode.
        )
        pieces = split_envs(rollout, num_slices)
        if plan is None:
            return next_states, episode_fields, pieces
        return next_states, episode_fields, pieces, plan_carry

    handles = [tuple(handle for handle, *_ in fns) for fns in xla_fns]
    return RolloutProgram(rollout_program), handles


class RolloutProgram:
    """An actor thread's rollout program, compiled ahead of time by `compile`.

    Calling it runs the compiled program (compiling first if `compile` was not called);
    the arguments keep their shapes from rollout to rollout, so it never recompiles.
    `function(params, states, plan=None)` is the program's function, not jitted: with an
    `UpdatePlan` it also runs the plan's pieces between the env steps and returns the
    plan's carry last (the fused step's rollout).
    """

    def __init__(self, function: Callable):
        self.function = function
        self._jitted = jax.jit(function)
        self._compiled = None

    def compile(self, params, states: list[GroupState]) -> None:
        with _not_persistently_cached():
            self._compiled = self._jitted.lower(params, states).compile()

    def __call__(self, params, states: list[GroupState]):
        if self._compiled is None:
            self.compile(params, states)
        return self._compiled(params, states)
