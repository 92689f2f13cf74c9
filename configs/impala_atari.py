"""IMPALA on Atari with the Cleanba paper's hyperparameters (Huang et al. 2023).

IMPALA ResNet, 50M env steps, 2 actor threads x 64 envs x 20 steps, V-trace, RMSProp,
Machado et al. (2018) protocol, lecun_normal convolutions and fire on reset as in Cleanba
(docs/agents.md lists what still differs). `:GAME-v5` selects the game (default Breakout-v5);
`:smoke` (or `:smoke,GAME-v5`) is a tiny end-to-end run for CPUs and tests. `:lstm` adds the
IMPALA paper's LSTM of 256 units after the ResNet torso (`agent.core`), e.g. `:lstm,smoke`.
"""

from sebulba.agents import defaults
from sebulba.config import atari_game, base_config, parse_variant, smoke_run


def get_config(arg: str | None = None):
    variant = parse_variant(
        arg, "impala_atari", ("smoke", "lstm"), tasks=atari_game, tasks_known="GAME-v5"
    )
    config = base_config(defaults.impala_config())
    config.env.id = variant.task or "Breakout-v5"
    config.env.num_envs = 64
    config.env.clip_rewards = True
    config.env.use_fire_reset = True  # envpool's default, which Cleanba keeps.
    config.pipeline.num_actor_threads = 2
    config.total_timesteps = 50_000_000
    config.agent.network = "impala_resnet"
    config.agent.conv_init = "lecun_normal"  # Cleanba keeps flax's default for its convs.
    config.agent.num_steps = 20
    config.agent.learning_rate = 6e-4
    config.agent.anneal_lr = True
    config.agent.gamma = 0.99
    config.agent.vtrace_lambda = 1.0
    config.agent.clip_rho_threshold = 1.0
    config.agent.clip_pg_rho_threshold = 1.0
    config.agent.num_minibatches = 4
    config.agent.vf_coef = 0.5
    config.agent.ent_coef = 0.01
    config.agent.max_grad_norm = 40.0
    config.agent.rmsprop_decay = 0.99
    config.agent.rmsprop_eps = 0.01
    config.log.every_updates = 10
    if "lstm" in variant:
        config.agent.core = "lstm"
        config.agent.lstm_size = 256
    if "smoke" in variant:
        config.pipeline.num_actor_threads = 1
        smoke_run(config, num_envs=4, num_steps=8, updates=2)
    return config
