"""AlphaZero on Pgx's two-player board games in Anakin mode: self-play, searching the
game's own rules, acting and learning in one program on the same devices.

Pgx's AlphaZero example's search and loss: Gumbel search at 32 simulations, the search's
improved policy and the game's outcome as targets, Adam at 1e-3, trained on the
self-play just collected. Three deliberate differences, for a CPU and for play that
meets every opening: the network is small (the board planes flattened into a 128-128
ReLU MLP before the policy and value heads; the example's is a ResNet); each rollout of
256 envs x 32 moves is learned from 4 times in 16 minibatches (64 Adam steps, where the
example takes one pass); and the root's Gumbel noise is 3 times mctx's (`gumbel_scale`
3.0): at 1.0 self-play settles on a few openings, and the policy then loses some games
as the second player after openings it rarely met (docs/agents.md, "AlphaZero", has
the record against the exact tic-tac-toe player).

`:tic_tac_toe` (the default) or another of Pgx's two-player games without chance or
hidden state (`:connect_four`, `:othello`, `:hex`, `:go_9x9`, ...) selects the game;
`:smoke` is a seconds-long run used by the tests (with a game: `:connect_four,smoke`).
"""

from sebulba.agents import defaults
from sebulba.config import base_config, jax_suite_tasks, parse_variant

# Pgx's two-player games of perfect information without chance (the pgx suite's
# SELF_PLAY_GAMES; tests/test_config_variants.py checks this list against Pgx's games).
TASKS = (
    "animal_shogi",
    "chess",
    "connect_four",
    "gardner_chess",
    "go_9x9",
    "go_19x19",
    "hex",
    "othello",
    "shogi",
    "tic_tac_toe",
)
# Env steps (moves, both sides) of a full run, per game; 2M for the others.
_TOTAL_TIMESTEPS = {"tic_tac_toe": 1_200_000, "connect_four": 2_000_000}


def get_config(arg: str | None = None):
    variant = parse_variant(
        arg,
        "alphazero_pgx",
        tasks=jax_suite_tasks(TASKS),
        tasks_known=f"a Pgx two-player game: {', '.join(TASKS)}",
    )
    game = variant.task or "tic_tac_toe"
    config = base_config(defaults.alphazero_config())
    config.env.id = f"pgx:{game}"
    config.env.num_envs = 256
    config.total_timesteps = _TOTAL_TIMESTEPS.get(game, 2_000_000)
    config.agent.num_minibatches = 16
    config.agent.update_epochs = 4
    config.agent.gumbel_scale = 3.0
    config.pipeline.updates_per_call = 10
    config.log.every_updates = 10
    if "smoke" in variant:
        config.env.num_envs = 8
        config.agent.num_steps = 8
        config.agent.num_minibatches = 2
        config.agent.num_simulations = 4
        config.total_timesteps = 8 * 8 * 6
        config.pipeline.updates_per_call = 1
        config.log.every_updates = 1
    return config
