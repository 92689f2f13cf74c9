"""SAC's learner update as the pipeline compiles it against a plain `jax.jit(agent.update)`.

    python benchmarks/sac_update.py [--rounds=5] [--updates=3]

Both run `configs/sac_mujoco.py`'s update (HalfCheetah-v4's sizes: 17 observations, 6
actions; 8 envs x 8 steps per update, so 64 critic steps of 256 transitions each, a
1M-transition buffer) on the same initial state and rollout. "pipeline" is the program
the learner runs: `sebulba.pipeline.lower_update` (the state placed by
`Agent.state_partition_specs` and donated, the rollout split along envs) compiled with
the learner's compiler options; "plain" is `jax.jit(agent.update)` with no shardings and
no donation, so each update copies the buffer it writes to; "plain, donated" is the same
jit with the state donated, which separates the cost of that copy from the rest of what
the pipeline adds (placement, compiler options). `agent.learning_starts` is 0 here, so
every update takes its critic steps. The three are measured in alternating rounds (the
machine may be shared) and each reports the median over its updates of updates/s, critic
steps/s and env steps/s; the ratio is pipeline / plain.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import jax  # noqa: E402
import numpy as np  # noqa: E402

from sebulba.agents import sac  # noqa: E402
from sebulba.agents.api import ArraySpec, Box, EnvSpec, Rollout  # noqa: E402
from sebulba.config.sizes import derive_sizes  # noqa: E402
from sebulba.mesh import build_layout  # noqa: E402
from sebulba.pipeline import lower_update, rollout_struct  # noqa: E402
from sebulba.preflight.memory import update_compiler_options  # noqa: E402
from sebulba.runtime import platforms  # noqa: E402

# libtpu's errors about a TPU it cannot find never show where no accelerator exists.
platforms.skip_absent_accelerators()

HALF_CHEETAH = EnvSpec(
    "HalfCheetah-v4", ArraySpec((17,), "float32"), Box((6,), (-1.0,) * 6, (1.0,) * 6)
)


def load_config(name: str):
    path = os.path.join(ROOT, "configs", f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()


def random_rollout(num_steps: int, num_envs: int) -> Rollout:
    rng = np.random.default_rng(0)
    return Rollout(
        obs=rng.normal(size=(num_steps + 1, num_envs, 17)).astype(np.float32),
        actions=rng.uniform(-1, 1, size=(num_steps, num_envs, 6)).astype(np.float32),
        rewards=rng.normal(size=(num_steps, num_envs)).astype(np.float32),
        terminations=np.zeros((num_steps, num_envs), bool),
        truncations=np.zeros((num_steps, num_envs), bool),
        valid=np.ones((num_steps, num_envs), bool),
        policy_outputs={},
        env_ids=np.arange(num_envs, dtype=np.int32),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds")
    parser.add_argument("--updates", type=int, default=3, help="timed updates per round")
    args = parser.parse_args()

    config = load_config("sac_mujoco")
    config.agent.learning_starts = 0
    sizes = derive_sizes(config)
    agent = sac.make(config, HALF_CHEETAH, sizes)
    layout = build_layout(config.mesh)
    shapes = jax.eval_shape(agent.init, jax.random.key(0))
    state_shardings = agent.state_shardings(shapes, layout.sharding)
    init = jax.jit(agent.init, out_shardings=state_shardings)
    rollout_shapes = rollout_struct(agent, HALF_CHEETAH, sizes, layout, shapes)
    rollout = jax.device_put(
        random_rollout(sizes.num_steps, sizes.num_envs),
        jax.tree.map(lambda s: s.sharding, rollout_shapes),
    )
    state_shapes = jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), shapes, state_shardings
    )
    options = update_compiler_options(layout.local_learner_devices)
    pipeline_update = lower_update(agent, layout, state_shapes, rollout_shapes).compile(
        compiler_options=options
    )
    plain_update = jax.jit(agent.update)

    updates = {
        "pipeline": pipeline_update,
        "plain": plain_update,
        "plain, donated": jax.jit(agent.update, donate_argnums=0),
    }
    states = {name: init(jax.random.key(0)) for name in updates}
    seconds = {name: [] for name in updates}

    def step(name: str) -> float:
        start = time.perf_counter()
        states[name], metrics = updates[name](states[name], rollout)
        jax.block_until_ready((states[name], metrics))
        return time.perf_counter() - start

    for name in updates:  # Compiles the plain jits; warms every update up.
        step(name)
    for _ in range(args.rounds):
        for name in updates:
            seconds[name].extend(step(name) for _ in range(args.updates))

    critic_steps = round(config.agent.replay_ratio * sizes.steps_per_update)
    print(
        f"SAC update, {HALF_CHEETAH.env_id} sizes: {sizes.num_envs} envs x {sizes.num_steps} "
        f"steps, {critic_steps} critic steps of {config.agent.batch_size} per update, "
        f"buffer {config.agent.buffer_size}; {jax.devices()[0].platform}, "
        f"{args.rounds} rounds x {args.updates} updates each\n"
    )
    print("| update | updates/s | critic steps/s | env steps/s |")
    print("|---|---|---|---|")
    rates = {}
    for name in updates:
        rates[name] = 1.0 / statistics.median(seconds[name])
        print(
            f"| {name} | {rates[name]:.2f} | {rates[name] * critic_steps:.0f} | "
            f"{rates[name] * sizes.steps_per_update:.0f} |"
        )
    print(f"\nratio pipeline / plain: {rates['pipeline'] / rates['plain']:.2f}")


if __name__ == "__main__":
    main()
