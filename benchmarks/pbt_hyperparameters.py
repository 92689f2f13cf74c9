"""Which agent keys a population can mutate, per built-in agent (docs/pbt.md's table).

    python benchmarks/pbt_hyperparameters.py

For each built-in agent's small config on a JAX env (CartPole; Pendulum for SAC), traces
the two-member population's program with each positive float key of the agent section
as a traced value (`SeedBatch.lower`, as `pbt.population` does; nothing is compiled or
trained) and prints a markdown row: the keys that trace, and those the agent reads as a
Python number while it builds its functions, which a population refuses.
"""

from __future__ import annotations

import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from config_spec import load_config  # noqa: E402

from sebulba import train  # noqa: E402
from sebulba.anakin.seeds import SeedBatch  # noqa: E402
from sebulba.config.run_plan import plan  # noqa: E402
from sebulba.errors import ConfigError  # noqa: E402
from sebulba.runtime import platforms  # noqa: E402

platforms.skip_absent_accelerators()

CARTPOLE = "gymnax:CartPole-v1"
CONFIGS = (
    ("configs/ppo_cartpole_anakin.py:smoke", CARTPOLE),
    ("configs/impala_cartpole.py:smoke", CARTPOLE),
    ("configs/pqn_cartpole.py:smoke", CARTPOLE),
    ("configs/dqn_cartpole.py:smoke", CARTPOLE),
    ("configs/sac_brax.py:smoke", "gymnax:Pendulum-v1"),
    ("configs/muzero_cartpole.py:smoke", CARTPOLE),
)


def mutable_keys(spec: str, env_id: str) -> tuple[str, list[str], list[str]]:
    """(agent name, keys that trace, keys refused) of one config."""
    config = load_config(spec)
    config.env.id = env_id
    setup = train.prepare(config, plan(config))
    batch = SeedBatch(config, setup, (1, 2))
    state = train.init_learner_state(setup)

    def two(tree):
        return jax.tree.map(lambda x: jnp.stack([x, x]), tree)

    behaviours = None
    if config.pipeline.policy_lag:
        behaviours = two((setup.agent.policy_params(state),) * config.pipeline.policy_lag)
    states, actings = two(state), batch.initial_acting_states()
    traced, refused = [], []
    for name, value in sorted(config.agent.items()):
        if isinstance(value, bool) or not isinstance(value, float) or value <= 0:
            continue
        values = {name: jnp.asarray([value, value], jnp.float32)}
        try:
            with contextlib.redirect_stdout(sys.stderr):
                batch.lower(states, behaviours, actings, values)
            traced.append(name)
        except ConfigError:
            refused.append(name)
    return config.agent.name, traced, refused


def main() -> None:
    print(f"jax {jax.__version__}; every positive float key of each agent section\n")
    print("| agent | mutable | refused |")
    print("|---|---|---|")
    for spec, env_id in CONFIGS:
        name, traced, refused = mutable_keys(spec, env_id)
        shown = [", ".join(f"`{key}`" for key in keys) or "none" for keys in (traced, refused)]
        print(f"| {name} | {shown[0]} | {shown[1]} |", flush=True)


if __name__ == "__main__":
    main()
