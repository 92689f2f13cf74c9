"""Memory and speed of PPO's learner update on a CPU: minibatch loops and scheduling.

    python benchmarks/learner_memory.py             # small IMPALA-ResNet update, ~3 min
    python benchmarks/learner_memory.py --pong      # also the ppo_atari.py:Pong-v5 shapes

Compiles PPO's update (IMPALA ResNet on 84x84 frames) for one CPU device and prints,
per variant, XLA's temporary memory, the compile time and the best of three update
times, each also as a ratio to the unrolled loop under XLA's default CPU scheduler (the
behaviour before `sebulba.preflight.memory.update_compiler_options`):

* scan: the rolled `lax.scan` over minibatches (small, but slow conv gradients on CPU);
* unrolled, default scheduler: every step's activations alive at once;
* unrolled, memory-optimised scheduler: what the pipeline compiles on CPU now;
* the same with `agent.gradient_accumulation_steps` 2.

`--pong` compiles (does not run) the full Pong config's update, 128 envs x 128 steps,
with the default and the memory-optimised scheduler, with accumulation 4, and with
accumulation 4 in a rolled scan (about 10 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

from sebulba.agents import ppo
from sebulba.agents.api import ArraySpec, Discrete, EnvSpec, Rollout
from sebulba.config import base_config
from sebulba.config.sizes import derive_sizes
from sebulba.preflight.memory import update_compiler_options
from sebulba.runtime import platforms

# libtpu's errors about a TPU it cannot find never show where no accelerator exists.
platforms.skip_absent_accelerators()

PONG = EnvSpec("Pong-v5", ArraySpec((4, 84, 84), "uint8"), Discrete(6), is_atari=True)


def make_update(num_steps: int, num_envs: int, **agent):
    config = base_config(ppo.get_config())
    config.env.num_envs = num_envs
    config.agent.num_steps = num_steps
    config.agent.network = "impala_resnet"
    config.total_timesteps = num_steps * num_envs * 10
    for name, value in agent.items():
        config.agent[name] = value
    return ppo.make(config, PONG, derive_sizes(config))


def random_rollout(num_steps: int, num_envs: int, abstract: bool = False) -> Rollout:
    T, B = num_steps, num_envs
    shapes = Rollout(
        obs=((T + 1, B, *PONG.obs_shape), np.uint8),
        actions=((T, B), np.int32),
        rewards=((T, B), np.float32),
        terminations=((T, B), np.bool_),
        truncations=((T, B), np.bool_),
        valid=((T, B), np.bool_),
        policy_outputs={"logprob": ((T + 1, B), np.float32), "value": ((T + 1, B), np.float32)},
        env_ids=((B,), np.int32),
    )
    # A leaf is a (shape, dtype) pair; the feed-forward agent's initial_carry is ().
    is_leaf = lambda x: isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], tuple)  # noqa: E731
    if abstract:
        return jax.tree.map(lambda s: jax.ShapeDtypeStruct(*s), shapes, is_leaf=is_leaf)
    rng = np.random.default_rng(0)

    def sample(shape_dtype):
        shape, dtype = shape_dtype
        if dtype == np.bool_:
            return rng.random(shape) < 0.05
        if dtype == np.uint8:
            return rng.integers(0, 255, shape, dtype=np.uint8)
        if dtype == np.int32:
            return rng.integers(0, PONG.num_actions, shape).astype(np.int32)
        return rng.normal(size=shape).astype(np.float32) * 0.1 - 1.0

    rollout = jax.tree.map(sample, shapes, is_leaf=is_leaf)
    return rollout.replace(valid=np.ones((T, B), bool), env_ids=np.arange(B, dtype=np.int32))


def compile_update(agent, rollout, memory_optimised: bool):
    options = update_compiler_options(jax.devices()) if memory_optimised else {}
    state = jax.eval_shape(agent.init, jax.random.key(0))
    start = time.perf_counter()
    compiled = (
        jax.jit(agent.update, donate_argnums=0)
        .lower(state, rollout)
        .compile(compiler_options=options)
    )
    return compiled, time.perf_counter() - start


def measure(label: str, num_steps: int, num_envs: int, memory_optimised: bool, run: bool, **agent):
    agent_fns = make_update(num_steps, num_envs, **agent)
    rollout = random_rollout(num_steps, num_envs, abstract=not run)
    compiled, compile_s = compile_update(agent_fns, rollout, memory_optimised)
    row = {
        "variant": label,
        "temp_mib": compiled.memory_analysis().temp_size_in_bytes / 2**20,
        "compile_s": compile_s,
        "step_s": float("nan"),
    }
    if run:
        times = []
        for _ in range(4):
            state = jax.block_until_ready(agent_fns.init(jax.random.key(0)))
            start = time.perf_counter()
            jax.block_until_ready(compiled(state, rollout))
            times.append(time.perf_counter() - start)
        row["step_s"] = min(times[1:])  # The first call pays one-time allocation.
    print(
        f"{label:<48} temp {row['temp_mib']:>10,.1f} MiB  compile {compile_s:5.1f} s  "
        f"update {row['step_s']:.3f} s",
        flush=True,
    )
    return row


def small(args) -> None:
    T, B, E = args.num_steps, args.num_envs, args.update_epochs
    print(
        f"PPO update, IMPALA ResNet, {B} envs x {T} steps, 4 minibatches x {E} epochs "
        f"({4 * E} optimizer steps of {T * B // 4} samples), 1 CPU device, "
        f"agent.max_pool={args.max_pool}"
    )
    common = dict(
        num_steps=T, num_envs=B, update_epochs=E, num_minibatches=4, max_pool=args.max_pool
    )
    rows = [
        measure(
            "scan (rolled loop)", **common, memory_optimised=True, run=True, minibatch_loop="scan"
        ),
        measure(
            "unrolled, default scheduler (before)",
            **common,
            memory_optimised=False,
            run=True,
            minibatch_loop="unrolled",
        ),
        measure(
            "unrolled, memory-optimised scheduler (now)",
            **common,
            memory_optimised=True,
            run=True,
            minibatch_loop="unrolled",
        ),
        measure(
            "unrolled, memory-optimised, accumulation 2",
            **common,
            memory_optimised=True,
            run=True,
            minibatch_loop="unrolled",
            gradient_accumulation_steps=2,
        ),
    ]
    before = rows[1]
    print("ratios to 'unrolled, default scheduler (before)':")
    for row in rows:
        print(
            f"  {row['variant']:<46} temp x{row['temp_mib'] / before['temp_mib']:.2f}  "
            f"update time x{row['step_s'] / before['step_s']:.2f}"
        )


def pong(max_pool: str) -> None:
    print(
        "ppo_atari.py:Pong-v5 shapes: 128 envs x 128 steps, 4 minibatches x 4 epochs "
        "(compiled only)"
    )
    common = dict(
        num_steps=128, num_envs=128, minibatch_loop="unrolled", run=False, max_pool=max_pool
    )
    measure("Pong, unrolled, default scheduler (before)", **common, memory_optimised=False)
    measure("Pong, unrolled, memory-optimised (now)", **common, memory_optimised=True)
    measure(
        "Pong, unrolled, memory-optimised, accumulation 4",
        **common,
        memory_optimised=True,
        gradient_accumulation_steps=4,
    )
    common["minibatch_loop"] = "scan"
    measure(
        "Pong, scan, accumulation 4", **common, memory_optimised=True, gradient_accumulation_steps=4
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_steps", type=int, default=8)
    parser.add_argument("--num_envs", type=int, default=4)
    parser.add_argument("--update_epochs", type=int, default=2)
    parser.add_argument("--pong", action="store_true", help="also compile the Pong config")
    parser.add_argument(
        "--max_pool", default="auto", help="agent.max_pool: auto | slices | reduce_window"
    )
    args = parser.parse_args()
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}")
    small(args)
    if args.pong:
        pong(args.max_pool)


if __name__ == "__main__":
    main()
