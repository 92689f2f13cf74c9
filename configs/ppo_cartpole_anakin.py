"""PPO on gymnax's CartPole-v1 in Anakin mode: envs, acting and learning in one program.

The same hyperparameters as `configs/ppo_cartpole.py` (CleanRL's ppo.py: 4 envs x 128
steps, Adam at 2.5e-4 annealed to 0, 4 minibatches x 4 epochs, clip 0.2, entropy 0.01),
which are also PureJaxRL's CartPole settings, with the JAX env `gymnax:CartPole-v1`
instead of envpool's. On-policy (`pipeline.policy_lag=0`), as PureJaxRL is: Anakin has
no actors to overlap with the learner (docs/anakin.md).

Variants: `:smoke` is a seconds-long run used by the tests.
"""

from sebulba.agents import defaults
from sebulba.config import base_config, parse_variant


def get_config(arg: str | None = None):
    variant = parse_variant(arg, "ppo_cartpole_anakin")
    config = base_config(defaults.ppo_config())
    config.env.id = "gymnax:CartPole-v1"
    config.env.num_envs = 4
    config.total_timesteps = 500_000
    config.pipeline.policy_lag = 0
    config.agent.network = "mlp"
    config.agent.num_steps = 128
    config.agent.learning_rate = 2.5e-4
    config.agent.num_minibatches = 4
    config.agent.update_epochs = 4
    config.agent.clip_coef = 0.2
    config.agent.ent_coef = 0.01
    config.log.every_updates = 10
    if "smoke" in variant:
        config.env.num_envs = 8
        config.total_timesteps = 8 * 16 * 4
        config.agent.num_steps = 16
        config.agent.num_minibatches = 2
        config.agent.update_epochs = 2
        config.log.every_updates = 1
    return config
