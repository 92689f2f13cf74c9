"""PPO on CartPole-v1: the default config, trains on a laptop CPU in a few minutes.

Variants: `configs/ppo_cartpole.py:smoke` is a seconds-long run used by the tests.
"""

from sebulba.agents import defaults
from sebulba.config import base_config, parse_variant


def get_config(arg: str | None = None):
    variant = parse_variant(arg, "ppo_cartpole")
    config = base_config(defaults.ppo_config())
    config.env.id = "CartPole-v1"
    config.env.num_envs = 8
    config.total_timesteps = 500_000
    config.agent.network = "mlp"
    config.agent.num_steps = 128
    config.agent.learning_rate = 2.5e-4
    config.agent.num_minibatches = 4
    config.agent.update_epochs = 4
    config.agent.clip_coef = 0.2
    config.agent.ent_coef = 0.01
    config.log.every_updates = 10
    if "smoke" in variant:
        config.total_timesteps = 8 * 16 * 4
        config.agent.num_steps = 16
        config.agent.num_minibatches = 2
        config.agent.update_epochs = 2
        config.log.every_updates = 1
    return config
