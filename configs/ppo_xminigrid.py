"""PPO on XLand-MiniGrid's MiniGrid tasks in Anakin mode (JAX envs, one program per update).

XLand-MiniGrid (Nikulin et al. 2023) re-implements MiniGrid in JAX; its observation is the
agent's 7x7 view as an integer grid [7, 7, 2] (tile and colour ids), which the
`multi_input` network reads as a two-channel image. The hyperparameters are those of
`configs/ppo_minigrid.py` (baselines' PPO defaults, the rl-starter-files' ones for
MiniGrid: 128 steps, 4 minibatches, 4 epochs, step size 2.5e-4 annealed, clip 0.2,
entropy 0.01, gamma 0.99) with 64 envs instead of 16, since JAX envs cost little per env,
and on-policy (`pipeline.policy_lag=0`, docs/anakin.md). 1M env steps.

`:MiniGrid-DoorKey-5x5` (the default) or any other MiniGrid task of the suite
(`python -m sebulba.environments.env_catalog xminigrid`) selects the task; `:smoke` is a
seconds-long run.
"""

from sebulba.agents import defaults
from sebulba.config import base_config, jax_suite_tasks, parse_variant, smoke_run

SUITE = "xminigrid"
# The suite's MiniGrid tasks (xminigrid 0.9; its XLand tasks need a downloaded ruleset and
# are refused); tests/test_config_variants.py keeps this list in step with the registry.
TASKS = tuple(
    f"MiniGrid-{name}"
    for name in (
        "BlockedUnlockPickUp",
        "DoorKey-5x5",
        "DoorKey-6x6",
        "DoorKey-8x8",
        "DoorKey-16x16",
        "Empty-5x5",
        "Empty-6x6",
        "Empty-8x8",
        "Empty-16x16",
        "EmptyRandom-5x5",
        "EmptyRandom-6x6",
        "EmptyRandom-8x8",
        "EmptyRandom-16x16",
        "FourRooms",
        "LockedRoom",
        "MemoryS8",
        "MemoryS16",
        "MemoryS32",
        "MemoryS64",
        "MemoryS128",
        "Playground",
        "Unlock",
        "UnlockPickUp",
    )
)


def get_config(arg: str | None = None):
    variant = parse_variant(
        arg,
        "ppo_xminigrid",
        tasks=jax_suite_tasks(TASKS),
        tasks_known="an XLand-MiniGrid task such as MiniGrid-DoorKey-5x5",
    )
    config = base_config(defaults.cleanrl_ppo_config())
    config.env.id = f"{SUITE}:" + (variant.task or "MiniGrid-DoorKey-5x5")
    config.env.num_envs = 64
    config.total_timesteps = 1_000_000
    config.pipeline.policy_lag = 0
    config.agent.network = "multi_input"
    config.log.every_updates = 10
    if "smoke" in variant:
        smoke_run(config, num_envs=8, num_steps=16, update_epochs=2, updates=4)
    return config
