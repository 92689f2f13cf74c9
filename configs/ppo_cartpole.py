"""PPO on CartPole-v1: the default config, trains on a laptop CPU in a few minutes.

CleanRL's ppo.py settings: 4 envs x 128 steps (976 updates over 500k steps), Adam at
2.5e-4 annealed to 0, 4 minibatches x 4 epochs, clip 0.2, entropy 0.01. The one
difference is sebulba's policy lag of 1 (`--config.pipeline.policy_lag=0` gives CleanRL's
synchronous schedule). With 8 envs (488 updates) some seeds ended near 415; with
CleanRL's 4 every seed of 1-5 ends at 475 or more (docs/benchmarks.md).

Variants: `configs/ppo_cartpole.py:smoke` is a seconds-long run used by the tests;
`:Acrobot-v1`, `:LunarLander-v2` or any other classic-control or Box2D task observing
one vector selects the task (untuned there; `:LunarLander-v2,smoke`).
"""

from sebulba.agents import defaults
from sebulba.config import base_config, envpool_tasks, parse_variant, smoke_run

_TASKS = envpool_tasks("classic control", "Box2D", vector_observations=True)


def get_config(arg: str | None = None):
    variant = parse_variant(
        arg,
        "ppo_cartpole",
        tasks=_TASKS,
        tasks_known="a classic-control or Box2D vector task such as Acrobot-v1",
    )
    config = base_config(defaults.cleanrl_ppo_config())
    config.env.id = variant.task or "CartPole-v1"
    config.env.num_envs = 4
    config.total_timesteps = 500_000
    config.agent.network = "mlp"
    config.log.every_updates = 10
    if "smoke" in variant:
        smoke_run(config, num_envs=8, num_steps=16, update_epochs=2, updates=4)
    return config
