"""PPO on highway-env (Leurent 2018): driving among other vehicles, as envpool ports it.

Most tasks observe a Kinematics table, [V, F] (V nearby vehicles x F features such as
presence, position and velocity, normalised by the env), and choose one of envpool's
meta-actions (Discrete: lane left, idle, lane right, faster, slower); the parking tasks
observe goal-conditioned dicts (`observation`, `achieved_goal`, `desired_goal`) and
LaneKeeping a dict of state vectors, and steer with continuous (Box) actions, as do
Intersection-v1 and the racetracks. The `multi_input` network flattens the table (or
each entry of the dict, or the grids of three axes: the racetracks' occupancy grid
[2, 12, 12], the time-to-collision grids [3, 3, T] of TwoWay and UTurn) and feeds
separate 64-64 tanh actor and critic; observations are normalised by running statistics
(the parking dicts are not normalised by the env).
Discount 0.8, the horizon highway-env's own training examples use; otherwise baselines'
PPO defaults (8 envs x 128 steps, 4 minibatches x 10 epochs, step size 5e-4 annealed,
clip 0.2, entropy 0.01), untuned; 200k env steps.

`:HighwayFast-v0` (the default), `:Merge-v0`, `:Roundabout-v0`, `:Parking-v0` or any other
envpool highway-env task id selects the task (the lower-case aliases too). Refused: the
multi-agent intersections (`python -m sebulba.environments.env_catalog highway` says why;
docs/environments.md). `:smoke` is a seconds-long run used by the tests (with a task:
`:Parking-v0,smoke`).
"""

from sebulba.agents import defaults
from sebulba.config import base_config, envpool_tasks, parse_variant, smoke_run

_TASKS = envpool_tasks("highway-env")


def get_config(arg: str | None = None):
    variant = parse_variant(
        arg, "ppo_highway", tasks=_TASKS, tasks_known="a highway-env task id such as Merge-v0"
    )
    config = base_config(defaults.cleanrl_ppo_config())
    config.env.id = variant.task or "HighwayFast-v0"
    config.env.num_envs = 8
    config.total_timesteps = 200_000
    config.agent.network = "multi_input"
    config.agent.learning_rate = 5e-4
    config.agent.gamma = 0.8
    config.agent.update_epochs = 10
    config.agent.normalize_observations = True
    config.log.every_updates = 10
    if "smoke" in variant:
        smoke_run(config, num_envs=8, num_steps=16, update_epochs=2, updates=2)
    return config
