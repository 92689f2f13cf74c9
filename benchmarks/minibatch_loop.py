"""Rolled scan vs unrolled minibatch loop on a CPU learner, per network: compile and update time.

    python benchmarks/minibatch_loop.py      # ~10 min on 2 CPU cores (two unrolled
                                              # MinAtar updates compile for minutes)

`agent.minibatch_loop` loops over an update's gradient steps with a rolled `lax.scan`
("scan") or unrolls them into straight-line code ("unrolled"). This prints, for each
network a CPU user trains, the learner update compiled both ways as the pipeline compiles
it (one CPU device, `sebulba.preflight.memory.update_compiler_options`): compile time,
update time (the best of two after a warm-up call), the update time as a ratio of the
unrolled one, and how many updates the unrolled loop needs to win back its longer
compile ("never" where it is not faster).

For the convolutional networks a third row runs the rolled scan with JAX's own
convolution gradients (`lax.conv_general_dilated`) instead of the networks'
(`sebulba.agents.convolution`, which XLA:CPU runs in Eigen's layout inside a loop): the
before and after of that change, in one run.

Each case is a shipped config at its shipped update size unless the row says otherwise;
rollouts are random, of the shapes the agent's act step gives.
"""

from __future__ import annotations

import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from config_spec import apply_overrides, load_config  # noqa: E402

from sebulba.agents import networks, resolve_agent  # noqa: E402
from sebulba.agents.api import ArraySpec, Discrete, EnvSpec, Rollout  # noqa: E402
from sebulba.config.sizes import derive_sizes  # noqa: E402
from sebulba.preflight.memory import update_compiler_options  # noqa: E402
from sebulba.runtime import platforms  # noqa: E402

# libtpu's errors about a TPU it cannot find never show where no accelerator exists.
platforms.skip_absent_accelerators()

CARTPOLE = EnvSpec("CartPole-v1", ArraySpec((4,), "float32"), Discrete(2))
MINATAR = EnvSpec("gymnax:Breakout-MinAtar", ArraySpec((10, 10, 4), "bool"), Discrete(3))
BREAKOUT = EnvSpec("Breakout-v5", ArraySpec((4, 84, 84), "uint8"), Discrete(4), is_atari=True)
# The throughput benchmark's Atari update size: 16 envs x 32 steps, 4 minibatches, 1 epoch.
SMALL_ATARI = [
    "env.num_envs=16",
    "agent.num_steps=32",
    "agent.num_minibatches=4",
    "agent.update_epochs=1",
]
# label -> (config, env spec, overrides)
CASES = {
    "PPO CartPole MLP": ("configs/ppo_cartpole.py", CARTPOLE, []),
    "PPO MinAtar CNN": ("configs/ppo_minatar.py:Breakout", MINATAR, []),
    "PQN MinAtar CNN": ("configs/pqn_minatar.py:Breakout", MINATAR, []),
    "PPO Breakout Nature CNN": (
        "configs/ppo_atari.py:Breakout-v5",
        BREAKOUT,
        [*SMALL_ATARI, "agent.network=nature_cnn"],
    ),
    "PPO Breakout IMPALA ResNet": ("configs/ppo_atari.py:Breakout-v5", BREAKOUT, SMALL_ATARI),
}


def random_rollout(agent, env_spec: EnvSpec, state, num_steps: int, num_envs: int) -> Rollout:
    """A rollout of random values in the shapes `agent`'s act step gives (its stored
    outputs included), with every step valid."""
    T, B = num_steps, num_envs
    rng = np.random.default_rng(0)
    spec = env_spec.observation
    if spec.dtype == "uint8":
        obs = rng.integers(0, 255, (T + 1, B, *spec.shape), dtype=np.uint8)
    elif spec.dtype == "bool":
        obs = rng.random((T + 1, B, *spec.shape)) < 0.2
    else:
        obs = rng.normal(size=(T + 1, B, *spec.shape)).astype(np.float32)
    keys = jax.random.split(jax.random.key(0), B)
    _, outputs = jax.eval_shape(agent.act, jax.eval_shape(agent.policy_params, state), obs[0], keys)
    return Rollout(
        obs=obs,
        actions=rng.integers(0, env_spec.num_actions, (T, B)).astype(np.int32),
        rewards=rng.normal(size=(T, B)).astype(np.float32),
        terminations=rng.random((T, B)) < 0.02,
        truncations=np.zeros((T, B), bool),
        valid=np.ones((T, B), bool),
        policy_outputs=jax.tree.map(
            lambda v: rng.normal(size=(T + 1, *v.shape)).astype(v.dtype), outputs
        ),
        env_ids=np.arange(B, dtype=np.int32),
    )


def measure(config_spec: str, env_spec: EnvSpec, overrides: list[str], loop: str):
    """(compile seconds, update seconds, the update in words) of one loop."""
    config = load_config(os.path.join(ROOT, config_spec))
    apply_overrides(config, [*overrides, f"agent.minibatch_loop={loop}"])
    agent = resolve_agent(config.agent.name, config.agent).make(
        config, env_spec, derive_sizes(config)
    )
    state = agent.init(jax.random.key(0))
    rollout = random_rollout(agent, env_spec, state, config.agent.num_steps, config.env.num_envs)
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
    for _ in range(2):
        start = time.perf_counter()
        state, metrics = compiled(state, rollout)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - start)
    agent_config = config.agent
    steps = agent_config.num_minibatches * agent_config.get("update_epochs", 1)
    shape = f"{config.env.num_envs} envs x {agent_config.num_steps} steps, {steps} gradient steps"
    return compile_s, min(times), shape


def with_jax_convolution_gradients(run):
    """Runs `run()` with the networks' Conv layers on `lax.conv_general_dilated`."""
    chosen = networks.conv_general_dilated
    networks.conv_general_dilated = lambda: jax.lax.conv_general_dilated
    try:
        return run()
    finally:
        networks.conv_general_dilated = chosen


def main() -> None:
    print(f"jax {jax.__version__}, {jax.default_backend()}")
    print(
        "| update | loop | convolution gradients | compile (s) | update (s) "
        "| update time / unrolled | updates for unrolled to pay back |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, (config_spec, env_spec, overrides) in CASES.items():
        convolutional = env_spec.observation.dtype != "float32"
        gradients = "sebulba's" if convolutional else "-"
        unrolled = measure(config_spec, env_spec, overrides, "unrolled")
        rows = [
            ("unrolled", gradients, unrolled),
            ("scan", gradients, measure(config_spec, env_spec, overrides, "scan")),
        ]
        if convolutional:
            before = with_jax_convolution_gradients(
                lambda c=config_spec, e=env_spec, o=overrides: measure(c, e, o, "scan")
            )
            rows.append(("scan", "JAX's", before))
        shape = unrolled[2]
        for loop, gradients, (compile_s, update_s, _) in rows:
            ratio = update_s / unrolled[1]
            if loop == "unrolled":
                payback = "-"
            elif update_s <= unrolled[1]:
                payback = "never"
            else:
                payback = f"{(unrolled[0] - compile_s) / (update_s - unrolled[1]):.0f}"
            print(
                f"| {label} ({shape}) | {loop} | {gradients} | {compile_s:.1f} | {update_s:.4f} "
                f"| {ratio:.2f} | {payback} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
