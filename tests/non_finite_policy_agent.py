"""The minimal agent, except that its policy outputs turn NaN from a parameter version on.

Selected by dotted path. The learner never reads the outputs, so only the actors' check
of each rollout can stop such a run: the tests use it to show that a non-finite rollout
stops the run before the handoff, naming the thread, the loop and the step.
"""

import jax
import jax.numpy as jnp

from sebulba.agents.api import Agent
from tests import minimal_agent


def get_config():
    config = minimal_agent.get_config()
    config.name = "tests.non_finite_policy_agent"  # Selected by dotted path.
    config.non_finite_from_version = 3  # First parameter version whose outputs are NaN.
    return config


def make(config, env_spec, sizes) -> Agent:
    agent = minimal_agent.make(config, env_spec, sizes)

    @jax.jit  # Called outside jit by the learner, where the loop disallows implicit transfers.
    def policy_params(state):
        # state.updates updates make version updates + 1.
        poisoned = state.updates + 1 >= config.agent.non_finite_from_version
        return {**state.params, "poison": jnp.where(poisoned, jnp.nan, 0.0)}

    def act(params, obs, keys):
        clean = {name: value for name, value in params.items() if name != "poison"}
        actions, outputs = agent.act(clean, obs, keys)
        return actions, {"logits": outputs["logits"] + params["poison"]}

    return Agent(
        init=agent.init,
        act=act,
        update=agent.update,
        policy_params=policy_params,
        act_greedy=lambda params, obs: agent.act_greedy(
            {name: value for name, value in params.items() if name != "poison"}, obs
        ),
    )
