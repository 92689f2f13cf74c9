"""PQN on CartPole-v1 (envpool, Sebulba pipeline), with purejaxql's CartPole settings.

purejaxql's `config/alg/pqn_cartpole.yaml` (Gallici et al. 2024): 32 envs x 64 steps,
500k env steps (244 updates), 4 epochs x 16 minibatches of 128 samples, RAdam at 1e-4
decayed linearly to 0 over every gradient step, gradient norm 10, an MLP of two 256-unit
ReLU layers each followed by a LayerNorm, gamma 0.99, Q(lambda) with lambda 0.95,
rewards scaled by 0.1, epsilon from 1 to 0.2 over the first 20% of the updates.

Deliberate differences from purejaxql:
  * Actors act with the version before the learner's (`pipeline.policy_lag=1`), while
    purejaxql collects and learns in one synchronous loop (`--config.pipeline.policy_lag=0`
    gives its schedule). The targets use the learner's current network either way,
    re-evaluating the rollout at the update's start, where purejaxql stores the Q-values
    its actors computed (`--config.agent.q_targets=behaviour` does too: the same values
    under lag 0, version k - 1's under lag 1, one forward pass fewer).
  * envpool's CartPole-v1 instead of gymnax's (the same dynamics); its 500-step time
    limit is a truncation that bootstraps, where purejaxql's `done` ends the return.
  * Minibatches shuffle each env's 64 steps (`time_shuffled`, 4 steps of all 32 envs per
    minibatch) instead of one flat shuffle of the 2,048 samples, so a minibatch never
    leaves its learner device.
  * Weights are initialised orthogonally (gain sqrt(2), the Q head 1), biases zero,
    where purejaxql keeps flax's lecun_normal.

`:smoke` is a seconds-long run used by the tests.
"""

from sebulba.agents import defaults
from sebulba.config import base_config, parse_variant, smoke_run


def get_config(arg: str | None = None):
    variant = parse_variant(arg, "pqn_cartpole")
    # purejaxql's Atari settings (the agent's defaults) but for the lines below.
    config = base_config(defaults.pqn_config())
    config.env.id = "CartPole-v1"
    config.env.num_envs = 32
    config.total_timesteps = 500_000
    config.agent.network = "mlp"
    config.agent.hidden_sizes = (256, 256)
    config.agent.num_steps = 64
    config.agent.num_minibatches = 16
    config.agent.update_epochs = 4
    config.agent.learning_rate = 1e-4
    config.agent.anneal_lr = True
    config.agent.q_lambda = 0.95
    config.agent.reward_scale = 0.1
    config.agent.epsilon_finish = 0.2
    config.agent.exploration_fraction = 0.2
    config.log.every_updates = 10
    if "smoke" in variant:
        smoke_run(config, num_envs=8, num_steps=16, update_epochs=2, updates=4)
    return config
