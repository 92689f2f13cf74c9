"""PPO on MiniGrid/BabyAI: the partially observed grid worlds, from their dict observations.

MiniGrid observes a dict: a 7x7x3 uint8 `image` of the agent's view, its `direction` and
the `mission`; the `multi_input` network encodes the image with a small CNN, embeds the
discrete entries and feeds separate 64-64 tanh actor and critic. Settings are baselines'
PPO defaults (the rl-starter-files' ones for MiniGrid): 16 envs x 128 steps, 4 minibatches,
4 epochs, step size 2.5e-4 annealed, clip 0.2, entropy 0.01, gamma 0.99; no normalisation
(the observations are integers, the rewards already in [0, 1]). 500k env steps.

`:MiniGrid-DoorKey-5x5-v0` (the default) or any other envpool MiniGrid/BabyAI task id
selects the task; so does any Jumanji task (`:Snake-v1`, `:Game2048-v1`, `:Maze-v0`, ...),
untuned there: its dict (nested names joined, `agent_position_row`), with the
`action_mask` the policy obeys (`agent.mask_actions`; docs/agents.md), and its
Discrete or MultiDiscrete actions (the multi-agent Cleaner, Connector, ... as one
centralised agent choosing every agent's action for the shared reward); and pgx's one
single-player game, `:Play2048-v1`, whose [4, 4, 31] planes `multi_input` flattens
(docs/environments.md). `:smoke` is a seconds-long run used by the tests (with a task:
`:MiniGrid-Empty-5x5-v0,smoke`).
"""

from sebulba.agents import defaults
from sebulba.config import base_config, envpool_tasks, parse_variant, smoke_run

_TASKS = envpool_tasks("MiniGrid/BabyAI", "Jumanji", "pgx")


def get_config(arg: str | None = None):
    variant = parse_variant(
        arg,
        "ppo_minigrid",
        tasks=_TASKS,
        tasks_known="a MiniGrid/BabyAI, Jumanji or pgx task id such as MiniGrid-DoorKey-5x5-v0",
    )
    config = base_config(defaults.cleanrl_ppo_config())
    config.env.id = variant.task or "MiniGrid-DoorKey-5x5-v0"
    config.env.num_envs = 16
    config.total_timesteps = 500_000
    config.agent.network = "multi_input"
    config.log.every_updates = 10
    if "smoke" in variant:
        smoke_run(config, num_envs=8, num_steps=16, update_epochs=2, updates=4)
    return config
