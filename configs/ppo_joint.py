"""Joint PPO on three MiniGrid tasks: one policy, one set of weights, trained on all at once.

The tasks share MiniGrid's dict observation (7x7x3 `image`, `direction`, `mission`) and
its 7 actions, as joint training requires (docs/multitask.md): MiniGrid-Empty-5x5-v0
(fixed start, 100 steps), MiniGrid-Empty-Random-6x6-v0 (random start and heading, 144
steps) and MiniGrid-Empty-8x8-v0 (fixed start, 256 steps, the goal ~12 steps away). The
16 envs are cut into blocks of 6, 5 and 5 envs (env i plays task i * 3 // 16); the
update averages over every task's samples ("Joint PPO"). Network and settings are those
of configs/ppo_minigrid.py but for a 4x larger step size, 1e-3 (annealed), which learns
these easy tasks in half the steps; 100k env steps, one to two minutes on 2 CPU cores;
every task is solved by ~40k steps (docs/multitask.md has the numbers).

`:smoke` is a seconds-long run used by the tests.
"""

from sebulba.config import parse_variant, sibling_config

TASKS = ("MiniGrid-Empty-5x5-v0", "MiniGrid-Empty-Random-6x6-v0", "MiniGrid-Empty-8x8-v0")


def get_config(arg: str | None = None):
    variant = parse_variant(arg, "ppo_joint")
    # ppo_minigrid's network and hyperparameters (and its :smoke sizes), written once.
    config = sibling_config(__file__, "ppo_minigrid", "smoke" if "smoke" in variant else None)
    config.env.ids = TASKS
    config.env.id = TASKS[0]  # Unused when env.ids names the tasks; kept equal to the first.
    config.agent.learning_rate = 1e-3
    if "smoke" in variant:
        config.env.num_envs = 6  # 2 envs per task.
        config.total_timesteps = 6 * 16 * 4
    else:
        config.total_timesteps = 100_000
    return config
