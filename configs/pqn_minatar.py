"""PQN on gymnax's MinAtar games in Anakin mode, with purejaxql's MinAtar settings.

purejaxql's `config/alg/pqn_minatar.yaml` (Gallici et al. 2024): 128 envs x 32 steps,
10M env steps (2,441 updates), 2 epochs x 32 minibatches of 128 samples, RAdam at 5e-4
decayed linearly to 0 over every gradient step, gradient norm 10, a LayerNorm after every
hidden layer, gamma 0.99, Q(lambda) with lambda 0.65, epsilon from 1 to 0.05 over the
first 10% of the updates. Collecting and learning alternate (`pipeline.policy_lag=0`),
as in purejaxql's one jitted loop.

Deliberate differences from purejaxql:
  * The network is sebulba's "minatar" torso (pgx's: a 2x2 convolution of 32 filters,
    2x2 average pooling, a 64-unit dense layer), each layer followed by a LayerNorm, then
    one 128-unit ReLU layer with a LayerNorm and the Q head; purejaxql's is a 3x3
    convolution of 16 filters and a 128-unit dense layer. Its grids enter as 0/1, where
    purejaxql divides them by 255 (which the LayerNorm after its first layer mostly
    cancels).
  * Weights are initialised orthogonally (gain sqrt(2), the Q head 1), biases zero,
    where purejaxql uses he_normal (and lecun_normal for its Q head).
  * Minibatches shuffle each env's 32 steps (`time_shuffled`: one step of every env per
    minibatch) instead of one flat shuffle of the 4,096 samples, so a minibatch never
    leaves its learner device.
  * gymnax's time limits are truncations that bootstrap, where purejaxql's `done` ends
    the return.
  * The learner re-evaluates the rollout with its network for the targets, where
    purejaxql takes the Q-values its actors stored: on-policy, the same values (to float
    rounding) at one more forward pass, 16% of the update's arithmetic
    (`benchmarks/pqn_targets.py`); `--config.agent.q_targets=behaviour` takes the stored
    ones, as purejaxql.

`:Breakout` (the default), `:Asterix`, `:Freeway`, `:SpaceInvaders` or `:Seaquest`
selects the game; `:smoke` is a seconds-long run used by the tests (with a game:
`:Asterix,smoke`).
"""

from sebulba.agents import defaults
from sebulba.config import base_config, minatar_variant, smoke_run


def get_config(arg: str | None = None):
    variant, env_id = minatar_variant(arg, "pqn_minatar")
    # purejaxql's MinAtar settings are its Atari ones (the agent's defaults) but for these.
    config = base_config(defaults.pqn_config())
    config.env.id = env_id
    config.env.num_envs = 128
    config.total_timesteps = 10_000_000
    config.pipeline.policy_lag = 0
    config.agent.network = "minatar"
    config.agent.hidden_sizes = (128,)
    config.agent.learning_rate = 5e-4
    config.agent.anneal_lr = True
    config.agent.epsilon_finish = 0.05
    config.log.every_updates = 50
    if "smoke" in variant:
        smoke_run(config, num_envs=8, num_steps=16, update_epochs=2, updates=4)
    return config
