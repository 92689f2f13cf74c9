"""IMPALA on Atari with the Cleanba paper's hyperparameters (Huang et al. 2023).

IMPALA ResNet, 50M env steps, 2 actor threads x 64 envs x 20 steps, V-trace (lambda 1,
both rho-bars 1), RMSProp at 6e-4 annealed (decay 0.99, eps 0.01), gamma 0.99, 4
minibatches, entropy 0.01, value coefficient 0.5, gradient norm 40 (the IMPALA agent's
defaults), Machado et al. (2018) protocol, lecun_normal convolutions and fire on reset as
in Cleanba (docs/agents.md lists what still differs). `:GAME-v5` selects the game
(default Breakout-v5); `:smoke` (or `:smoke,GAME-v5`) is a tiny end-to-end run for CPUs
and tests. `:lstm` adds the IMPALA paper's LSTM of 256 units after the ResNet torso
(`agent.core`), e.g. `:lstm,smoke`.
"""

from sebulba.agents import defaults
from sebulba.config import atari_game, base_config, parse_variant, smoke_run


def get_config(arg: str | None = None):
    variant = parse_variant(
        arg, "impala_atari", ("smoke", "lstm"), tasks=atari_game, tasks_known="GAME-v5"
    )
    config = base_config(defaults.impala_config())  # Cleanba's IMPALA settings.
    config.env.id = variant.task or "Breakout-v5"
    config.env.num_envs = 64
    config.env.clip_rewards = True
    config.env.use_fire_reset = True  # envpool's default, which Cleanba keeps.
    config.pipeline.num_actor_threads = 2
    config.total_timesteps = 50_000_000
    config.agent.network = "impala_resnet"
    config.agent.conv_init = "lecun_normal"  # Cleanba keeps flax's default for its convs.
    config.log.every_updates = 10
    if "lstm" in variant:
        config.agent.core = "lstm"
        config.agent.lstm_size = 256
    if "smoke" in variant:
        config.pipeline.num_actor_threads = 1
        smoke_run(config, num_envs=4, num_steps=8, updates=2)
    return config
