"""PPO on gymnax's CartPole-v1 in Anakin mode: envs, acting and learning in one program.

The same hyperparameters as `configs/ppo_cartpole.py` (CleanRL's ppo.py: 4 envs x 128
steps, Adam at 2.5e-4 annealed to 0, 4 minibatches x 4 epochs, clip 0.2, entropy 0.01),
which are also PureJaxRL's CartPole settings, with the JAX env `gymnax:CartPole-v1`
instead of envpool's. On-policy (`pipeline.policy_lag=0`), as PureJaxRL is: Anakin has
no actors to overlap with the learner (docs/anakin.md).

One call of the compiled program runs 100 updates (`pipeline.updates_per_call`), as
PureJaxRL runs all of its updates in one: the host reads episodes and metrics back once per
100 updates (0.4 s on 2 CPU cores), with the numbers of one update per call, bit for bit.
The whole run takes seconds, so it saves a checkpoint at its end and when stopped
(SIGTERM, Ctrl-C), not every 100 updates (`ckpt.every_updates=0`; each save costs tens of
milliseconds of checkpointing bookkeeping, which at this speed is a quarter of the run).

Variants: `:smoke` is a seconds-long run used by the tests.
"""

from sebulba.config import parse_variant, sibling_config


def get_config(arg: str | None = None):
    parse_variant(arg, "ppo_cartpole_anakin")  # Only :smoke; the task is gymnax's CartPole.
    config = sibling_config(__file__, "ppo_cartpole", arg)
    config.env.id = "gymnax:CartPole-v1"
    config.pipeline.policy_lag = 0
    config.pipeline.updates_per_call = 100
    config.ckpt.every_updates = 0
    return config
