"""DQN on Atari with CleanRL `dqn_atari_jax.py`'s hyperparameters (Mnih et al. 2015).

Nature CNN (flax's lecun_normal convolutions, as CleanRL's), Adam 1e-4, 10M env steps, a
replay of 1M transitions, minibatches of 32, one gradient step per 4 env steps, the target
network copied every 1,000 env steps, epsilon from 1 to 0.01 over the first 10% of the run,
learning after 80k env steps, clipped rewards. `:GAME-v5` selects the game (default
Breakout-v5); `:smoke` (or `:smoke,GAME-v5`) is a tiny end-to-end run for CPUs and tests.

Deliberate differences from CleanRL:
* 8 envs x 4 steps per rollout (CleanRL: 1 env, one step at a time): each update adds 32
  transitions and takes replay_ratio x 32 = 8 gradient steps (the same ratio); the target
  copy every 250 gradient steps is CleanRL's every 1,000 env steps at train_frequency 4.
* Double Q and the Huber loss (Mnih et al. 2015's error clipping; rewards are clipped
  here, so errors stay near 1) (CleanRL: single Q, squared error;
  `--config.agent.double_q=False --config.agent.loss=mse`). Not measured on Atari yet.
* The Machado et al. (2018) protocol of `sebulba.environments.envpool_pools` (sticky
  actions, full action space, no life loss, no no-op starts), with fire on reset as in the
  other Atari configs (CleanRL: no-op starts, episodic life, minimal action set,
  FireResetEnv; its protocol is `"--config.env.kwargs={'episodic_life': True, 'noop_max':
  30}" --config.env.full_action_space=False --config.env.repeat_action_probability=0.0`).
* The Nature CNN of `networks.py` has a value head beside the Q head; it is unused. The
  Q head is its policy head, orthogonal with gain 0.01 (CleanRL: flax's default
  lecun_normal), so the Q-values start near 0.
* The buffer stores every transition's stacked frames (4 x 84 x 84 uint8, 28 KB): 1M
  transitions are about 28 GB of learner memory, split over the learner devices
  (CleanRL's host buffer holds the same stacks). The memory pre-check refuses a learner
  that cannot hold it; lower `agent.buffer_size` there.
"""

from sebulba.agents import defaults
from sebulba.config import atari_game, base_config, parse_variant


def get_config(arg: str | None = None):
    variant = parse_variant(arg, "dqn_atari", tasks=atari_game, tasks_known="GAME-v5")
    config = base_config(defaults.dqn_config())
    config.env.id = variant.task or "Breakout-v5"
    config.env.num_envs = 8
    config.env.clip_rewards = True
    config.env.use_fire_reset = True
    config.total_timesteps = 10_000_000
    config.agent.network = "nature_cnn"
    config.agent.conv_init = "lecun_normal"
    config.agent.num_steps = 4
    config.agent.learning_rate = 1e-4
    config.agent.gamma = 0.99
    config.agent.buffer_size = 1_000_000
    config.agent.batch_size = 32
    config.agent.replay_ratio = 0.25
    config.agent.learning_starts = 80_000
    config.agent.target_network_frequency = 250
    config.agent.tau = 1.0
    config.agent.loss = "huber"
    config.agent.start_e = 1.0
    config.agent.end_e = 0.01
    config.agent.exploration_fraction = 0.1
    config.log.every_updates = 1000
    if "smoke" in variant:
        config.env.num_envs = 4
        config.total_timesteps = 4 * 4 * 3
        config.agent.buffer_size = 4 * 4 * 4
        config.agent.batch_size = 8
        config.agent.learning_starts = 4 * 4
        config.log.every_updates = 1
    return config
