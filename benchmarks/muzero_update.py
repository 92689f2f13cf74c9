"""What one MuZero learner update costs, and which of its parts: the bootstrap values,
Reanalyse, the gradient steps themselves.

    python benchmarks/muzero_update.py                           # muzero_minatar:Breakout
    python benchmarks/muzero_update.py --config=muzero_cartpole --rounds=5

Each row is the config's update with one setting changed (`--config.agent.KEY=VALUE`
as a run would take it), compiled as the learner runs it (`sebulba.pipeline.lower_update`:
the state placed and donated, the learner's compiler options) on the same initial state
and a rollout of random observations, after enough updates that every gradient step
samples from the ring. The rows are measured in alternating rounds (the machine may be
shared) and each reports the median over its updates of seconds per update, gradient
steps/s and env steps/s, the last being the learner's ceiling on the run's steps/s (the
actors' searches and the envs cost more on top; in Anakin mode they run in the same
program). `--buffer_size` sets the ring's size (the shipped 512,000 steps of MinAtar
observations take 0.8 GB per row); it changes what a step writes, not what a gradient
step reads.
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

from sebulba.agents.api import Rollout  # noqa: E402
from sebulba.config.run_plan import plan  # noqa: E402
from sebulba.pipeline import lower_update, rollout_struct  # noqa: E402
from sebulba.preflight.memory import update_compiler_options  # noqa: E402
from sebulba.runtime import platforms  # noqa: E402

# libtpu's errors about a TPU it cannot find never show where no accelerator exists.
platforms.skip_absent_accelerators()

# (row name, agent overrides): the shipped update, then one setting changed per row.
ROWS = (
    ("as shipped", {}),
    ("value_bootstrap=search", {"value_bootstrap": "search"}),
    ("reanalyse_fraction=0.25", {"reanalyse_fraction": 0.25}),
)


def load_config(config: str):
    """ "muzero_minatar:Breakout" -> configs/muzero_minatar.py's get_config("Breakout")."""
    name, _, variant = config.partition(":")
    path = os.path.join(ROOT, "configs", f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(variant or None)


def random_rollout(env_spec, agent, sizes, params) -> Rollout:
    """T steps of B envs with random observations, actions and rewards, and the
    policy outputs the actors' search gives those observations."""
    rng = np.random.default_rng(0)
    steps, envs = sizes.num_steps, sizes.num_envs

    def observation(spec):
        values = rng.integers(0, 2, size=(steps + 1, envs, *spec.shape))
        return values.astype(spec.dtype)

    obs = jax.tree.map(observation, env_spec.observation)
    keys = jax.random.split(jax.random.key(1), envs)
    _, outputs = jax.jit(agent.act)(params, jax.tree.map(lambda x: x[0], obs), keys)
    outputs = jax.tree.map(lambda x: np.broadcast_to(x, (steps + 1, *x.shape)), outputs)
    return Rollout(
        obs=obs,
        actions=rng.integers(0, env_spec.action.num_actions, size=(steps, envs)).astype(np.int32),
        rewards=rng.integers(0, 2, size=(steps, envs)).astype(np.float32),
        terminations=rng.random((steps, envs)) < 0.01,
        truncations=np.zeros((steps, envs), bool),
        valid=np.ones((steps, envs), bool),
        policy_outputs=outputs,
        env_ids=np.arange(envs, dtype=np.int32),
    )


def compiled_update(config):
    """(the update as the learner compiles it, its initial state, a rollout, sizes)."""
    run = plan(config)
    env_spec, sizes, agent, layout = run.env_spec, run.sizes, run.agent, run.layout
    shapes = jax.eval_shape(agent.init, jax.random.key(0))
    state_shardings = agent.state_shardings(shapes, layout.sharding)
    state = jax.jit(agent.init, out_shardings=state_shardings)(jax.random.key(0))
    rollout_shapes = rollout_struct(agent, env_spec, sizes, layout, shapes)
    rollout = jax.device_put(
        random_rollout(env_spec, agent, sizes, agent.policy_params(state)),
        jax.tree.map(lambda s: s.sharding, rollout_shapes),
    )
    state_shapes = jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), shapes, state_shardings
    )
    options = update_compiler_options(layout.local_learner_devices)
    update = lower_update(agent, layout, state_shapes, rollout_shapes).compile(
        compiler_options=options
    )
    return update, state, rollout, sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="muzero_minatar:Breakout", help="NAME[:VARIANT]")
    parser.add_argument("--buffer_size", type=int, default=0, help="ring steps (0: the config's)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--updates", type=int, default=2, help="timed updates per round")
    args = parser.parse_args()

    runs, configs = {}, {}
    for name, overrides in ROWS:
        config = load_config(args.config)
        if args.buffer_size:
            config.agent.buffer_size = args.buffer_size
        config.agent.learning_starts = 0
        for key, value in overrides.items():
            config.agent[key] = value
        configs[name] = config
        runs[name] = list(compiled_update(config))
    seconds = {name: [] for name in runs}

    def step(name: str) -> float:
        update, state, rollout, _ = runs[name]
        start = time.perf_counter()
        state, metrics = update(state, rollout)
        jax.block_until_ready((state, metrics))
        runs[name][1] = state
        return time.perf_counter() - start

    # Until every window fits in what the ring holds, some gradient steps are skipped.
    config = configs["as shipped"]
    warm = -(-(config.agent.unroll_steps + config.agent.td_steps + 1) // config.agent.num_steps)
    for name in runs:
        for _ in range(warm + 1):
            step(name)
    for _ in range(args.rounds):
        for name in runs:
            seconds[name].extend(step(name) for _ in range(args.updates))

    sizes = runs["as shipped"][3]
    gradient_steps = round(config.agent.replay_ratio * sizes.steps_per_update)
    print(
        f"MuZero update, {args.config}: {config.env.id}, {sizes.num_envs} envs x "
        f"{sizes.num_steps} steps, {gradient_steps} gradient steps of "
        f"{config.agent.batch_size} windows (K = {config.agent.unroll_steps}, n = "
        f"{config.agent.td_steps}) per update, ring {config.agent.buffer_size} steps; "
        f"{jax.devices()[0].platform}, {args.rounds} rounds x {args.updates} updates each\n"
    )
    print("| update | seconds/update | gradient steps/s | env steps/s (learner ceiling) |")
    print("|---|---|---|---|")
    for name in runs:
        median = statistics.median(seconds[name])
        print(
            f"| {name} | {median:.2f} | {gradient_steps / median:.1f} | "
            f"{sizes.steps_per_update / median:.0f} |"
        )


if __name__ == "__main__":
    main()
