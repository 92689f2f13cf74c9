"""The test-only minimal agent on CartPole, for command-line tests.

`:probe` selects the probe agent that records behaviour policy versions, `:diverging`
the agent whose loss turns NaN at update 3, `:non_finite` the agent whose policy outputs
turn NaN from version 3.
"""

from sebulba.config import base_config
from tests import diverging_agent, minimal_agent, non_finite_policy_agent, probe_agent

VARIANTS = {
    "probe": probe_agent,
    "diverging": diverging_agent,
    "non_finite": non_finite_policy_agent,
}


def get_config(arg: str | None = None):
    agent = VARIANTS.get(arg, minimal_agent)
    config = base_config(agent.get_config())
    config.env.num_envs = 8
    config.total_timesteps = 8 * config.agent.num_steps * 6
    config.log.tensorboard = False
    config.log.console_every_s = 0.0  # A progress line per update: the tests read them.
    return config
