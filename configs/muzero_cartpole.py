"""Gumbel MuZero on CartPole-v1 (envpool actors): the search on the actor devices, the
model learnt from windows replayed on the learner devices.

`:smoke` is a seconds-long run used by the tests.
"""

from sebulba.agents import defaults
from sebulba.config import base_config, parse_variant


def get_config(arg: str | None = None):
    variant = parse_variant(arg, "muzero_cartpole")
    config = base_config(defaults.muzero_config())
    config.env.id = "CartPole-v1"
    config.env.num_envs = 8
    config.total_timesteps = 100_000
    config.log.every_updates = 50
    if "smoke" in variant:
        config.total_timesteps = 8 * 10 * 6
        config.agent.buffer_size = 8 * 10 * 4
        config.agent.batch_size = 16
        config.agent.learning_starts = 8 * 10 * 2
        config.agent.num_simulations = 4
        config.log.every_updates = 1
    return config
