"""SAC on the gymnasium MuJoCo tasks with CleanRL's `sac_continuous_action` settings.

1M env steps; a 1M-transition replay buffer; one critic gradient step per env step on
minibatches of 256, learning (and acting with the actor) after 5k env steps of uniform
random actions; Adam at 3e-4 for the actor and 1e-3 for the twin critics and log(alpha);
gamma 0.99, target critics Polyak-averaged with tau 0.005 after every critic step; two
actor steps after every second critic step; alpha learned from 1 towards an entropy of
-(action dimensions); 256-256 ReLU actor (tanh-Gaussian, log-std in [-5, 2]) and critics.

Deliberate differences from CleanRL's `sac_continuous_action.py`:
* 8 envs x 8 steps per rollout (CleanRL: 1 env, one step at a time), so each update adds
  64 transitions and takes replay_ratio x 64 = 64 critic steps (CleanRL: one per env
  step, the same ratio), with minibatches of 32 transitions from each env's column of
  the buffer (CleanRL: 256 drawn uniformly over the buffer).
* The one-step lag (`pipeline.policy_lag` 1): rollout k is collected by the version
  before the newest, 64 critic steps older; CleanRL acts with the newest parameters
  after every single step. `--config.pipeline.policy_lag=0` removes the lag, not the
  batching.
* Uniform exploration ends, and learning starts, at whole updates: the first update
  whose env steps reach 5k learns, and the version it produces is the first to act with
  the actor (CleanRL: after env step 5000 exactly).
* The agent's own deviations (exact tanh correction, zero initial biases, weighted losses
  that skip envpool's auto-reset steps): sebulba/agents/sac.py.
* Time-limit truncations bootstrap, as CleanRL's do (it stores the final observation);
  envpool returns it as the step's observation, so the buffer holds it too.

`:HalfCheetah-v4` (the default), `:Hopper-v4`, `:Walker2d-v4`, classic control's
`:Pendulum-v1` or any other task with continuous (Box) actions and vector observations
that configs/ppo_mujoco.py takes selects the task. `:smoke` is a seconds-long run used
by the tests, of HalfCheetah-v4 or of the task named with it (`:Pendulum-v1,smoke`).
"""

from sebulba.agents import defaults
from sebulba.config import base_config, continuous_control_tasks, parse_variant

_TASKS = continuous_control_tasks()


def get_config(arg: str | None = None):
    variant = parse_variant(
        arg,
        "sac_mujoco",
        tasks=_TASKS,
        tasks_known="a Box-action vector task: HalfCheetah-v4, Pendulum-v1, ...",
    )
    config = base_config(defaults.sac_config())
    config.env.id = variant.task or "HalfCheetah-v4"
    config.env.num_envs = 8
    config.total_timesteps = 1_000_000
    config.agent.num_steps = 8
    config.agent.network = "mlp"
    config.agent.hidden_sizes = (256, 256)
    config.agent.buffer_size = 1_000_000
    config.agent.batch_size = 256
    config.agent.replay_ratio = 1.0
    config.agent.learning_starts = 5_000
    config.agent.policy_learning_rate = 3e-4
    config.agent.q_learning_rate = 1e-3
    config.agent.alpha_learning_rate = 1e-3
    config.agent.gamma = 0.99
    config.agent.tau = 0.005
    config.agent.policy_frequency = 2
    config.agent.target_network_frequency = 1
    config.agent.alpha = 0.2
    config.agent.autotune = True
    config.log.every_updates = 50
    if "smoke" in variant:
        config.env.num_envs = 4
        config.agent.num_steps = 4
        config.total_timesteps = 4 * 4 * 6
        config.agent.buffer_size = 4 * 4 * 8
        config.agent.batch_size = 16
        config.agent.replay_ratio = 1 / 8  # 2 critic steps per update.
        config.agent.learning_starts = 4 * 4 * 2
        config.agent.hidden_sizes = (32, 32)
        config.log.every_updates = 1
    return config
