"""PPO on the dm_control suite with the continuous-control settings of configs/ppo_mujoco.py.

dm_control observations are dicts of named vectors (e.g. `position`, `velocity`), so the
network is `multi_input` (the entries flattened and concatenated, then separate 64-64 tanh
actor and critic); each entry is normalised by its own running statistics. 1M env steps,
2048 per update (8 envs x 256 steps), 32 minibatches, 10 epochs, step size 3e-4 annealed.

`:CheetahRun-v1` (the default) or any other envpool dm_control task id selects the task;
so does any task of Gymnasium Robotics (the goal-conditioned dicts `observation`,
`achieved_goal`, `desired_goal` of `:FetchReach-v4`, `:HandManipulateBlock-v1`,
`:PointMaze_Open-v3`, ...; FrankaKitchen's nested goals flattened) and of MuJoCo
Playground (the `state` and `privileged_state` dicts of `:Go1JoystickFlatTerrain-v1`,
...; both feed actor and critic alike), untuned there. `:smoke` is a seconds-long run
used by the tests (with a task: `:WalkerWalk-v1,smoke`).
"""

from sebulba.agents import defaults
from sebulba.config import base_config, envpool_tasks, parse_variant, smoke_run

_TASKS = envpool_tasks("dm_control", "Gymnasium Robotics", "MuJoCo Playground")


def get_config(arg: str | None = None):
    variant = parse_variant(
        arg,
        "ppo_dmc",
        tasks=_TASKS,
        tasks_known="a dm_control, Gymnasium Robotics or MuJoCo Playground task id",
    )
    config = base_config(defaults.ppo_config())
    config.env.id = "CheetahRun-v1"
    config.env.num_envs = 8
    config.total_timesteps = 1_000_000
    config.agent.network = "multi_input"
    config.agent.num_steps = 256
    config.agent.learning_rate = 3e-4
    config.agent.num_minibatches = 32
    config.agent.update_epochs = 10
    # "auto" rolls these MLPs' 320 minibatch steps (unrolled they take minutes and
    # gigabytes to compile); given a convolutional network on a CPU it unrolls them
    # instead, since a rolled loop runs conv gradients 8-40x slower there.
    config.agent.minibatch_loop = "auto"
    config.agent.clip_coef = 0.2
    config.agent.ent_coef = 0.0
    config.agent.normalize_observations = True
    config.agent.normalize_rewards = True
    config.log.every_updates = 10
    if variant.task is not None:
        config.env.id = variant.task
    if "smoke" in variant:
        smoke_run(config, num_envs=8, num_steps=16, update_epochs=2, updates=4)
    return config
