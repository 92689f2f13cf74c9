"""PPO with an LSTM on Atari, with the settings of CleanRL's `ppo_atari_lstm.py`.

No frame stack (`env.frame_stack = 1`: the LSTM remembers), Nature CNN with orthogonal
convolutions, then an LSTM of 128 units before the policy and value heads (`agent.core`),
8 envs x 128 steps, 4 minibatches of whole env sequences, 4 epochs, Adam 2.5e-4 annealed
to 0, GAE lambda 0.95, clip 0.1 with value clipping, entropy 0.01, advantages normalised
per minibatch, gamma 0.99, value coefficient 0.5, gradient norm 0.5 (the PPO agent's
defaults, baselines' Atari settings, which CleanRL keeps), 10M env steps. Envs follow the
Machado et al. (2018) protocol of `sebulba.environments.envpool_pools` (sticky actions, no
life-loss signal) where CleanRL uses no-op starts and episodic life (`env.kwargs`
`episodic_life` and `noop_max`, `sebulba.environments.envpool_pools`); fire on reset as
in CleanRL. `:GAME-v5` selects the game (default Breakout-v5); `:smoke` (or
`:smoke,GAME-v5`) is a tiny end-to-end run for CPUs and tests.
"""

from sebulba.agents import defaults
from sebulba.config import atari_game, base_config, parse_variant, smoke_run


def get_config(arg: str | None = None):
    variant = parse_variant(
        arg, "ppo_lstm_atari", ("smoke",), tasks=atari_game, tasks_known="GAME-v5"
    )
    config = base_config(defaults.ppo_config())  # baselines' Atari PPO, as CleanRL's.
    config.env.id = variant.task or "Breakout-v5"
    config.env.num_envs = 8
    config.env.frame_stack = 1
    config.env.clip_rewards = True
    config.env.use_fire_reset = True  # CleanRL's FireResetEnv.
    config.total_timesteps = 10_000_000
    config.agent.network = "nature_cnn"
    config.agent.core = "lstm"
    config.agent.lstm_size = 128
    config.log.every_updates = 10
    if "smoke" in variant:
        smoke_run(config, num_envs=4, num_steps=8, update_epochs=1, updates=2)
    return config
