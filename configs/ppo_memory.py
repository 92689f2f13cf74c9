"""PPO with an LSTM on a memory task: CartPole-v1 with its velocities hidden.

`env.observation_indices = (0, 2)` keeps the cart position and the pole angle and hides
both velocities, so one observation cannot tell which way the pole is falling; a policy
must remember earlier observations: an LSTM of 64 units (`agent.core`). Otherwise CleanRL
`ppo.py`'s settings (`defaults.cleanrl_ppo_config`: 128 steps, 4 minibatches x 4 epochs,
clip 0.2, entropy 0.01) with a step size of 1e-3 (annealed); 16 envs. Variants: `:smoke`
is a seconds-long run for the tests.

Measured on 2 CPU cores (300k env steps, 25-45 s of training): seeds 1-3 end at a mean
return of 285, 235 and 229 (last 100 episodes); the same config with
`--config.agent.core=none` (a feed-forward policy, same budget) ends at 54 (seed 1), and
it stays near 50 from 60k steps on: from positions alone it cannot tell which way the
pole is moving. tests/test_learning.py asserts both at 200k steps.

    python -m sebulba.main --config=configs/ppo_memory.py --workdir=runs/memory
    python -m sebulba.main --config=configs/ppo_memory.py --workdir=runs/memory_ff \\
        --config.agent.core=none
"""

from sebulba.agents import defaults
from sebulba.config import base_config, parse_variant, smoke_run


def get_config(arg: str | None = None):
    variant = parse_variant(arg, "ppo_memory")
    config = base_config(defaults.cleanrl_ppo_config())
    config.env.id = "CartPole-v1"
    config.env.observation_indices = (0, 2)  # Cart position, pole angle: no velocities.
    config.env.num_envs = 16
    config.total_timesteps = 300_000
    config.agent.network = "mlp"
    config.agent.core = "lstm"
    config.agent.lstm_size = 64
    config.agent.learning_rate = 1e-3
    config.log.every_updates = 10
    if "smoke" in variant:
        smoke_run(config, num_envs=16, num_steps=16, update_epochs=2, updates=4)
    return config
