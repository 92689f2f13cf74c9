"""PPO on gymnax's MinAtar games in Anakin mode, with pgx's MinAtar PPO settings.

The reference is pgx's `examples/minatar-ppo` (sotetsuk/pgx, a PureJaxRL derivative):
its network (`agent.network="minatar"`: a 2x2 convolution of 32 filters, 2x2 average
pooling, a 64-unit dense layer, separate 64-64 tanh actor and critic) and its
hyperparameters: 128 steps per env, minibatches of 4096 samples for 3 epochs, Adam at
3e-4 held constant (no annealing), gamma 0.99, GAE lambda 0.95, clip 0.2 for the
surrogate and the value loss, entropy 0.01, value coefficient 0.5, gradient norm 0.5,
advantages normalised per minibatch. On-policy (`pipeline.policy_lag=0`), as pgx is.

Deliberate differences:
  * 128 envs instead of 4096: a rollout of 16,384 steps, so 4 minibatches of 4096 per
    epoch instead of 128 (the same samples per gradient step, the same 3 passes).
  * 5M env steps instead of 20M (gymnax-blines trains its MinAtar PPO for 10M): what
    fits in about 30 minutes per game on a 2-core CPU (docs/benchmarks.md, "MinAtar",
    records each game's steps/s and wall time). The step size is held constant, so a
    longer run (`--config.total_timesteps=10_000_000`) repeats a shorter one's updates
    and continues them.
  * The envs are gymnax's MinAtar (minimal action sets, no sticky actions), not pgx's
    own (sticky actions with probability 0.1), so pgx's returns compare only roughly;
    gymnax-blines' curves are on these envs, with an MLP.
  * Initialisation is the module's (baselines'): orthogonal weights, zero biases, where
    pgx keeps haiku's defaults (truncated normal of variance 1 / fan_in).
  * Minibatches are shuffled in time within each env column (`time_shuffled`, so that a
    minibatch stays on its device), not over all samples.
  * Episodes end at gymnax's time limit (`max_steps_in_episode`: 1000 steps, 2500 for
    Freeway), counted as truncations and bootstrapped; pgx's MinAtar has no time limit.

docs/benchmarks.md ("MinAtar") has each game's recorded return at 5M steps beside
gymnax-blines' PPO at the same step count. pgx's large batches take few gradient steps
per env step (12 per 16,384 here, against gymnax-blines' 32 per 8,192), so at 5M steps
this config is the less sample-efficient of the two; pgx trains for 20M.

`:Breakout` (the default), `:Asterix`, `:Freeway`, `:SpaceInvaders` or `:Seaquest`
selects the game; `:smoke` is a seconds-long run used by the tests (with a game:
`:Asterix,smoke`).
"""

from sebulba.agents import defaults
from sebulba.config import base_config, minatar_variant, smoke_run


def get_config(arg: str | None = None):
    variant, env_id = minatar_variant(arg, "ppo_minatar")
    # The agent's defaults (baselines') are pgx's but for the lines below.
    config = base_config(defaults.ppo_config())
    config.env.id = env_id
    config.env.num_envs = 128
    config.total_timesteps = 5_000_000  # 305 updates of 16,384 steps.
    config.pipeline.policy_lag = 0
    config.agent.network = "minatar"
    config.agent.num_steps = 128
    config.agent.learning_rate = 3e-4
    config.agent.anneal_lr = False
    config.agent.num_minibatches = 4  # Of 4096 samples, as pgx's.
    config.agent.update_epochs = 3
    config.agent.clip_coef = 0.2
    config.log.every_updates = 10
    if "smoke" in variant:
        smoke_run(config, num_envs=8, num_steps=16, update_epochs=2, updates=4)
    return config
