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

from sebulba.config import envpool_tasks, parse_variant, sibling_config

_TASKS = envpool_tasks("dm_control", "Gymnasium Robotics", "MuJoCo Playground")


def get_config(arg: str | None = None):
    variant = parse_variant(
        arg,
        "ppo_dmc",
        tasks=_TASKS,
        tasks_known="a dm_control, Gymnasium Robotics or MuJoCo Playground task id",
    )
    # ppo_mujoco's continuous-control settings (and its :smoke sizes), written once.
    config = sibling_config(__file__, "ppo_mujoco", "smoke" if "smoke" in variant else None)
    config.env.id = variant.task or "CheetahRun-v1"
    config.agent.network = "multi_input"
    return config
