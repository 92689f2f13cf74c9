"""SAC on Brax continuous control in Anakin mode (JAX physics, one program per update).

Built on `configs/sac_mujoco.py`, CleanRL's `sac_continuous_action` settings (a replay
ratio of one critic step per env step on minibatches of 256, 5k env steps of uniform
random actions first, Adam at 3e-4 / 1e-3, gamma 0.99, tau 0.005, delayed actor steps,
autotuned alpha, 256-256 ReLU networks), with 8 envs x 8 steps per update as there and
`pipeline.policy_lag` 0: an Anakin program acts and learns in one step, so the lag of a
Sebulba run would only delay the data (docs/anakin.md). Brax's episodes last 1000 steps
(truncated; `sebulba.anakin.suites.brax`). 100k env steps: SAC's cost is its critic
steps (one per env step, about 90 a second on a 2-core CPU), not the env steps. No
learning record of this config exists yet; configs/sac_mujoco.py:Pendulum-v1 has one.

`:inverted_pendulum` (the default) or any other Brax task (`:hopper`, `:halfcheetah`,
`:ant`; `python -m sebulba.environments.env_catalog brax`) selects the task; the
locomotion tasks want sac_mujoco's 1M steps (`--config.total_timesteps=1000000`).
`:smoke` is a seconds-long run (its first update compiles Brax's physics: about a minute
on 2 CPU cores).
"""

from sebulba.config import BRAX_TASKS, brax_variant, sibling_config

TASKS = BRAX_TASKS  # The tasks `:TASK` takes (tests/test_config_variants.py).


def get_config(arg: str | None = None):
    variant, env_id = brax_variant(arg, "sac_brax")
    config = sibling_config(__file__, "sac_mujoco", "smoke" if "smoke" in variant else None)
    config.env.id = env_id
    config.pipeline.policy_lag = 0
    if "smoke" not in variant:
        config.total_timesteps = 100_000
    return config
