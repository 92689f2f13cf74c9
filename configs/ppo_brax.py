"""PPO on Brax continuous control in Anakin mode (JAX physics, one program per update).

Built on `configs/ppo_mujoco.py`, CleanRL's `ppo_continuous_action` settings (step size
3e-4 annealed, gamma 0.99, GAE lambda 0.95, 10 epochs of 32 minibatches, clip 0.2 with
value clipping, no entropy bonus, observation normalisation and reward scaling, separate
64-64 tanh actor and critic with a state-independent log-std), on-policy
(`pipeline.policy_lag=0`, docs/anakin.md) and with 64 envs x 32 steps (the same 2048
steps per update as CleanRL's 1 env x 2048): JAX envs cost little per env, so batching
envs rather than steps shortens each rollout's scan 64-fold. Brax's episodes last 1000
steps (truncated; `sebulba.anakin.suites.brax`). 1M env steps.

`:inverted_pendulum` (the default: it learns in minutes on a CPU) or any other Brax task
(`:hopper`, `:halfcheetah`, `:ant`; `python -m sebulba.environments.env_catalog brax`)
selects the task; the locomotion tasks step 10-100x slower than the pendulum on a CPU
(docs/anakin.md). `:smoke` is a seconds-long run.
"""

from sebulba.config import BRAX_TASKS, brax_variant, sibling_config, smoke_run

TASKS = BRAX_TASKS  # The tasks `:TASK` takes (tests/test_config_variants.py).


def get_config(arg: str | None = None):
    variant, env_id = brax_variant(arg, "ppo_brax")
    config = sibling_config(__file__, "ppo_mujoco")
    config.env.id = env_id
    config.env.num_envs = 64
    config.agent.num_steps = 32
    config.pipeline.policy_lag = 0
    config.total_timesteps = 1_000_000
    if "smoke" in variant:
        smoke_run(config, num_envs=8, num_steps=16, update_epochs=2, updates=4)
    return config
