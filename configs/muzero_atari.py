"""Gumbel MuZero on Atari (envpool actors), at the scale of one accelerator.

The representation is the Nature CNN over 4 stacked 84x84 frames with one 256-unit
ReLU layer and a 256-wide hidden state (the paper's is a ResNet over 32 frames and their
actions: `--config.agent.network=impala_resnet` is the closer torso here); dynamics and
prediction are 256-256 MLPs with LayerNorm. 16 envs x 10 steps per update, 50
simulations per search (the paper's), windows of K = 5 and n = 10 steps, one gradient
step of 256 windows per 4 env steps from a 200,000-step ring (about 5.6 GB of stacked
frames on the learner devices; the memory pre-check refuses a learner that cannot hold
it), 10M env steps, clipped rewards, value targets bootstrapped from the learner's
current value. The Machado et al. (2018) protocol of the other Atari configs (sticky
actions, full action space), with fire on reset. Not measured on a GPU yet: a starting point.

`:GAME-v5` selects the game (default Breakout-v5); `:smoke` (or `:smoke,GAME-v5`) is a
tiny end-to-end run for CPUs and tests.
"""

from sebulba.agents import defaults
from sebulba.config import atari_game, base_config, parse_variant


def get_config(arg: str | None = None):
    variant = parse_variant(arg, "muzero_atari", tasks=atari_game, tasks_known="GAME-v5")
    config = base_config(defaults.muzero_config())
    config.env.id = variant.task or "Breakout-v5"
    config.env.num_envs = 16
    config.env.clip_rewards = True
    config.env.use_fire_reset = True
    config.total_timesteps = 10_000_000
    config.agent.network = "nature_cnn"
    config.agent.hidden_sizes = (256,)
    config.agent.latent_size = 256
    config.agent.model_hidden_sizes = (256, 256)
    config.agent.num_simulations = 50
    config.agent.buffer_size = 200_000
    config.agent.replay_ratio = 0.25
    config.agent.learning_starts = 20_000
    config.log.every_updates = 100
    if "smoke" in variant:
        config.env.num_envs = 4
        config.total_timesteps = 4 * 10 * 3
        config.agent.buffer_size = 4 * 10 * 3
        config.agent.batch_size = 8
        config.agent.learning_starts = 4 * 10
        config.agent.num_simulations = 4
        config.log.every_updates = 1
    return config
