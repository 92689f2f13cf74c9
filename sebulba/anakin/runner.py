"""The Anakin runner: act, step the JAX envs and learn, as one jitted program.

Podracer's Anakin (Hessel et al. 2021) on `jax.sharding`: the envs are sharded along the
learner mesh's batch axis and the learner state is replicated, as the Sebulba learner
holds its rollout and state. One call of one AOT-compiled program runs a block of
`pipeline.updates_per_call` updates (`repeat_updates`), each of them:

  1. T + 1 policy steps and T env steps in a `lax.scan`: the same `actor_step` (keys,
     carry reset) as the Sebulba actors, the envs stepped with envpool's auto-reset
     convention (`sebulba.anakin.env_api`), building the same `Rollout`;
  2. the agent's unchanged `update` on that rollout (kept sharded along envs, so the
     agents' device-local minibatches stay device-local).

The policy-version schedule is the pipeline's (`sebulba.lag_schedule`): with
`pipeline.policy_lag` L rollout k is collected with version max(1, k - L) (the runner
carries the L previous versions, the lagged parameters), with 0 on-policy with version k.
Everything the loop carries between updates (the envs' state, observations, episode
counters and the agent's carry) is `ActingState`, checkpointed with the learner state, so
a resumed run continues bit for bit. The host sees only the finished episodes and the
agent's metrics; `run` has the pipeline's signature, so `sebulba.train` drives both the
same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import chex
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from sebulba import random_streams
from sebulba.actors.actor_step import actor_step
from sebulba.agents.api import Agent, EnvSpec, Rollout, rollout_partition_specs
from sebulba.anakin.env_api import BatchedEnvs, BatchOfEnvs, reset_envs, step_envs
from sebulba.config.sizes import Sizes
from sebulba.lag_schedule import advance_lagged, required_policy_version
from sebulba.mesh import BATCH_AXIS, DeviceLayout
from sebulba.preflight.memory import update_compiler_options
from sebulba.update_report import UpdateReport


@flax.struct.dataclass
class ActingState:
    """What the act-and-learn loop carries from one update to the next; leaves [B, ...].

    Attributes:
      envs: the JAX envs (their suite state, current observations, episode counters).
      carry: the agent's recurrent carry (`()` for a feed-forward agent), the one the
        next rollout's obs[0] is processed with before its reset rule applies.
      starts: True where the current observation starts an episode.
      env_ids: int32 global env index of each column.
    """

    envs: BatchedEnvs
    carry: chex.ArrayTree
    starts: chex.Array
    env_ids: chex.Array


@flax.struct.dataclass
class FinishedEpisodes:
    """The episodes that ended during one rollout, as [T, B] arrays (replicated).

    Attributes:
      ended: True at the step that ended an episode.
      returns: the raw return of that episode (0 elsewhere).
      lengths: its length in agent steps (0 elsewhere).
    """

    ended: chex.Array
    returns: chex.Array
    lengths: chex.Array

    def in_env_order(self, first_env: int = 0) -> tuple[list[float], list[int], list[int]]:
        """Three parallel lists (return, length, global env index), by env then time."""
        ended, returns, lengths = jax.device_get((self.ended, self.returns, self.lengths))
        envs, steps = np.nonzero(np.asarray(ended).T)  # Row-major: env first, then time.
        return (
            np.asarray(returns).T[envs, steps].astype(np.float64).tolist(),
            np.asarray(lengths).T[envs, steps].astype(np.int64).tolist(),
            (envs + first_env).astype(np.int64).tolist(),
        )


class AnakinRunner:
    """Runs a run's updates, each one jitted act-and-learn program on the learner mesh.

    Args:
      agent: the agent (its four pure functions, as the pipeline calls them).
      layout: the device layout; only the learner mesh is used.
      sizes: the run's sizes (B = `sizes.num_envs`, T = `sizes.num_steps`).
      env: the JAX env every column runs, or a joint run's tasks (`JointJaxEnv`), each
        running its block of columns.
      env_spec: its spec (observations and actions of the rollout).
      seed: the run's seed (actor, env and learner keys derive from it).
      policy_lag: 0 (on-policy), 1 (Cleanba's schedule) or L, as the pipeline.
      clip_rewards: learn from sign(reward), as `env.clip_rewards` says.
      updates_per_call: updates one call of the compiled program runs
        (`pipeline.updates_per_call`); the host reads their episodes and metrics back
        once per call.
    """

    def __init__(
        self,
        agent: Agent,
        layout: DeviceLayout,
        sizes: Sizes,
        env: BatchOfEnvs,
        env_spec: EnvSpec,
        *,
        seed: int,
        policy_lag: int,
        clip_rewards: bool,
        updates_per_call: int = 1,
    ):
        self.agent, self.layout, self.sizes = agent, layout, sizes
        self.env, self.env_spec = env, env_spec
        self.seed, self.policy_lag, self.clip_rewards = seed, policy_lag, clip_rewards
        self.updates_per_call = updates_per_call
        self.acting: ActingState | None = None
        # policy_lag L > 0: the lagged parameters, the L versions that collect the next L
        # rollouts (oldest first, `lagged_versions`), which a checkpoint after the last
        # update holds; None with policy_lag 0.
        self.behaviour = None
        self._compiled = None

    # Shardings -----------------------------------------------------------------------

    def _env_sharding(self, leaf) -> jax.sharding.NamedSharding:
        # Every leaf of the acting state is per env: split its leading axis. A joint run's
        # task block (`JointJaxEnv`) that does not split evenly over the learner devices
        # is held whole by each: the same per-env arithmetic, computed in every copy.
        if leaf.shape[0] % self.layout.learner_mesh.size:
            return self.layout.replicated
        return self.layout.sharding(PartitionSpec(BATCH_AXIS))

    def acting_shardings(self, acting: Any) -> Any:
        return jax.tree.map(self._env_sharding, acting)

    def abstract_acting_state(self) -> ActingState:
        """Shapes, dtypes and shardings of the acting state (to restore a checkpoint)."""
        shapes = jax.eval_shape(self._initial_acting, jnp.zeros((), jnp.int32))
        return jax.tree.map(
            lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
            shapes,
            self.acting_shardings(shapes),
        )

    # The program ---------------------------------------------------------------------

    def _initial_acting(self, unused) -> ActingState:
        del unused
        B = self.sizes.num_envs
        env_ids = jnp.arange(B, dtype=jnp.int32)
        keys = random_streams.jax_env_keys(self.seed, jnp.int32(0), env_ids)
        return ActingState(
            envs=reset_envs(self.env, keys),
            carry=self.agent.new_carry(B),
            starts=jnp.ones((B,), jnp.bool_),
            env_ids=env_ids,
        )

    def initial_acting_state(self) -> ActingState:
        """Every env reset (env step 0), sharded along the learner mesh."""
        shapes = jax.eval_shape(self._initial_acting, jnp.zeros((), jnp.int32))
        init = jax.jit(self._initial_acting, out_shardings=self.acting_shardings(shapes))
        return init(jnp.zeros((), jnp.int32))

    def collect(self, params, acting: ActingState, update: jax.Array):
        """Rollout `update` (T env steps) with `params` -> (acting state, rollout, episodes)."""
        T = self.sizes.num_steps
        first_policy_step = (update - 1) * (T + 1)
        first_env_step = (update - 1) * T + 1
        agent, seed, spec = self.agent, self.seed, self.env_spec

        def policy_step(acting: ActingState, t):
            return actor_step(
                agent,
                seed,
                params,
                acting.carry,
                acting.envs.obs,
                acting.starts,
                acting.env_ids,
                first_policy_step + t,
            )

        def one_step(acting: ActingState, t):
            carry_in, next_carry, actions, outputs, _ = policy_step(acting, t)
            keys = random_streams.jax_env_keys(seed, first_env_step + t, acting.env_ids)
            envs, step = step_envs(self.env, acting.envs, actions, keys)
            rewards = jnp.sign(step.reward) if self.clip_rewards else step.reward
            record = dict(
                obs=acting.envs.obs,
                carry_in=carry_in,
                actions=actions.astype(spec.action.dtype),
                rewards=rewards,
                terminations=step.terminated,
                truncations=step.truncated,
                valid=step.valid,
                outputs=outputs,
                episodes=FinishedEpisodes(step.ended, step.episode_return, step.episode_length),
            )
            # An auto-reset step returns the first observation of an episode.
            starts = jnp.logical_not(step.valid)
            return ActingState(envs, next_carry, starts, acting.env_ids), record

        acting, steps = jax.lax.scan(one_step, acting, jnp.arange(T, dtype=jnp.int32))
        # obs[T] and its outputs only bootstrap; the next rollout processes obs[T] again as
        # its obs[0], from the same carry.
        carry_in, _, _, last_outputs, _ = policy_step(acting, T)
        acting = acting.replace(carry=carry_in)
        initial_carry = jax.tree.map(lambda x: x[0], steps["carry_in"])

        def with_last(stacked, last):
            return jnp.concatenate([stacked, last[None]], axis=0)

        rollout = Rollout(
            obs=jax.tree.map(with_last, steps["obs"], acting.envs.obs),
            actions=steps["actions"],
            rewards=steps["rewards"],
            terminations=steps["terminations"],
            truncations=steps["truncations"],
            valid=steps["valid"],
            policy_outputs=jax.tree.map(with_last, steps["outputs"], last_outputs),
            env_ids=acting.env_ids,
            initial_carry=initial_carry,
        )
        return acting, rollout, steps["episodes"]

    def act_and_learn(self, state, behaviour_params, acting: ActingState, update: jax.Array):
        """One update: rollout `update`, then the agent's update on it.

        Args:
          state: learner state of version `update`.
          behaviour_params: policy_lag L > 0: the lagged parameters, versions
            `lagged_versions(update, L)`, of which the oldest collects; None for policy_lag 0.
          acting: the acting state after the previous rollout.
          update: int32 scalar, the update's number (from 1).

        Returns:
          (state of version update + 1, the next update's lagged parameters or None,
          acting state, agent metrics, finished episodes).
        """
        params = self.agent.policy_params(state)
        collecting = params if behaviour_params is None else behaviour_params[0]
        acting, rollout, episodes = self.collect(collecting, acting, update)
        rollout = jax.lax.with_sharding_constraint(
            rollout, jax.tree.map(self.layout.sharding, rollout_partition_specs(rollout))
        )
        new_state, metrics = self.agent.update(state, rollout)
        # Version `update` collects rollout update + L.
        next_behaviour = (
            None if behaviour_params is None else advance_lagged(behaviour_params, params)
        )
        return new_state, next_behaviour, acting, metrics, episodes

    def act_and_learn_block(self, state, behaviour_params, acting, first_update, count):
        """`act_and_learn` for updates first_update .. first_update + count - 1, in one
        program of `updates_per_call` iterations (see `repeat_updates`)."""
        block = repeat_updates(self.act_and_learn, self.updates_per_call)
        return block(state, behaviour_params, acting, first_update, count)

    def compile_update(self, state):
        """Compiles `act_and_learn_block` ahead of time (so the steady state cannot recompile).

        `state` may be the learner state or its shapes; the program's memory is then
        checked against the learner devices', as the pipeline's update is.
        """
        options = update_compiler_options(self.layout.local_learner_devices)
        self._compiled = self.lower_update(state).compile(compiler_options=options or None)
        return self._compiled

    def lower_update(self, state):
        """`act_and_learn_block` lowered for the learner mesh (`sebulba.check` compiles
        this: one call runs `updates_per_call` updates)."""
        replicated = self.layout.replicated
        behaviour_params = None
        if self.policy_lag:
            params = jax.eval_shape(self.agent.policy_params, state)
            one = jax.tree.map(
                lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype, sharding=replicated), params
            )
            behaviour_params = (one,) * self.policy_lag
        state_shardings = self.agent.state_shardings(state, self.layout.sharding)
        behaviour_shardings = jax.tree.map(lambda _: replicated, behaviour_params)
        acting = self.abstract_acting_state()
        acting_shardings = jax.tree.map(lambda s: s.sharding, acting)
        jitted = jax.jit(
            self.act_and_learn_block,
            in_shardings=(
                state_shardings,
                behaviour_shardings,
                acting_shardings,
                replicated,
                replicated,
            ),
            out_shardings=(
                state_shardings,
                behaviour_shardings,
                acting_shardings,
                replicated,
                replicated,
            ),
            donate_argnums=(0, 1, 2),
        )
        update = jnp.zeros((), jnp.int32)
        return jitted.lower(state, behaviour_params, acting, update, update)

    def rollout_struct(self, state) -> Rollout:
        """Shapes and shardings of one rollout (the memory check's figure of a rollout)."""
        params = jax.eval_shape(self.agent.policy_params, state)
        acting = self.abstract_acting_state()
        _, rollout, _ = jax.eval_shape(self.collect, params, acting, jnp.ones((), jnp.int32))
        shardings = jax.tree.map(self.layout.sharding, rollout_partition_specs(rollout))
        return jax.tree.map(
            lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), rollout, shardings
        )

    # The host loop -------------------------------------------------------------------

    def run(
        self,
        state,
        *,
        first_update: int = 1,
        previous_params=None,
        on_update: Callable[[UpdateReport, Any], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        ends_block: Callable[[int], bool] | None = None,
    ):
        """Runs updates `first_update` .. `sizes.num_updates`; returns the final state.

        `self.acting` must hold the acting state to start from (`initial_acting_state`
        or a restored one); it always holds the current one, for checkpoints.
        `previous_params` are the lagged parameters, versions
        `lagged_versions(first_update, policy_lag)` (policy_lag > 0, resumed runs).

        Each program call runs a block of up to `updates_per_call` updates, cut short
        after the last update and after every update for which `ends_block` is True (a
        checkpoint is due there). `on_update(report, state)` runs for every update, in
        order, once its block has returned: `state` is the learner state after the
        block's last update, and None for the updates before it (their state only ever
        existed inside the program). With several updates per call, a block's reports
        are made while the next block runs, all with None, unless the block is the last
        or a checkpoint is due after it. `should_stop` is asked after each block's
        reports; when it says stop, the block in flight (if any) finishes, is reported
        with its state, and ends the run.
        """
        if self.acting is None:
            raise ValueError("AnakinRunner.run needs an acting state: set runner.acting")
        self.behaviour = None
        if self.policy_lag:
            self.behaviour = previous_params
            if self.behaviour is None:  # Updates 1 .. L + 1 collect with version 1.
                self.behaviour = initial_lagged(
                    self.agent.policy_params(state), self.policy_lag, self.layout.replicated
                )
        if self._compiled is None:
            self.compile_update(state)
        sizes = self.sizes
        # With several updates per call, a block's reports are made while the next block
        # runs (it is dispatched first), so the host's work overlaps the device's; the
        # block's state is then gone (donated to the next), which only a block that keeps
        # its state needs: the last, and one after which a checkpoint is due.
        overlap = self.updates_per_call > 1
        waiting = None  # A block already followed by the one in flight, not yet reported.
        for first, count in update_blocks(
            first_update, sizes.num_updates, self.updates_per_call, ends_block
        ):
            last = first + count - 1
            state, self.behaviour, self.acting, metrics, episodes = self._compiled(
                state, self.behaviour, self.acting, np.int32(first), np.int32(count)
            )
            block = (first, count, metrics, episodes)
            if waiting is not None:
                self._report(*waiting, None, on_update)
                waiting = None
                if should_stop is not None and should_stop():
                    # The stop was decided where that block ended; the one in flight ends
                    # the run, with its state.
                    self._report(*block, state, on_update)
                    break
            keeps_state = last == sizes.num_updates or (ends_block is not None and ends_block(last))
            if overlap and not keeps_state:
                waiting = block
                continue
            self._report(*block, state, on_update)
            if should_stop is not None and should_stop():
                break
        return state

    def _report(self, first, count, metrics, episodes, state, on_update) -> None:
        """Reports a block's updates in order: `state` (None if gone) with its last."""
        # One read-back per block: the host's share of an update shrinks with its size.
        metrics, episodes = jax.device_get((metrics, episodes))
        reports = block_reports(first, count, self.sizes, self.policy_lag, metrics, episodes)
        for index, report in enumerate(reports):
            if on_update is not None:
                on_update(report, state if index == count - 1 else None)


def block_reports(first, count, sizes, policy_lag, metrics, episodes, seed=None):
    """The reports of a block's updates first .. first + count - 1, in order, from its
    metrics and episodes read back to the host: stacked [updates, ...], or for the
    vmapped seeds [updates, seeds, ...], of which `seed` picks one."""

    def pick(x, index):
        return x[index] if seed is None else x[index, seed]

    for index in range(count):
        yield update_report(
            first + index,
            sizes,
            policy_lag,
            jax.tree.map(lambda x, i=index: pick(x, i), episodes),
            {name: pick(value, index) for name, value in metrics.items()},
            last_update_of_call=first + count - 1,
        )


def repeat_updates(act_and_learn: Callable, length: int) -> Callable:
    """`act_and_learn` for up to `length` consecutive updates in one program.

    Args:
      act_and_learn: (state, behaviour, acting, update, *extra) -> (state, behaviour,
        acting, metrics, episodes), one update (`AnakinRunner.act_and_learn`, or the
        seeds' vmapped one).
      length: the iterations the program holds (`pipeline.updates_per_call`).

    Returns:
      block(state, behaviour, acting, first_update, count, *extra) -> (state, behaviour,
      acting, metrics, episodes), metrics and episodes stacked along a new leading axis
      of `length`. Updates first_update .. first_update + count - 1 run, one after the
      other; the iterations from `count` on leave the carry as it is and give zeros, which
      the host never reads. With length 1 the block is the one update itself, with no loop
      around it: XLA:CPU runs convolution gradients 8-40x slower inside a rolled loop, so
      that path must stay open to the configs that pay it.
    """

    def single(state, behaviour, acting, first_update, count, *extra):
        del count  # Always 1.
        *carried, metrics, episodes = act_and_learn(state, behaviour, acting, first_update, *extra)
        return (*carried, *jax.tree.map(lambda x: x[None], (metrics, episodes)))

    def block(state, behaviour, acting, first_update, count, *extra):
        def one_update(carry, index):
            # Jitted and inlined, so that `skip` takes its outputs' shapes from the trace
            # `run`'s branch made rather than tracing the whole update a second time.
            def update(carry):
                *carried, metrics, episodes = act_and_learn(*carry, first_update + index, *extra)
                return tuple(carried), (metrics, episodes)

            run = jax.jit(update, inline=True)

            def skip(carry):
                outputs = jax.eval_shape(run, carry)[1]
                return carry, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), outputs)

            return jax.lax.cond(index < count, run, skip, carry)

        carry, (metrics, episodes) = jax.lax.scan(
            one_update, (state, behaviour, acting), jnp.arange(length, dtype=jnp.int32)
        )
        return (*carry, metrics, episodes)

    return single if length == 1 else block


def update_blocks(
    first_update: int,
    last_update: int,
    updates_per_call: int,
    ends_block: Callable[[int], bool] | None = None,
):
    """(first update, update count) of each program call from `first_update` to
    `last_update`: blocks of `updates_per_call`, cut after each update for which
    `ends_block` is True and at `last_update`."""
    update = first_update
    while update <= last_update:
        count = 1
        while (
            count < updates_per_call
            and update + count <= last_update
            and not (ends_block is not None and ends_block(update + count - 1))
        ):
            count += 1
        yield update, count
        update += count


def update_report(
    update: int,
    sizes: Sizes,
    policy_lag: int,
    episodes: FinishedEpisodes,
    metrics,
    last_update_of_call: int | None = None,
) -> UpdateReport:
    """What an Anakin update reports to the metrics and checkpoints (the pipeline's form);
    `last_update_of_call` is that of the block it ran in."""
    returns, lengths, env_ids = episodes.in_env_order()
    return UpdateReport(
        update=update,
        global_step=update * sizes.steps_per_update,
        actor_policy_version=required_policy_version(update, policy_lag),
        learner_policy_version=update + 1,
        # One program: the learner never waits for data, nor acting for parameters.
        rollout_wait_s=0.0,
        params_wait_s=0.0,
        episode_returns=returns,
        episode_lengths=lengths,
        episode_env_ids=env_ids,
        agent_metrics=metrics,
        last_update_of_call=last_update_of_call,
    )


def describe_schedule(policy_lag: int) -> str:
    """Which policy version collects rollout k, in words (summary.json's `schedule`)."""
    if policy_lag == 1:
        return "one-step lag: rollout k is collected with policy version max(1, k - 1)"
    if policy_lag:
        return (
            f"{policy_lag}-step lag: rollout k is collected with policy version "
            f"max(1, k - {policy_lag})"
        )
    return "on-policy: rollout k is collected with policy version k (no lag)"


def initial_lagged(params, policy_lag: int, sharding) -> tuple:
    """A fresh run's lagged parameters: `policy_lag` copies of version 1, each its own
    buffers (the program donates them, and one buffer cannot be donated twice)."""
    return tuple(jax.device_put(params, sharding, may_alias=False) for _ in range(policy_lag))


def check_config(config, task_ids) -> bool:
    """Whether the run is an Anakin run; raises ConfigError for what Anakin cannot do.

    Anakin has no actor threads and no envpool pools: the pipeline's thread, overlap and
    delay settings have nothing to act on, so a value other than their default is refused
    rather than ignored.

    Raises:
      ConfigError: one line naming the field.
    """
    from sebulba.anakin.suites import is_jax_env_id
    from sebulba.errors import ConfigError

    kinds = {is_jax_env_id(task_id) for task_id in task_ids}
    if kinds == {False}:
        if config.pipeline.updates_per_call != 1:
            raise ConfigError(
                f"pipeline.updates_per_call must be 1 with envpool tasks, got "
                f"{config.pipeline.updates_per_call!r}: it sets how many updates one call of "
                "an Anakin program runs, and the Sebulba pipeline's learner takes each "
                "rollout from its actors as it comes"
            )
        return False
    env_field = "env.ids" if len(task_ids) > 1 else "env.id"
    if len(kinds) > 1:
        raise ConfigError(
            f"{env_field} mixes JAX envs and envpool tasks ({', '.join(task_ids)}): a run "
            "is either Anakin (JAX envs) or Sebulba (envpool)"
        )
    what = f"{task_ids[0]!r} is a JAX env" if len(task_ids) == 1 else "name JAX envs"
    why = f"{env_field} {what}, which the Anakin runner steps"
    refused = {
        "pipeline.num_actor_threads": (config.pipeline.num_actor_threads, 1, "actor threads"),
        "pipeline.overlap_env_steps": (config.pipeline.overlap_env_steps, False, "envpool pools"),
        "debug.actor_delay_s": (config.debug.actor_delay_s, 0.0, "actors to delay"),
        "debug.actor_delay_jitter_s": (
            config.debug.get("actor_delay_jitter_s", 0.0),
            0.0,
            "actors to delay",
        ),
        "debug.learner_delay_s": (config.debug.learner_delay_s, 0.0, "learner thread to delay"),
        "mesh.actor_platform": (
            config.mesh.get("actor_platform", "default"),
            "default",
            "actor devices",
        ),
    }
    for field, (value, default, what) in refused.items():
        if value != default:
            raise ConfigError(
                f"{field} must be {default!r} with a JAX env, got {value!r}: {why} in one "
                f"program, with no {what}"
            )
    return True
