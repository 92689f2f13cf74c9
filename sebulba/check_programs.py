"""The programs `python -m sebulba.check` compiles, built and lowered as the launch builds them.

`learner_program` lowers the learner update (or an Anakin run's act-and-learn program);
`actor_programs` an actor thread's policy step and, for a scan actor on GPUs, its rollout
program with envpool's custom calls and, where the launch fuses, the fused step's
program. `Compiles` compiles them for the target: for GPUs in the background, two at a
time, while the next are lowered. `sebulba.check` reads what they cost.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import re
import sys
from collections.abc import Callable
from typing import Any

from sebulba.preflight import accelerators, gpu_targets
from sebulba.runtime import compile_progress


def with_sharding(tree, sharding):
    import jax

    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), tree)


def tree_bytes(tree) -> int:
    import jax
    import numpy as np

    return sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


# What XLA's TPU compiler says when a program's buffers exceed the chip's HBM, e.g.
# "... HLO temporaries (806.17G) exceeds available HBM (15.75G)" or "Used 20.5G of 15.75G hbm".
_OUT_OF_MEMORY = re.compile(r"([0-9.]+)([KMGT])\b.*?([0-9.]+)([KMGT])\b")
_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def compile_or_refusal(lowered) -> tuple[Any, tuple[int, int] | None]:
    """-> (the compiled program, None), or (None, (bytes needed, bytes available)) where the
    compiler refused it for want of device memory."""
    try:
        return lowered.compile(), None
    except Exception as error:  # noqa: BLE001 - only an out-of-memory refusal is a verdict.
        text = str(error)
        figures = _OUT_OF_MEMORY.search(text.partition("memory")[2])
        if "RESOURCE_EXHAUSTED" not in text or figures is None:
            raise
        needed, unit, available, available_unit = figures.groups()
        return None, (
            int(float(needed) * _UNITS[unit]),
            int(float(available) * _UNITS[available_unit]),
        )


def learner_program(config, run, state):
    """The learner's compiled program as the launch compiles it: the pipeline's update, or
    an Anakin run's act-and-learn program (`sebulba.train` builds its runner the same way)
    -> (lowered program, rollout struct for the memory check, the Anakin runner or None)."""
    from sebulba import pipeline, train

    if run.is_anakin:
        jax_env = train.make_jax_env(config, run.sizes, run.env_spec)
        runner = train.make_anakin_runner(
            config, run.agent, run.layout, run.sizes, jax_env, run.env_spec
        )
        # Its rollout lives inside the program (in its temporaries), as at launch.
        return runner.lower_update(state), (), runner
    rollout = pipeline.rollout_struct(run.agent, run.env_spec, run.sizes, run.layout, state)
    return pipeline.lower_update(run.agent, run.layout, state, rollout), rollout, None


def actor_loop(config, chip: accelerators.Chip) -> str:
    """The actor loop whose memory is counted: envpool's XLA interface has no TPU kernels
    (step); on GPUs "auto" is counted as scan, the loop that holds a whole rollout."""
    requested = config.pipeline.get("actor_loop", "step")
    return "scan" if chip.is_gpu and requested in ("scan", "auto") else "step"


class Compiles:
    """Compiles the check's lowered programs, each announced on stderr.

    For GPUs (XLA:GPU takes seconds to tens of seconds a program) two compile in the
    background while the next programs are built and lowered, and JAX's disk cache is left
    out: it would keep executables of compile-only devices, which no process can load
    again. `configs/ppo_atari.py` on `h100:1` took 35 s so, 43 s compiling one program
    after another (2 cores). Otherwise each program compiles when its result is first
    asked for, in that order.
    """

    def __init__(self, for_gpus: bool):
        self._context = gpu_targets.not_persistently_cached if for_gpus else contextlib.nullcontext
        self._pool = concurrent.futures.ThreadPoolExecutor(2) if for_gpus else None

    def submit(self, what: str, lowered, refusals: bool = False) -> Callable[[], Any]:
        """-> a function that returns the compiled program; with `refusals`,
        `compile_or_refusal`'s (program, None) or (None, (bytes needed, bytes available))."""

        def run():
            with self._context(), compile_progress.announced(what, stream=sys.stderr):
                return compile_or_refusal(lowered) if refusals else lowered.compile()

        if self._pool is None:
            return functools.cache(run)
        return self._pool.submit(run).result

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)


@dataclasses.dataclass(frozen=True)
class ActorPrograms:
    """An actor thread's programs on its actor device, each a function returning it
    compiled: the policy step, and for a scan actor on a GPU its rollout program and,
    where the launch fuses, the fused step's program (None where not compiled); `envs`,
    the pools whose envpool calls those two make."""

    step: Callable[[], Any]
    params: Any  # The policy parameters' shapes on the actor device.
    rollout: Callable[[], Any] | None = None
    fused: Callable[[], Any] | None = None
    envs: list = dataclasses.field(default_factory=list)


def actor_programs(config, run, state, rollout, chip, fused: bool, compiles) -> ActorPrograms:
    """Lowers an actor thread's programs (`ActorPrograms`) and hands them to `compiles`.

    A scan actor on a GPU runs its rollout program (`scan_actor.build_rollout_program`),
    and where the launch fuses, the fused step's (`fused_step.FusedLoop`): both are
    lowered as the launch lowers them, with the envpool pools of one thread, made and
    reset here but never stepped, which register envpool's custom calls for the compiler
    and lend the programs their handles.
    """
    import jax
    import numpy as np

    from sebulba.actors.actor_step import actor_step
    from sebulba.environments import spaces

    layout, sizes, agent = run.layout, run.sizes, run.agent
    on_actor = jax.sharding.SingleDeviceSharding(layout.actor_devices[0])
    n = sizes.envs_per_thread
    params = with_sharding(jax.eval_shape(agent.policy_params, state), on_actor)
    step_inputs = with_sharding(
        (
            jax.eval_shape(lambda: agent.new_carry(n)),
            spaces.observation_struct(run.env_spec.observation, n),
            jax.ShapeDtypeStruct((n,), np.bool_),
            jax.ShapeDtypeStruct((n,), np.int32),
            jax.ShapeDtypeStruct((), np.int32),
        ),
        on_actor,
    )
    step = jax.jit(functools.partial(actor_step, agent, config.seed))
    lowered = step.lower(params, *step_inputs)
    compiled_step = compiles.submit(f"the actors' policy step for {chip.name}", lowered)
    if actor_loop(config, chip) != "scan" or chip.proxy:
        return ActorPrograms(compiled_step, params)

    from sebulba import fused_step, pipeline, train

    envs = train.make_env_pools(config, sizes, first_update=1)
    try:
        launch = pipeline.Pipeline(
            agent,
            layout,
            sizes,
            envs,
            env_spec=run.env_spec,
            seed=config.seed,
            policy_lag=config.pipeline.policy_lag,
            clip_rewards=config.env.clip_rewards,
            actor_loop="scan",
            fused=fused,
        )
        # The groups' device state is made on the host, then described on the actor GPU.
        host = jax.devices("cpu")[0]
        collector = launch._scan_collector(launch._actor_groups(0, envs[0], host, 1), host)
        states = with_sharding(collector.states, on_actor)
        device = layout.actor_devices[0].device_kind
        lowered = jax.jit(collector.program.function).lower(params, states)
        compiled_rollout = compiles.submit(
            f"one actor thread's rollout program for {device}", lowered
        )
        compiled_fused = None
        if fused:
            jitted = jax.jit(
                fused_step.FusedLoop(launch)._fused_fn(collector.program.function),
                in_shardings=(
                    agent.state_shardings(state, layout.sharding),
                    jax.tree.map(lambda s: s.sharding, rollout),
                    None,
                ),
                donate_argnums=0,
            )
            lowered = jitted.lower(state, rollout, states)
            compiled_fused = compiles.submit("the fused update-and-rollout program", lowered)
    except BaseException:
        for pool in envs:
            pool.close()
        raise
    return ActorPrograms(compiled_step, params, compiled_rollout, compiled_fused, envs)
