"""PPO on gymnax's MinAtar games in Anakin mode, with pgx's MinAtar PPO settings but 4x the
gradient steps (16 minibatches of 1,024 samples where pgx takes 4 of 4,096 per rollout).

The reference is pgx's `examples/minatar-ppo` (sotetsuk/pgx, a PureJaxRL derivative):
its network (`agent.network="minatar"`: a 2x2 convolution of 32 filters, 2x2 average
pooling, a 64-unit dense layer, separate 64-64 tanh actor and critic) and its
hyperparameters: 128 steps per env, minibatches of 4096 samples for 3 epochs, Adam at
3e-4 held constant (no annealing), gamma 0.99, GAE lambda 0.95, clip 0.2 for the
surrogate and the value loss, entropy 0.01, value coefficient 0.5, gradient norm 0.5,
advantages normalised per minibatch. On-policy (`pipeline.policy_lag=0`), as pgx is.

Deliberate differences:
  * 128 envs instead of 4096: a rollout of 16,384 steps per update.
  * 16 minibatches of 1,024 samples per epoch (48 gradient steps per update) instead of
    pgx's 4,096-sample minibatches (which would leave 4 per epoch here, 12 gradient steps
    per update). pgx's large batches are made for 4,096 envs on an accelerator and 20M
    steps; on 128 envs and a 5M-step budget they stall Breakout at 7.5
    (docs/benchmarks.md, "Why Breakout stalls with the pgx settings"), where 16
    minibatches learn it. `:pgx` keeps pgx's minibatch size (4 minibatches), and with it
    every other setting above: the settings as pgx ships them, but for the env count.
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
gymnax-blines' PPO at the same step count. With pgx's minibatch size (`:pgx`), 12
gradient steps per 16,384 env steps, Breakout holds a near-deterministic policy at 5.5
from 1.3M steps (entropy 0.25, explained variance 1.00); 4x the step size gives 7.0,
`:cpu`'s MLP in place of the CNN 6.0, and 16 minibatches 25.1 at 2M steps
(docs/benchmarks.md, "Why Breakout stalls with the pgx settings"). gymnax's Breakout steps
as pgx's (tests/test_minatar.py), and its 1,000-step limit is far above these episodes'
lengths.

`:purejaxrl` trains PureJaxRL's MinAtar PPO instead, like for like (docs/benchmarks.md,
"Like for like with PureJaxRL on MinAtar"): its settings are those of PureJaxRL's
`examples/brax_minatar.ipynb` (luchris429/purejaxrl; `purejaxrl/ppo.py` run on
SpaceInvaders-MinAtar), and its network is PureJaxRL's `ActorCritic`: the grid flattened
into separate 64-64 ReLU actor and critic MLPs (`agent.network="mlp"`,
`agent.activation="relu"`), orthogonal weights (gain sqrt(2), 0.01 for the policy head,
1 for the value head) and zero biases, as here. Its hyperparameters: 64 envs x 128 steps,
8 minibatches of 1024 samples x 4 epochs, Adam at 5e-3 (eps 1e-5) annealed linearly per
update, gamma 0.99, GAE lambda 0.95, clip 0.2 for the surrogate and the value loss,
entropy 0.01, value coefficient 0.5, gradient norm 0.5, advantages normalised per
minibatch, 10M env steps, on-policy. Deliberate differences from PureJaxRL:
  * Minibatches are shuffled in time within each env column (`time_shuffled`: each
    minibatch takes 16 steps of every env), where PureJaxRL permutes all 8,192 samples.
  * gymnax's time limits are truncations that bootstrap from the next observation,
    where PureJaxRL's `done` ends the return.
  * Random streams are sebulba's (`sebulba.random_streams`), so a seed gives other
    initial weights, env starts and actions than PureJaxRL's `PRNGKey(seed)`.
  * One jitted program per update, called from a host loop that reads finished
    episodes and logs metrics, where PureJaxRL scans every update in one program.

`:cpu` trains gymnax-blines' MinAtar PPO instead (RobertTLange/gymnax-blines,
`agents/<game>-MinAtar/ppo.yaml`, the same for every game, `utils/ppo.py`,
`utils/models.py`), the sample-efficient setting for a 5M-step budget on a CPU: the grid
flattened into separate 256-256 ReLU actor and critic MLPs (`agent.network="mlp"`,
`agent.activation="relu"`, `agent.hidden_sizes=(256, 256)`); 64 envs x 128 steps, 8
minibatches of 1024 samples x 4 epochs (32 gradient steps per 8,192 env steps, where the
pgx settings take 12 per 16,384), Adam at 5e-4 (eps 1e-5) held constant, gamma 0.999, GAE
lambda 0.95, clip 0.2 for the surrogate and the value loss, entropy 0.01, value
coefficient 0.5, gradient norm 0.5, advantages normalised per minibatch, on-policy.
gymnax-blines' `lr_warmup: 0.05` changes nothing: its warm-up runs from `lr_begin` to
`lr_end`, both 5e-4, so its step size is constant too. Deliberate differences:
  * 5M env steps instead of 10M: the budget of the other variants' records, and what
    fits in minutes per game on a 2-core CPU (docs/benchmarks.md, "MinAtar"). The step
    size is constant, so `--config.total_timesteps=10_000_000` continues the same run.
  * Initialisation is the module's (baselines'): orthogonal weights (gain sqrt(2), 0.01
    for the policy head, 1 for the value head) and zero biases, where gymnax-blines keeps
    flax's default kernels (LeCun normal) and draws biases uniformly from [0, 0.05).
  * Minibatches are shuffled in time within each env column (`time_shuffled`), where
    gymnax-blines permutes all 8,192 samples (with a key it never advances, so every
    update takes the same sequence of permutations).
  * A rollout is 128 steps per env bootstrapped from the next observation, where
    gymnax-blines steps each env 129 times per update and trains on the first 128 (the
    129th only bootstraps, and its transition is not trained on).
  * gymnax's time limits are truncations that bootstrap from the next observation, where
    gymnax-blines' `done` ends the return.
  * Random streams are sebulba's, so a seed gives other weights, env starts and actions.
  * The recorded return is the mean of the last 100 training episodes (and
    `sebulba.evaluate`'s 20 episodes), where gymnax-blines logs the mean return of 164
    test episodes of the sampled policy.

`:pgx` trains with pgx's minibatch size (4 minibatches of 4,096 samples, 12 gradient steps
per update), everything else as above.

`:Breakout` (the default), `:Asterix`, `:Freeway`, `:SpaceInvaders` or `:Seaquest`
selects the game; `:smoke` is a seconds-long run used by the tests (with a game and the
PureJaxRL or gymnax-blines settings: `:Asterix,smoke`, `:Breakout,purejaxrl,smoke`,
`:Breakout,cpu,smoke`).
"""

from sebulba.agents import defaults
from sebulba.config import base_config, minatar_variant, smoke_run


def get_config(arg: str | None = None):
    variant, env_id = minatar_variant(
        arg, "ppo_minatar", keywords=("smoke", "purejaxrl", "cpu", "pgx")
    )
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
    # Of 1,024 samples: 48 gradient steps per update, 4x pgx's (its 4,096-sample minibatches
    # stall Breakout at 5M steps on 128 envs; `:pgx` keeps them).
    config.agent.num_minibatches = 16
    config.agent.update_epochs = 3
    config.agent.clip_coef = 0.2
    config.log.every_updates = 10
    if sum(name in variant for name in ("purejaxrl", "cpu", "pgx")) > 1:
        raise ValueError("ppo_minatar: choose one of the variants purejaxrl, cpu and pgx")
    if "pgx" in variant:
        config.agent.num_minibatches = 4  # Of 4,096 samples, as pgx's.
    if "purejaxrl" in variant:
        _purejaxrl_settings(config)
    if "cpu" in variant:
        _gymnax_blines_settings(config)
    if "smoke" in variant:
        smoke_run(config, num_envs=8, num_steps=16, update_epochs=2, updates=4)
    return config


def _purejaxrl_settings(config) -> None:
    """PureJaxRL's MinAtar PPO (`examples/brax_minatar.ipynb`) in place of pgx's."""
    config.env.num_envs = 64
    config.total_timesteps = 10_000_000  # 1,220 updates of 8,192 steps.
    config.agent.network = "mlp"
    config.agent.activation = "relu"
    config.agent.learning_rate = 5e-3
    config.agent.anneal_lr = True
    config.agent.num_minibatches = 8  # Of 1024 samples, as PureJaxRL's.
    config.agent.update_epochs = 4
    config.log.every_updates = 50


def _gymnax_blines_settings(config) -> None:
    """gymnax-blines' MinAtar PPO (`agents/<game>-MinAtar/ppo.yaml`) in place of pgx's."""
    config.env.num_envs = 64
    config.total_timesteps = 5_000_000  # 610 updates of 8,192 steps.
    config.agent.network = "mlp"
    config.agent.activation = "relu"
    config.agent.hidden_sizes = (256, 256)
    config.agent.learning_rate = 5e-4
    config.agent.anneal_lr = False
    config.agent.gamma = 0.999
    config.agent.num_minibatches = 8  # Of 1024 samples, as gymnax-blines'.
    config.agent.update_epochs = 4
    config.log.every_updates = 20
