"""DQN on CartPole-v1 (envpool actors), CleanRL dqn_jax's settings where they carry over.

Deliberate differences from CleanRL's `dqn_jax.py`:
* 8 envs x 10 steps per rollout (CleanRL: 1 env, one step at a time), so each update
  adds 80 transitions and takes replay_ratio x 80 = 8 gradient steps (CleanRL: one
  gradient step every 10 env steps, the same ratio); under the pipeline's one-step lag the
  newest rollout was collected by the previous version.
* The target network is copied every 50 gradient steps (CleanRL: every 500 env steps,
  which at train_frequency 10 is the same 50 gradient steps).
* Double Q (CleanRL: single Q; `--config.agent.double_q=False`). The Huber loss learns
  far slower here, where the Q-values approach 1 / (1 - gamma) = 100 and Huber caps every
  error's gradient at 1: seed 1 ended at a mean return of 34 after 200k steps against 500
  with the squared error; `agent.loss=mse` is kept, as CleanRL's.
* The Q-network is the shared MLP (separate 64-64 tanh torsos, the policy head's logits
  read as Q-values, so the Q head is initialised orthogonal with the policy head's gain
  0.01; CleanRL: one 120-84 ReLU MLP, its Q head flax's default lecun_normal).
* 200k env steps, learning after 10k (CleanRL: 500k steps, learning after 10k).

As CleanRL, time-limit truncations bootstrap: its buffer stores the final observation of
a truncated episode and ends bootstrapping at terminations only, as the replay's n-step
sampler does.

Seeds 1, 2, 3 end at 500.0, 253.4 and 243.4 (mean return of the last 100 episodes; about
20 s of training each on a 2-core CPU; `python -m sebulba.main
--config=configs/dqn_cartpole.py --workdir=DIR --config.seed=S`). `:smoke` is a
seconds-long run used by the tests.
"""

from sebulba.agents import defaults
from sebulba.config import base_config, parse_variant


def get_config(arg: str | None = None):
    variant = parse_variant(arg, "dqn_cartpole")
    config = base_config(defaults.dqn_config())
    config.env.id = "CartPole-v1"
    config.env.num_envs = 8
    config.total_timesteps = 200_000
    config.agent.network = "mlp"
    config.log.every_updates = 50
    if "smoke" in variant:
        config.total_timesteps = 8 * 10 * 6
        config.agent.buffer_size = 8 * 10 * 4
        config.agent.batch_size = 16
        config.agent.learning_starts = 8 * 10 * 2
        config.log.every_updates = 1
    return config
