"""What PQN's learner saves by taking the actors' Q-values for its targets (`agent.q_targets`).

    python benchmarks/pqn_targets.py     # ~1 min on 2 CPU cores

With `agent.q_targets="learner"` (the default) each update first evaluates the rollout's
T + 1 observations with the learner's network; with `"behaviour"` the actors' Q-values,
stored in the rollout, are used instead (purejaxql's way; under policy lag 0 the same
values). For `configs/pqn_minatar.py` and `configs/pqn_atari.py` at their shipped sizes,
prints the floating-point operations of one compiled learner update each way, as XLA's
cost analysis of the program counts them, and their ratio. Counted, not timed: the
figure is the same on any machine and load. The update is compiled unrolled (XLA counts a
rolled loop's body once) with one minibatch per epoch, which spares compiling the shipped
64-step loop unrolled (minutes on a CPU): a
split groups the same samples differently and adds only the optimizer's own arithmetic
per step (on MinAtar's network 4 minibatches count 0.4% more than 1), so the shipped
update's saving is a little smaller than the ratio printed.
"""

from __future__ import annotations

import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from sebulba.agents import pqn  # noqa: E402
from sebulba.agents.api import ArraySpec, Discrete, EnvSpec, Rollout  # noqa: E402
from sebulba.config.sizes import derive_sizes  # noqa: E402
from sebulba.runtime import platforms  # noqa: E402

# libtpu's errors about a TPU it cannot find never show where no accelerator exists.
platforms.skip_absent_accelerators()

# The shipped configs' default games, as their envs present them.
ENV_SPECS = {
    "pqn_minatar": EnvSpec("gymnax:Breakout-MinAtar", ArraySpec((10, 10, 4), "bool"), Discrete(3)),
    "pqn_atari": EnvSpec("Breakout-v5", ArraySpec((4, 84, 84), "uint8"), Discrete(4)),
}


def load_config(name: str):
    path = os.path.join(ROOT, "configs", f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()


def rollout_shapes(agent, env_spec: EnvSpec, state, num_steps: int, num_envs: int) -> Rollout:
    """The shapes of a rollout of `agent`'s (its stored outputs included)."""
    T, B = num_steps, num_envs
    observation = env_spec.observation
    obs = jax.ShapeDtypeStruct((B, *observation.shape), np.dtype(observation.dtype))
    keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), B))
    params = jax.eval_shape(agent.policy_params, state)
    _, outputs = jax.eval_shape(agent.act, params, obs, keys)
    return Rollout(
        obs=jax.ShapeDtypeStruct((T + 1, *obs.shape), obs.dtype),
        actions=jax.ShapeDtypeStruct((T, B), jnp.int32),
        rewards=jax.ShapeDtypeStruct((T, B), jnp.float32),
        terminations=jax.ShapeDtypeStruct((T, B), jnp.bool_),
        truncations=jax.ShapeDtypeStruct((T, B), jnp.bool_),
        valid=jax.ShapeDtypeStruct((T, B), jnp.bool_),
        policy_outputs=jax.tree.map(
            lambda v: jax.ShapeDtypeStruct((T + 1, *v.shape), v.dtype), outputs
        ),
        env_ids=jax.ShapeDtypeStruct((B,), jnp.int32),
    )


def update_flops(name: str, q_targets: str) -> tuple[float, str]:
    """(floating-point operations of one learner update, the update's shape in words)."""
    config = load_config(name)
    config.agent.q_targets = q_targets
    shape = (
        f"{config.env.num_envs} envs x {config.agent.num_steps} steps, "
        f"{config.agent.update_epochs} epochs"
    )
    config.agent.num_minibatches = 1
    # XLA's cost analysis counts a rolled loop's body once: unrolled, every step counts.
    config.agent.minibatch_loop = "unrolled"
    agent = pqn.make(config, ENV_SPECS[name], derive_sizes(config))
    state = jax.eval_shape(agent.init, jax.random.key(0))
    rollout = rollout_shapes(
        agent, ENV_SPECS[name], state, config.agent.num_steps, config.env.num_envs
    )
    analysis = jax.jit(agent.update).lower(state, rollout).compile().cost_analysis()
    analysis = analysis[0] if isinstance(analysis, list) else analysis
    return float(analysis["flops"]), shape


def main() -> None:
    print(f"jax {jax.__version__}, {jax.default_backend()}")
    print("| config | update | q_targets | GFLOP per update | behaviour / learner |")
    print("|---|---|---|---|---|")
    for name in ENV_SPECS:
        learner, shape = update_flops(name, "learner")
        behaviour, _ = update_flops(name, "behaviour")
        for q_targets, flops in (("learner", learner), ("behaviour", behaviour)):
            ratio = flops / learner
            print(f"| {name} | {shape} | {q_targets} | {flops / 1e9:.2f} | {ratio:.3f} |")


if __name__ == "__main__":
    main()
