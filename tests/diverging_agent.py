"""The minimal agent, except that its loss turns NaN from `agent.diverge_at_update` on.

Selected by dotted path; it lets the tests check that a diverging run stops itself.
"""

import jax.numpy as jnp

from sebulba.agents.api import Agent
from tests import minimal_agent


def get_config():
    config = minimal_agent.get_config()
    config.name = "tests.diverging_agent"  # Selected by dotted path.
    config.diverge_at_update = 3  # First update whose loss (and parameters) are NaN.
    return config


def make(config, env_spec, sizes) -> Agent:
    agent = minimal_agent.make(config, env_spec, sizes)

    def update(state, rollout):
        state, metrics = agent.update(state, rollout)
        # state.updates is the number of updates done, this one included.
        poison = jnp.where(state.updates >= config.agent.diverge_at_update, jnp.nan, 0.0)
        params = {name: value + poison for name, value in state.params.items()}
        return state.replace(params=params), {"loss": metrics["loss"] + poison}

    return Agent(
        init=agent.init,
        act=agent.act,
        update=update,
        policy_params=agent.policy_params,
        act_greedy=agent.act_greedy,
    )
