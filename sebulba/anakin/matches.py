"""Matches of a two-player game (`EnvSpec.game`) between two players, and baseline
players: uniformly random, one-ply greedy, and an exact tic-tac-toe player.

Self-play's own returns say little of strength (a decisive game scores 1 whoever won);
a match against a fixed player does. `play_matches` plays `num_games` games in one
jitted program, player A moving first in the first half of them and second in the
other half, and counts A's wins, draws and losses on each side. A player is a function
`player(obs [N, ...], key) -> actions [N]` of observations as the env returns them.

`benchmarks/alphazero_matches.py` plays trained runs (`sebulba.load_policy`) against
the baselines (`OPPONENTS`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from sebulba.anakin.env_api import JaxEnv

Player = Callable[[Any, jax.Array], jax.Array]
# A bound on any game's moves, so that a game that never ends cannot hang a match.
MAX_MOVES = 10_000


@dataclasses.dataclass(frozen=True)
class SideResults:
    """Player A's results on one side (moving first or second).

    Attributes:
      wins, draws, losses: games A won, drew, lost.
    """

    wins: int
    draws: int
    losses: int

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses

    @property
    def win_rate(self) -> float:
        return self.wins / max(self.games, 1)

    def as_dict(self) -> dict[str, float]:
        return {
            "games": self.games,
            "wins": self.wins,
            "draws": self.draws,
            "losses": self.losses,
            "win_rate": self.win_rate,
        }


@dataclasses.dataclass(frozen=True)
class MatchResults:
    """Player A's results moving first and moving second."""

    first: SideResults
    second: SideResults

    def as_dict(self) -> dict[str, dict[str, float]]:
        return {"moving_first": self.first.as_dict(), "moving_second": self.second.as_dict()}


def _uniform_among(allowed: jax.Array, key: jax.Array) -> jax.Array:
    """[N, A] bool -> [N] int32, each row's choice uniformly among its allowed actions."""
    keys = jax.random.split(key, allowed.shape[0])
    choose = jax.vmap(lambda k, m: jax.random.categorical(k, jnp.where(m, 0.0, -jnp.inf)))
    return choose(keys, allowed).astype(jnp.int32)


def random_player(env: JaxEnv) -> Player:
    """A uniformly random legal move."""
    mask_entry = env.spec.action_mask

    def play(obs, key):
        return _uniform_among(obs[mask_entry], key)

    return play


def one_ply_greedy_player(env: JaxEnv) -> Player:
    """A move that wins at once where there is one (at random among them), else a
    uniformly random legal move: it looks one move ahead, its own."""
    rules, mask_entry = env.spec.game, env.spec.action_mask
    num_actions = env.spec.action.num_actions

    def winning_moves(obs):  # One env: [A] bool.
        moves = jnp.arange(num_actions, dtype=jnp.int32)
        after = jax.vmap(rules.step, in_axes=(None, 0))(obs, moves)
        return obs[mask_entry] & after.terminated & (after.reward > 0)

    def play(obs, key):
        legal = obs[mask_entry]
        winning = jax.vmap(winning_moves)(obs)
        preferred = jnp.where(jnp.any(winning, axis=-1, keepdims=True), winning, legal)
        return _uniform_among(preferred, key)

    return play


# A tic-tac-toe board's lines, by cell (row-major, pgx's action order).
TIC_TAC_TOE_LINES = (
    (0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)
)  # fmt: skip


@functools.cache
def exact_tic_tac_toe_moves() -> np.ndarray:
    """[3**9, 9] bool: for every board as its mover sees it (cell i's base-3 digit: 0
    empty, 1 the mover's mark, 2 the opponent's), the moves of the best outcome under
    perfect play by both sides (negamax over the whole game tree)."""
    swap = {0: 0, 1: 2, 2: 1}

    def after(board, cell):  # The mover marks `cell`; then the other player moves.
        return tuple(swap[c] for c in board[:cell] + (1,) + board[cell + 1 :])

    @functools.cache
    def value(board) -> int:  # The mover's outcome: 1 win, 0 draw, -1 loss.
        if any(all(board[i] == 2 for i in line) for line in TIC_TAC_TOE_LINES):
            return -1
        empty = [i for i in range(9) if board[i] == 0]
        return max((-value(after(board, i)) for i in empty), default=0)

    table = np.zeros((3**9, 9), bool)
    for index in range(3**9):
        board = tuple((index // 3**i) % 3 for i in range(9))
        outcomes = {i: -value(after(board, i)) for i in range(9) if board[i] == 0}
        best = max(outcomes.values(), default=None)
        for cell, outcome in outcomes.items():
            table[index, cell] = outcome == best
    return table


def exact_tic_tac_toe_player(env: JaxEnv) -> Player:
    """A perfect tic-tac-toe player (pgx:tic_tac_toe), at random among its best moves:
    it never loses, and wins whatever its opponent's mistakes allow."""
    if env.spec.env_id != "pgx:tic_tac_toe":
        raise ValueError(f"the exact player plays pgx:tic_tac_toe, not {env.spec.env_id!r}")
    table = jnp.asarray(exact_tic_tac_toe_moves())
    powers = jnp.asarray(3 ** np.arange(9), jnp.int32)

    def play(obs, key):
        # pgx's planes: the mover's marks, then the opponent's, row-major cells.
        planes = obs["observation"].reshape(-1, 9, 2).astype(jnp.int32)
        best = table[jnp.sum((planes[..., 0] + 2 * planes[..., 1]) * powers, axis=-1)]
        return _uniform_among(best, key)

    return play


# The baseline players by name (benchmarks/alphazero_matches.py's --opponents).
OPPONENTS = {
    "random": random_player,
    "one_ply_greedy": one_ply_greedy_player,
    "exact": exact_tic_tac_toe_player,
}


def play_matches(
    env: JaxEnv, player_a: Player, player_b: Player, num_games: int, seed: int = 0
) -> MatchResults:
    """`num_games` games (even) of A against B: A moves first in the first half.

    Raises:
      ValueError: `env` is not a two-player game, or `num_games` is not even and positive.
    """
    rules = env.spec.game
    if rules is None:
        raise ValueError(f"env.id {env.spec.env_id!r} is not a two-player game")
    if num_games <= 0 or num_games % 2:
        raise ValueError(f"num_games must be even and positive, got {num_games}")
    a_moves_first = jnp.arange(num_games) < num_games // 2

    @jax.jit
    def run(key):
        reset_key, play_key = jax.random.split(key)
        states, obs = jax.vmap(env.reset)(jax.random.split(reset_key, num_games))
        first = jax.vmap(rules.player)(obs)
        player_of_a = jnp.where(a_moves_first, first, 1 - first)

        def playing(carry):
            _, _, over, _, move = carry
            return jnp.logical_and(jnp.logical_not(jnp.all(over)), move < MAX_MOVES)

        def one_move(carry):
            states, obs, over, score, move = carry
            keys = jax.random.split(jax.random.fold_in(play_key, move), 3)
            a_moves = jax.vmap(rules.player)(obs) == player_of_a
            actions = jnp.where(a_moves, player_a(obs, keys[0]), player_b(obs, keys[1]))
            step_keys = jax.random.split(keys[2], num_games)
            states, obs, reward, terminated, truncated = jax.vmap(env.step)(
                states, actions, step_keys
            )
            # Zero-sum: the mover's reward is the other player's loss.
            gained = jnp.where(over, 0.0, jnp.where(a_moves, reward, -reward))
            over = over | terminated | truncated
            return states, obs, over, score + gained, move + 1

        carry = (states, obs, jnp.zeros(num_games, bool), jnp.zeros(num_games), jnp.int32(0))
        _, _, over, score, _ = jax.lax.while_loop(playing, one_move, carry)
        return over, score

    over, score = jax.device_get(run(jax.random.key(seed)))
    if not np.all(over):
        raise RuntimeError(f"{int(np.sum(~over))} games did not end within {MAX_MOVES} moves")
    first = np.asarray(a_moves_first)

    def side(games) -> SideResults:
        return SideResults(
            wins=int(np.sum(score[games] > 0)),
            draws=int(np.sum(score[games] == 0)),
            losses=int(np.sum(score[games] < 0)),
        )

    return MatchResults(first=side(first), second=side(~first))
