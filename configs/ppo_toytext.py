"""PPO on envpool's toy-text tasks: FrozenLake, Taxi, CliffWalking, NChain, Blackjack, Catch.

Most of them observe one Discrete state (FrozenLake's 16 cells, Taxi's 500 states), which
the `multi_input` network embeds (a learned 16-number vector per state) before separate
64-64 tanh actor and critic; Blackjack's three integers and Catch's 10x5 board are
flattened instead. Settings are CleanRL's `ppo.py` ones for CartPole (8 envs x 128 steps,
4 minibatches x 4 epochs, step size 2.5e-4 annealed, clip 0.2, entropy 0.01, gamma 0.99),
untuned here; 200k env steps.

`:FrozenLake-v1` (the default, slippery), `:Taxi-v3`, `:CliffWalking-v1` or any other
envpool toy-text task id selects the task; `:smoke` is a seconds-long run used by the
tests (with a task: `:Taxi-v3,smoke`). envpool draws no toy-text task, so
`python -m sebulba.evaluate --animation` is refused for them.
"""

from sebulba.agents import defaults
from sebulba.config import base_config, envpool_tasks, parse_variant, smoke_run

_TASKS = envpool_tasks("toy text")


def get_config(arg: str | None = None):
    variant = parse_variant(
        arg, "ppo_toytext", tasks=_TASKS, tasks_known="a toy-text task id such as Taxi-v3"
    )
    config = base_config(defaults.cleanrl_ppo_config())
    config.env.id = variant.task or "FrozenLake-v1"
    config.env.num_envs = 8
    config.total_timesteps = 200_000
    config.agent.network = "multi_input"
    config.log.every_updates = 10
    if "smoke" in variant:
        smoke_run(config, num_envs=8, num_steps=16, update_epochs=2, updates=2)
    return config
