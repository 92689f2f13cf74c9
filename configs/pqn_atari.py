"""PQN on Atari with purejaxql's Atari settings (Gallici et al. 2024).

purejaxql's `config/alg/pqn_atari.yaml`: 128 envs x 32 steps, 50M env steps (200M
frames), 2 epochs x 32 minibatches of 128 samples, RAdam at 2.5e-4 held constant,
gradient norm 10, the Nature CNN with a LayerNorm after every layer, gamma 0.99,
Q(lambda) with lambda 0.65, epsilon from 1 to 0.001 over the first 10% of the updates,
rewards clipped to their sign, fire on reset (envpool's default, which purejaxql keeps).

The protocol is sebulba's, Machado et al. (2018): sticky actions 0.25, the full action
space, no life loss, no no-op starts, the 108k-frame cap. purejaxql's differs; the
`:purejaxql` variant selects its choices:
  * no sticky actions (`env.repeat_action_probability=0.0`);
  * the game's minimal action set (`env.full_action_space=False`, envpool's default);
  * every lost life terminates (`env.kwargs.episodic_life=True`), while returns and
    lengths stay those of whole games;
  * up to 30 no-ops after each reset (`env.kwargs.noop_max=30`).
With `:purejaxql` only the 108k-frame cap is sebulba's (purejaxql: envpool's 27,000
agent steps, the same 108k frames).

Other deliberate differences from purejaxql:
  * Actors act with the version before the learner's (`pipeline.policy_lag=1`), while
    purejaxql collects and learns in one synchronous loop (`--config.pipeline.policy_lag=0`
    gives its schedule). On MinAtar Breakout at 2M steps the lag cost nothing measurable
    (docs/benchmarks.md, "PQN: policy lag 0 against 1"). The targets use the learner's
    current network either way, re-evaluating the rollout at the update's start, where
    purejaxql stores the Q-values its actors computed (`--config.agent.q_targets=behaviour`
    does too: the same values under lag 0, version k - 1's under lag 1, one forward pass
    fewer).
  * Weights are initialised orthogonally (gain sqrt(2), the Q head 1), biases zero;
    purejaxql uses he_normal (the same variance, 2 / fan_in) and lecun_normal for its
    Q head.
  * Minibatches shuffle each env's 32 steps (`time_shuffled`: one step of every env per
    minibatch) instead of one flat shuffle of the 4,096 samples, so a minibatch never
    leaves its learner device.
  * The 108k-frame time limit is a truncation that bootstraps.
  * purejaxql steps 8 extra greedy test envs beside the 128; evaluation here is
    `python -m sebulba.evaluate --greedy` on a checkpoint.

`agent.network=impala_resnet` takes the IMPALA ResNet (with LayerNorms) instead.
`:GAME-v5` selects the game (default Breakout-v5); `:smoke` is a tiny end-to-end run for
CPUs and tests; they combine (`:Pong-v5,purejaxql,smoke`).
"""

from sebulba.agents import defaults
from sebulba.config import atari_game, base_config, parse_variant, smoke_run


def get_config(arg: str | None = None):
    variant = parse_variant(
        arg, "pqn_atari", ("smoke", "purejaxql"), tasks=atari_game, tasks_known="GAME-v5"
    )
    config = base_config(defaults.pqn_config())  # purejaxql's Atari settings, listed above.
    config.env.id = variant.task or "Breakout-v5"
    config.env.num_envs = 128
    config.env.clip_rewards = True
    config.env.use_fire_reset = True  # envpool's default, which purejaxql keeps.
    if "purejaxql" in variant:
        config.env.repeat_action_probability = 0.0
        config.env.full_action_space = False
        config.env.kwargs = {"episodic_life": True, "noop_max": 30}
    config.total_timesteps = 50_000_000
    config.agent.network = "nature_cnn"
    config.log.every_updates = 10
    if "smoke" in variant:
        smoke_run(config, num_envs=4, num_steps=8, update_epochs=1, updates=2)
    return config
