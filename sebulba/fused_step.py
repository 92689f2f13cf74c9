"""The fused step: where one device both acts and learns, update k and rollout k + 1 as one program.

XLA gives each device one compute stream, so on one GPU a rollout program and an update
program never run at the same time: acting and learning take turns, whatever the
threads. Under the one-step lag they need not. Update k and rollout k + 1 both read
parameter version k and nothing else of each other, so they can be one program:

    (learner state at version k, rollout k, the envs' device state)
        -> (state at version k + 1, metrics, rollout k + 1, the envs' device state)

Inside it the update runs as its plan's pieces (`Agent.plan_update`: one micro-batch
gradient each), each queued between an env step's send and its receive
(`scan_actor`). envpool's send synchronises the stream and hands the actions to its
threads; the piece's kernels then run on the device while the host's CPUs step the envs,
and the receive's copy follows them in stream order.

It is an execution choice, not another algorithm: the rollouts carry the versions of the
threaded pipeline's schedule, the pieces are the update's own loop in its own order, and
on the same machine the final `params_checksum` is the threaded pipeline's
(tests/test_fused.py). `pipeline.fused` chooses it: "auto" takes it where it can pay, on a
GPU that is the run's only actor and learner device with the scan loop; "on" asks for it
wherever it can run (any platform, for tests); "off" never. The first rollout of a run
(or of a resume) is collected by the plain rollout program, and the last update runs
alone, since no rollout follows it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import jax

from sebulba.actors.consistency_check import ConsistencyCheck
from sebulba.actors.rollouts import ActorRollout, in_env_order
from sebulba.agents.api import Agent, Rollout
from sebulba.config import FUSED_CHOICES
from sebulba.config.sizes import Sizes
from sebulba.errors import ConfigError
from sebulba.lag_schedule import required_policy_version
from sebulba.mesh import DeviceLayout
from sebulba.preflight.memory import update_compiler_options
from sebulba.runtime import compile_progress
from sebulba.update_report import UpdateReport


def unsupported_reason(
    agent: Agent,
    layout: DeviceLayout,
    sizes: Sizes,
    *,
    policy_lag: int,
    actor_loop: str,
    state_shapes: Any,
    rollout_shapes: Rollout,
    num_processes: int | None = None,
) -> str | None:
    """Why this run's update and next rollout cannot be one program; None if they can.

    `num_processes`: the run's processes (default `jax.process_count()`; `sebulba.check`
    passes the target slice's hosts)."""
    if policy_lag != 1:
        return (
            f"pipeline.policy_lag={policy_lag}: only the one-step lag lets update k and "
            "rollout k + 1 run together"
        )
    if agent.plan_update is None:
        return "the agent's update cannot be cut into pieces (its Agent has no plan_update)"
    if (jax.process_count() if num_processes is None else num_processes) > 1:
        return "several processes: their learner mesh spans hosts"
    one_device = (
        sizes.num_actor_threads == 1
        and len(layout.actor_devices) == 1
        and list(layout.local_learner_devices) == list(layout.actor_devices)
    )
    if not one_device:
        return (
            "actor and learner devices do not coincide: it needs one actor thread whose actor "
            "device is the one learner device (mesh.actor_device_ids == mesh.learner_device_ids, "
            "one id; pipeline.num_actor_threads=1)"
        )
    if actor_loop != "scan":
        return f"the actor loop is {actor_loop}: the fused step steps the envs in its program"
    steps, pieces = plan_size(agent, state_shapes, rollout_shapes)
    T = sizes.num_steps
    fits = steps % T == 0 if steps > T else pieces <= T // steps
    if not fits:
        return (
            f"the update's {steps} optimizer steps x {pieces} micro-batches do not fit the "
            f"{T}-step rollout: an env step takes one micro-batch of an optimizer step "
            f"(agent.gradient_accumulation_steps at most agent.num_steps / optimizer steps), "
            f"or whole optimizer steps where they are a multiple of agent.num_steps"
        )
    return None


def plan_size(agent: Agent, state_shapes: Any, rollout_shapes: Rollout) -> tuple[int, int]:
    """(optimizer steps, pieces per step) of the agent's update plan, from shapes alone."""
    found = {}

    def trace(state, rollout):
        plan = agent.plan_update(state, rollout)
        found["size"] = (plan.num_steps, plan.pieces_per_step)
        return ()

    jax.eval_shape(trace, state_shapes, rollout_shapes)
    return found["size"]


def choose_fused(
    requested: str, unsupported: Callable[[], str | None], platform: str
) -> tuple[bool, str]:
    """Whether the run fuses its update and next rollout, and why (for the log).

    `unsupported()` is `unsupported_reason` of the run, called only where the choice needs
    it (it traces the agent's update plan): never for "off", nor for "auto" off a GPU.

    Raises:
      ConfigError: "on" was asked for where it cannot run, or an unknown value.
    """
    if requested not in FUSED_CHOICES:
        raise ConfigError(f"pipeline.fused {requested!r} must be one of {', '.join(FUSED_CHOICES)}")
    if requested == "off":
        return False, "acting and learning in their own programs"
    if requested == "auto" and platform == "cpu":
        return False, (
            "on a cpu device the threaded pipeline measured faster for every config tried "
            "(docs/benchmarks.md, 'The fused step'); pipeline.fused='on' fuses anyway"
        )
    if requested == "auto" and platform != "gpu":
        return False, f"envpool has no {platform} kernels to step envs inside a program"
    reason = unsupported()
    if reason is not None:
        if requested == "on":
            raise ConfigError(f"pipeline.fused='on' cannot run here: {reason}")
        return False, reason
    if requested == "on":
        return True, "requested"
    return True, "actor and learner share one GPU: the update's pieces run while the envs step"


@dataclasses.dataclass
class FusedLoop:
    """Runs a pipeline's updates as fused steps, in the caller's thread (`Pipeline.run`).

    Args:
      pipeline: the `sebulba.pipeline.Pipeline` (its envs, agent, checks and compiled
        update, for the last one).
    """

    pipeline: Any

    def _fused_fn(self, program: Callable) -> Callable:
        agent = self.pipeline.agent

        def fused(learner_state, rollout: Rollout, states):
            plan = agent.plan_update(learner_state, rollout)
            params = agent.policy_params(learner_state)  # Version k collects rollout k + 1.
            next_states, episode_fields, pieces, plan_carry = program(params, states, plan)
            new_state, metrics = plan.finish(plan_carry)
            return new_state, metrics, next_states, episode_fields, pieces

        return fused

    def run(
        self,
        state,
        *,
        first_update: int,
        previous_params: Any,
        on_update: Callable[[UpdateReport, Any], None] | None,
        should_stop: Callable[[], bool] | None,
    ):
        """`Pipeline.run` (which documents the arguments) with fused steps."""
        p = self.pipeline
        sizes, lag = p.sizes, p.policy_lag
        device = p.layout.actor_devices[0]
        groups = p._actor_groups(0, p.envs_per_thread[0], device, first_update)
        collector = p._scan_collector(groups, device)
        expected_env_ids = p.piece_env_ids(0)
        consistency = None
        if p.consistency_checks:
            consistency = ConsistencyCheck(p.agent, p.seed, sizes.num_steps)
        first_version = required_policy_version(first_update, lag)
        if first_version == first_update:
            first_params = p.agent.policy_params(state)
        elif previous_params is not None:
            first_params = previous_params[0]  # The lagged versions, oldest first.
        else:
            raise ValueError(
                f"resuming at update {first_update} with policy_lag {lag} needs the "
                f"parameters of version {first_version}"
            )
        first_params = p.actor_copy(first_params, device)
        rollout_shapes = p.rollout_struct(state)
        shown = jax.process_index() == 0
        with compile_progress.announced("the first rollout's program", show=shown):
            collector.compile(first_params)
        shardings = p.agent.state_shardings(state, p.layout.sharding)
        jitted = jax.jit(
            self._fused_fn(collector.program.function),
            in_shardings=(shardings, jax.tree.map(lambda s: s.sharding, rollout_shapes), None),
            donate_argnums=0,
        )
        with compile_progress.announced("the fused update-and-rollout program", show=shown):
            # As the update's: on CPU the memory-optimised scheduler keeps an unrolled loop
            # to one minibatch's activations at a time.
            options = update_compiler_options(p.layout.local_learner_devices)
            lowered = jitted.lower(state, rollout_shapes, collector.states)
            fused = lowered.compile(compiler_options=options)

        def checked(rollout, update: int, version: int, params) -> ActorRollout:
            return p.hand_over(
                rollout,
                update=update,
                version=version,
                params=params,
                device=device,
                who=f"the fused step ({device.platform} device {device.id})",
                expected_env_ids=expected_env_ids,
                consistency=consistency,
                params_wait_s=0.0,
            )

        with jax.transfer_guard(p.transfer_guard):
            collector.states, fields, pieces = collector.program(first_params, collector.states)
            collected = collector.collected(fields, pieces)
            pending = checked(collected, first_update, first_version, first_params)
        del first_params
        for update in range(first_update, sizes.num_updates + 1):
            expected = required_policy_version(update, lag)
            if pending.update != update or pending.policy_version != expected:
                raise RuntimeError(
                    f"lag schedule violated: update {update} got rollout {pending.update} "
                    f"of version {pending.policy_version}, expected version {expected}"
                )
            if p.learner_delay_s:
                time.sleep(p.learner_delay_s)
            last = update == sizes.num_updates
            params = None
            with jax.transfer_guard(p.transfer_guard):
                rollout = p._assemble([pending])
                if last:
                    state, metrics = p._compiled_update(state, rollout)
                    next_rollout = None
                else:
                    if consistency is not None:  # The version that collects rollout k + 1.
                        params = p.actor_copy(p.agent.policy_params(state), device)
                    delay = p.actor_delay(0, update + 1)
                    if delay:
                        time.sleep(delay)
                    state, metrics, collector.states, fields, pieces = fused(
                        state, rollout, collector.states
                    )
                    next_rollout = collector.collected(fields, pieces)
                del rollout
            if on_update is not None:
                on_update(_report(p, pending, update, metrics), state)
            if next_rollout is not None:
                with jax.transfer_guard(p.transfer_guard):
                    pending = checked(next_rollout, update + 1, update, params)
            if should_stop is not None and should_stop() and not last:
                break
        return state


def _report(pipeline, rollout: ActorRollout, update: int, metrics) -> UpdateReport:
    """The report of update `update`, on rollout `rollout`: nothing waits in one program."""
    returns, lengths, env_ids = in_env_order(
        rollout.episode_returns, rollout.episode_lengths, rollout.episode_env_ids
    )
    return UpdateReport(
        update=update,
        global_step=update * pipeline.sizes.steps_per_update,
        actor_policy_version=rollout.policy_version,
        learner_policy_version=update + 1,
        rollout_wait_s=0.0,
        params_wait_s=0.0,
        episode_returns=returns,
        episode_lengths=lengths,
        episode_env_ids=env_ids,
        agent_metrics=metrics,
    )
