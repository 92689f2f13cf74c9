"""Gumbel MuZero on gymnax's MinAtar games in Anakin mode: acting with search, learning
from replay, stepping the envs, all in one program on the same devices.

The representation is sebulba's "minatar" torso (pgx's: a 2x2 convolution of 32
filters, 2x2 average pooling, a 64-unit dense layer) with one 128-unit ReLU layer and a
128-wide hidden state; dynamics and prediction are 128-128 MLPs with LayerNorm. 64 envs
x 10 steps per update, 16 simulations per search, windows of K = 5 and n = 10 steps,
one gradient step of 256 windows per 10 env steps from a 512,000-step ring, 5M env
steps, value targets bootstrapped from the learner's current value. A starting point,
not a tuned setting: measured only on Breakout and SpaceInvaders at a CPU budget of 300k
env steps, beside PPO at the same budget (docs/benchmarks.md, "MuZero on MinAtar at a CPU budget").

`:Breakout` (the default), `:Asterix`, `:Freeway`, `:SpaceInvaders` or `:Seaquest`
selects the game; `:smoke` is a seconds-long run used by the tests (with a game:
`:Asterix,smoke`).
"""

from sebulba.agents import defaults
from sebulba.config import base_config, minatar_variant


def get_config(arg: str | None = None):
    variant, env_id = minatar_variant(arg, "muzero_minatar")
    config = base_config(defaults.muzero_config())
    config.env.id = env_id
    config.env.num_envs = 64
    config.total_timesteps = 5_000_000
    config.agent.network = "minatar"
    config.agent.hidden_sizes = (128,)
    config.agent.latent_size = 128
    config.agent.model_hidden_sizes = (128, 128)
    config.agent.buffer_size = 512_000
    config.agent.learning_starts = 10_000
    config.log.every_updates = 100
    if "smoke" in variant:
        config.env.num_envs = 8
        config.total_timesteps = 8 * 10 * 4
        config.agent.buffer_size = 8 * 10 * 4
        config.agent.batch_size = 16
        config.agent.learning_starts = 8 * 10 * 2
        config.agent.num_simulations = 4
        config.log.every_updates = 1
    return config
