"""Rolled scan vs unrolled minibatch loop on a CPU learner: compile time and update time.

    python benchmarks/minibatch_loop.py

`agent.minibatch_loop="auto"` unrolls the loop over minibatches only for convolutional
networks on CPU (XLA:CPU runs convolution gradients inside a rolled `lax.scan` many
times slower) and keeps the rolled scan for MLPs, whose unrolled update compiles for
much longer without running faster. This prints both variants of PPO's update for the
shipped CartPole MLP (`configs/ppo_cartpole.py`: 8 envs x 128 steps, 4 minibatches x 4
epochs) and for Breakout with the Nature CNN at the throughput benchmark's size (16 envs
x 32 steps, 4 minibatches x 1 epoch), compiled as the pipeline compiles it (one CPU
device, `sebulba.preflight.memory.update_compiler_options`); update time is the best of three
after a warm-up call.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from sebulba.agents import ppo  # noqa: E402
from sebulba.agents.api import ArraySpec, Discrete, EnvSpec, Rollout  # noqa: E402
from sebulba.config import base_config  # noqa: E402
from sebulba.config.sizes import derive_sizes  # noqa: E402
from sebulba.preflight.memory import update_compiler_options  # noqa: E402
from sebulba.runtime import platforms  # noqa: E402

# libtpu's errors about a TPU it cannot find never show where no accelerator exists.
platforms.skip_absent_accelerators()

CARTPOLE = EnvSpec("CartPole-v1", ArraySpec((4,), "float32"), Discrete(2))
BREAKOUT = EnvSpec("Breakout-v5", ArraySpec((4, 84, 84), "uint8"), Discrete(18), is_atari=True)
CASES = {
    "CartPole MLP (8 envs x 128 steps, 4 mb x 4 epochs)": (
        CARTPOLE,
        dict(network="mlp", num_steps=128, num_minibatches=4, update_epochs=4),
        8,
    ),
    "Breakout Nature CNN (16 envs x 32 steps, 4 mb x 1 epoch)": (
        BREAKOUT,
        dict(network="nature_cnn", num_steps=32, num_minibatches=4, update_epochs=1),
        16,
    ),
}


def random_rollout(spec: EnvSpec, T: int, B: int) -> Rollout:
    rng = np.random.default_rng(0)
    obs_spec = spec.observation
    if obs_spec.dtype == "uint8":
        obs = rng.integers(0, 255, (T + 1, B, *obs_spec.shape), dtype=np.uint8)
    else:
        obs = rng.normal(size=(T + 1, B, *obs_spec.shape)).astype(np.float32)
    return Rollout(
        obs=obs,
        actions=rng.integers(0, spec.num_actions, (T, B)).astype(np.int32),
        rewards=rng.normal(size=(T, B)).astype(np.float32),
        terminations=rng.random((T, B)) < 0.02,
        truncations=np.zeros((T, B), bool),
        valid=np.ones((T, B), bool),
        policy_outputs={
            "logprob": np.full((T + 1, B), -np.log(spec.num_actions), np.float32),
            "value": rng.normal(size=(T + 1, B)).astype(np.float32),
        },
        env_ids=np.arange(B, dtype=np.int32),
    )


def measure(spec: EnvSpec, agent_overrides: dict, num_envs: int, loop: str) -> tuple[float, float]:
    config = base_config(ppo.get_config())
    config.env.num_envs = num_envs
    for name, value in {**agent_overrides, "minibatch_loop": loop}.items():
        config.agent[name] = value
    config.total_timesteps = num_envs * config.agent.num_steps * 100
    agent = ppo.make(config, spec, derive_sizes(config))
    rollout = random_rollout(spec, config.agent.num_steps, num_envs)
    state = agent.init(jax.random.key(0))
    start = time.perf_counter()
    compiled = (
        jax.jit(agent.update, donate_argnums=0)
        .lower(state, rollout)
        .compile(compiler_options=update_compiler_options(jax.devices()[:1]))
    )
    compile_s = time.perf_counter() - start
    state, metrics = compiled(state, rollout)
    jax.block_until_ready(metrics)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        state, metrics = compiled(state, rollout)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - start)
    return compile_s, min(times)


def main() -> None:
    print(f"jax {jax.__version__}, {jax.default_backend()}")
    print("| update | loop | compile (s) | update (s) | update time / unrolled |")
    print("|---|---|---|---|---|")
    for label, (spec, overrides, num_envs) in CASES.items():
        rows = {loop: measure(spec, overrides, num_envs, loop) for loop in ("unrolled", "scan")}
        for loop, (compile_s, update_s) in rows.items():
            ratio = update_s / rows["unrolled"][1]
            print(f"| {label} | {loop} | {compile_s:.1f} | {update_s:.4f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
