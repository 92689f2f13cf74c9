"""Pgx (Koyamada et al. 2023): board games, 2048 and MinAtar in JAX.

Reference: "Pgx: Hardware-Accelerated Parallel Game Simulators for Reinforcement
Learning" (NeurIPS 2023 Datasets and Benchmarks), https://github.com/sotetsuk/pgx.

The single-player games (2048 and the five MinAtar games, which pgx 2.6 ships in
`pgx.minatar`) run as any JAX env. The two-player board games of perfect information
without chance (`SELF_PLAY_GAMES`: tic-tac-toe, connect four, othello, hex, go, the
chess and shogi family) run as one env of self-play (`sebulba.anakin.games`): each step
is the move of the player whose turn it is, rewarded with that player's reward, and the
spec carries the game's rules for search (AlphaZero). Backgammon (dice), the poker games
(hidden cards) and sparrow mahjong (three players) are refused: a search over the real
state would see the dice to come or the other player's hand. `Env.step(state, action,
key)` does not auto-reset. Pgx has no time limit (`state.truncated` stays False).

2048 observes a dict: its planes as "observation" and `legal_action_mask` (bool), which
the policies obey (`spaces.with_action_mask`): an illegal move would end the game with
pgx's penalty (-1). The MinAtar games observe their planes alone, as pgx's MinAtar
example does: every action is legal in them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from sebulba.anakin import games
from sebulba.anakin.env_api import JaxEnv
from sebulba.environments.spaces import ArraySpec, Discrete, EnvSpec, with_action_mask
from sebulba.errors import ConfigError

PACKAGE = "pgx"
_PLAYERS = {2: "two-player", 3: "three-player", 4: "four-player"}
# Two-player, zero-sum, perfect information, no chance: the real game is a search model.
SELF_PLAY_GAMES = (
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
_NOT_SEARCHABLE = {
    "backgammon": "its dice are chance moves, which a search over the real state would foresee",
    "kuhn_poker": "the players' cards are hidden, which a search over the real state would see",
    "leduc_holdem": "the players' cards are hidden, which a search over the real state would see",
}
# The state leaves that the observation already holds under its own names.
_SHARED_LEAVES = {".observation": "observation", ".legal_action_mask": "legal_action_mask"}


def task_ids() -> tuple[str, ...]:
    import pgx

    return tuple(pgx.available_envs())


def _observation_dtype(dtype, env_id: str) -> str:
    dtype = np.dtype(dtype)
    if dtype == np.bool_ or np.issubdtype(dtype, np.floating):
        return "float32"  # MinAtar's and 2048's one-hot planes are bools.
    if np.issubdtype(dtype, np.integer):
        return "int32"
    raise ConfigError(f"env.id {env_id!r} has an unsupported observation dtype {dtype}")


def make(task: str) -> JaxEnv:
    """The `JaxEnv` of one Pgx game ("2048", "minatar-breakout"; "tic_tac_toe" in self-play).

    Raises:
      ConfigError: for games of three or more players, or with chance or hidden state.
    """
    import pgx

    env_id = f"pgx:{task}"
    env = pgx.make(task)
    players = int(env.num_players)
    if task in _NOT_SEARCHABLE:
        raise ConfigError(
            f"env.id {env_id!r} is a two-player game that sebulba's self-play does not play: "
            f"{_NOT_SEARCHABLE[task]}"
        )
    if players > 2:
        kind = _PLAYERS.get(players, f"{players}-player")
        raise ConfigError(
            f"env.id {env_id!r} is a {kind} game: sebulba's self-play plays two-player "
            f"games only ({', '.join(SELF_PLAY_GAMES)})"
        )
    if players == 2:
        return _self_play(env, task)
    # Shapes without running the game (pgx's `num_actions` and `observation_shape` do).
    state = jax.eval_shape(env.init, jax.random.key(0))
    planes = ArraySpec(
        tuple(int(n) for n in state.observation.shape),
        _observation_dtype(state.observation.dtype, env_id),
    )
    num_actions = int(state.legal_action_mask.shape[0])
    has_illegal_actions = not task.startswith("minatar")
    if has_illegal_actions:
        mask = ArraySpec((num_actions,), "bool")
        observation = {"observation": planes, "legal_action_mask": mask}
    else:
        observation = planes
    action = Discrete(num_actions)
    spec = with_action_mask(EnvSpec(env_id=env_id, observation=observation, action=action))

    def observe(state):
        obs = state.observation.astype(planes.dtype)
        if not has_illegal_actions:
            return obs
        return {"observation": obs, "legal_action_mask": state.legal_action_mask}

    def reset(key: jax.Array):
        state = env.init(key)
        return state, observe(state)

    def step(state, action: jax.Array, key: jax.Array):
        state = env.step(state, action, key)
        reward = state.rewards[0].astype(jnp.float32)
        return state, observe(state), reward, state.terminated, state.truncated

    return JaxEnv(spec=spec, reset=reset, step=step, max_episode_steps=None)


def _self_play(env, task: str) -> JaxEnv:
    """A two-player game as one env of self-play, with its rules for search."""
    env_id = f"pgx:{task}"
    state_shape = jax.eval_shape(env.init, jax.random.key(0))
    encode, decode, state_specs = games.state_codec(state_shape, _SHARED_LEAVES)
    planes = ArraySpec(
        tuple(int(n) for n in state_shape.observation.shape),
        _observation_dtype(state_shape.observation.dtype, env_id),
    )
    num_actions = int(state_shape.legal_action_mask.shape[0])
    mask = ArraySpec((num_actions,), "bool")
    observation = {"observation": planes, "legal_action_mask": mask, **state_specs}

    def observe(state):
        return {
            "observation": state.observation.astype(planes.dtype),
            "legal_action_mask": state.legal_action_mask,
            **encode(state),
        }

    def move(state, action, key):
        """(state, the mover's reward, turn passes) after the player to move plays."""
        mover = state.current_player
        after = env.step(state, action, key)
        # pgx leaves a finished game as it is and pays nothing for a move in it.
        reward = jnp.where(state.terminated, 0.0, after.rewards[mover]).astype(jnp.float32)
        return after, reward, after.current_player != mover

    def rules_step(obs, action):
        # The games here have no chance moves: pgx's step does not read its key.
        state, reward, turn_passes = move(decode(obs), action, jax.random.key(0))
        return games.GameStep(observe(state), reward, state.terminated, turn_passes)

    rules = games.GameRules(
        state_entries=tuple(state_specs),
        step=rules_step,
        player=lambda obs: obs[f"{games.STATE_PREFIX}.current_player"].astype(jnp.int32),
    )
    spec = with_action_mask(
        EnvSpec(env_id=env_id, observation=observation, action=Discrete(num_actions), game=rules)
    )

    def reset(key: jax.Array):
        state = env.init(key)
        return state, observe(state)

    def step(state, action: jax.Array, key: jax.Array):
        state, reward, _ = move(state, action, key)
        return state, observe(state), reward, state.terminated, state.truncated

    return JaxEnv(spec=spec, reset=reset, step=step, max_episode_steps=None)
