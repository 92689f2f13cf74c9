"""PPO on Meta-World (Yu et al. 2019): a Sawyer arm's 50 manipulation tasks, as envpool ports them.

Every task observes one vector of 39 numbers (hand and gripper, two objects, the previous
frame's and the goal) and moves the arm with 4 continuous actions (hand displacement,
gripper), over episodes of 500 steps; envpool reports `success` in each step's info.
Settings are configs/ppo_mujoco.py's (CleanRL's `ppo_continuous_action`: 8 envs x 256
steps, 32 minibatches x 10 epochs, step size 3e-4 annealed, observation normalisation and
reward scaling), untuned here; 1M env steps. envpool's default `partially_observable`
(True) zeroes the goal's position in the observation, as Meta-World does for single
tasks; `--config.env.kwargs="{'partially_observable': False}"` shows it.

`:MetaWorld/Reach-v3` (the default) or any other envpool Meta-World task id selects the
task. `:MT10` trains one policy on the MT10 set jointly (`env.ids`, docs/multitask.md):
reach, push, pick-place, door-open, drawer-open, drawer-close, button-press-topdown,
peg-insert-side, window-open and window-close, 2 envs each (20 envs x 256 steps per
update), 10M env steps. Two differences from Meta-World's MT10 benchmark: no one-hot task
id is appended to the observation (the tasks' objects tell them apart), and training
reports each task's return (`episodic_return/<task id>`) but not its success rate (the
actors do not read envpool's info); `python -m sebulba.evaluate` reports both per task,
with the mean success rate over the ten tasks. `:smoke` and `:MT10,smoke` are
seconds-long runs used by the tests.
"""

from sebulba.config import envpool_tasks, parse_variant, sibling_config

# Meta-World's MT10 set (Yu et al. 2019), as envpool's v3 task ids.
MT10 = (
    "MetaWorld/Reach-v3",
    "MetaWorld/Push-v3",
    "MetaWorld/PickPlace-v3",
    "MetaWorld/DoorOpen-v3",
    "MetaWorld/DrawerOpen-v3",
    "MetaWorld/DrawerClose-v3",
    "MetaWorld/ButtonPressTopdown-v3",
    "MetaWorld/PegInsertSide-v3",
    "MetaWorld/WindowOpen-v3",
    "MetaWorld/WindowClose-v3",
)
_TASKS = envpool_tasks("MetaWorld")


def get_config(arg: str | None = None):
    variant = parse_variant(
        arg,
        "ppo_metaworld",
        ("smoke", "MT10"),
        tasks=_TASKS,
        tasks_known="a Meta-World task id such as MetaWorld/Push-v3",
    )
    if "MT10" in variant and variant.task is not None:
        raise ValueError(f"ppo_metaworld's MT10 names its own tasks: drop {variant.task!r} or MT10")
    # ppo_mujoco's continuous-control settings (and its :smoke sizes), written once.
    config = sibling_config(__file__, "ppo_mujoco", "smoke" if "smoke" in variant else None)
    config.env.id = variant.task or "MetaWorld/Reach-v3"
    if "MT10" in variant:
        config.env.ids = MT10
        config.env.id = MT10[0]  # Unused when env.ids names the tasks; kept equal to the first.
        config.env.num_envs = 2 * len(MT10)
        config.total_timesteps = 10_000_000
        if "smoke" in variant:
            config.total_timesteps = config.env.num_envs * config.agent.num_steps * 2
    return config
