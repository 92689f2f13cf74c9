"""Multi-task IMPALA on Atari-57 (Espeholt et al. 2018) with PopArt (Hessel et al. 2019).

One IMPALA agent, one set of weights, trained on the Atari-57 games of
`sebulba.experiments.atari_scores` at once, all with the full 18-action space and 4x84x84
observations. envpool (1.2.5) gives Skiing-v5 9 actions even with the full action space,
so no policy can share its action space with the other games: the set here is the other
56 games. PopArt normalises the value targets per game (`agent.popart`): without it the
games with large scores dominate the update (the PopArt paper: 59.7% median
human-normalized score for multi-task IMPALA, about 110% with PopArt). The other
hyperparameters are configs/impala_atari.py's (Cleanba's IMPALA, with the IMPALA paper's
Atari settings: IMPALA ResNet, 20-step unrolls, V-trace, RMSProp 6e-4 annealed, entropy
0.01, gradient norm 40, clipped rewards, 4 minibatches; Machado et al. 2018 protocol).
Differences, all for the task count: 112 envs in one actor thread, so every game gets
exactly 2 envs per process (env i plays game i * 56 // N; 64 x 2 envs would give 16 games
3 envs and the others 2), 4 minibatches of 28 sequences (the paper's batch is 32; 112 /
len(mesh.learner_device_ids) / 4 must be whole: 1, 2 or 4 learner devices per process),
and 56 x 50M = 2.8B env steps (200M frames, the single-game budget, for every game). For
real hardware: GPUs or TPUs and many CPU cores (docs/multitask.md).

`:smoke` is a tiny 2-game run (Breakout, Pong) for CPUs and tests.
"""

from sebulba.config import parse_variant, sibling_config, smoke_run
from sebulba.experiments.atari_scores import RANDOM_AND_HUMAN_SCORES

# envpool's Skiing-v5 has 9 actions with full_action_space=True, every other game 18.
GAMES = tuple(sorted(set(RANDOM_AND_HUMAN_SCORES) - {"Skiing-v5"}))
_ENV_STEPS_PER_GAME = 50_000_000  # 200M frames at 4 frames per step.


def get_config(arg: str | None = None):
    variant = parse_variant(arg, "impala_atari_multitask")
    config = sibling_config(__file__, "impala_atari")  # Its hyperparameters, one place.
    config.env.ids = GAMES
    config.env.id = GAMES[0]  # Unused when env.ids names the tasks; kept equal to the first.
    config.env.num_envs = 2 * len(GAMES)
    config.env.full_action_space = True  # One action space for every game.
    config.pipeline.num_actor_threads = 1
    config.total_timesteps = len(GAMES) * _ENV_STEPS_PER_GAME
    config.agent.popart = True  # Per-game value normalisation (docs/agents.md#popart).
    if "smoke" in variant:
        config.env.ids = ("Breakout-v5", "Pong-v5")
        config.env.id = "Breakout-v5"
        smoke_run(config, num_envs=4, num_steps=8, updates=2)
    return config
