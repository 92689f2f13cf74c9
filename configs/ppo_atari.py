"""PPO on Atari with the Cleanba paper's hyperparameters (Huang et al. 2023, table 4).

IMPALA ResNet, 50M env steps, 128 envs x 128 steps, Machado et al. (2018) protocol, and
Cleanba's choices where they differ from baselines: lecun_normal convolutions, advantages
normalised once per rollout, no value clipping, fire on reset. docs/agents.md lists what
still differs from Cleanba.
`:GAME-v5` selects the game (default Breakout-v5); `:smoke` (or `:smoke,GAME-v5`) is a
tiny end-to-end run for CPUs and tests.
"""

from sebulba.agents import defaults
from sebulba.config import atari_game, base_config, parse_variant


def get_config(arg: str | None = None):
    variant = parse_variant(arg, "ppo_atari", ("smoke",), tasks=atari_game, tasks_known="GAME-v5")
    config = base_config(defaults.ppo_config())
    config.env.id = variant.task or "Breakout-v5"
    config.env.num_envs = 128
    config.env.clip_rewards = True
    config.env.use_fire_reset = True  # envpool's default, which Cleanba keeps.
    config.total_timesteps = 50_000_000
    config.agent.network = "impala_resnet"
    config.agent.conv_init = "lecun_normal"  # Cleanba keeps flax's default for its convs.
    config.agent.num_steps = 128
    config.agent.learning_rate = 2.5e-4
    config.agent.anneal_lr = True
    config.agent.gamma = 0.99
    config.agent.gae_lambda = 0.95
    config.agent.num_minibatches = 4
    config.agent.update_epochs = 4
    config.agent.norm_adv = "batch"  # Cleanba normalises once per rollout.
    config.agent.clip_coef = 0.1
    config.agent.clip_vloss = False  # Cleanba does not clip the value loss.
    config.agent.vf_coef = 0.5
    config.agent.ent_coef = 0.01
    config.agent.max_grad_norm = 0.5
    config.log.every_updates = 10
    if "smoke" in variant:
        config.env.num_envs = 4
        config.agent.num_steps = 8
        config.agent.num_minibatches = 2
        config.agent.update_epochs = 1
        config.total_timesteps = 4 * 8 * 2
        config.log.every_updates = 1
    return config
