"""The minimal agent, except that a metric turns non-finite from `agent.diverge_at_update` on.

Selected by dotted path; it lets the tests check that a diverging run stops itself: by
default its loss (and parameters) turn NaN; `agent.diverging_metric` names another metric
that turns infinite while the loss stays finite, as PPO's `approx_kl` does on a rollout
with an impossible action.
"""

import jax.numpy as jnp

from sebulba.agents.api import Agent
from tests import minimal_agent


def get_config():
    config = minimal_agent.get_config()
    config.name = "tests.diverging_agent"  # Selected by dotted path.
    config.diverge_at_update = 3  # First update whose loss (and parameters) are NaN.
    config.diverging_metric = "loss"  # Another name: only that metric (inf) diverges.
    return config


def make(config, env_spec, sizes) -> Agent:
    agent = minimal_agent.make(config, env_spec, sizes)

    def update(state, rollout):
        state, metrics = agent.update(state, rollout)
        # state.updates is the number of updates done, this one included.
        diverged = state.updates >= config.agent.diverge_at_update
        if config.agent.diverging_metric != "loss":
            return state, {
                **metrics,
                config.agent.diverging_metric: jnp.where(diverged, jnp.inf, 0.0),
            }
        poison = jnp.where(diverged, jnp.nan, 0.0)
        params = {name: value + poison for name, value in state.params.items()}
        return state.replace(params=params), {"loss": metrics["loss"] + poison}

    return Agent(
        init=agent.init,
        act=agent.act,
        update=update,
        policy_params=agent.policy_params,
        act_greedy=agent.act_greedy,
    )
