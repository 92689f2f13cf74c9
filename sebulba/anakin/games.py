"""Two-player turn-based games as one env of self-play, and their rules for search.

A two-player zero-sum game of perfect information (pgx's board games) runs as a
`JaxEnv` that plays both sides: each step is a move by the player whose turn it is, the
observation is the board as the player to move sees it (pgx's observations are), and the
reward is the mover's. An episode's return is so 1 for a decisive game (its last move
won) and 0 for a draw, whichever side won.

Such an env's `EnvSpec.game` holds the game's `GameRules`: the game itself, stepped from
an observation, for agents that search the real game instead of a learned model
(AlphaZero). The whole game state travels in the observation, as entries named
`game_state.<field>` (`STATE_PREFIX`), so that a search can start from any stored
observation; a network reads the observation without them
(`GameRules.network_observation`). Only self-play agents (`SELF_PLAY`,
`sebulba.agents.api.plays_self_play`) play such envs: any other would learn from rewards
that change sides every step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from sebulba.environments.spaces import ArraySpec

STATE_PREFIX = "game_state"
Observation = Any  # A dict of one env's (or a batch's) observation entries.


@flax.struct.dataclass
class GameStep:
    """One move from an observation (one env's arrays).

    Attributes:
      obs: the observation after the move, as the player to move then sees it.
      reward: float32, the mover's reward.
      terminated: bool, the game is over (a later move changes nothing and earns 0).
      turn_passes: bool, the other player moves next (False: the same player moves again).
    """

    obs: Observation
    reward: jax.Array
    terminated: jax.Array
    turn_passes: jax.Array


@dataclasses.dataclass(frozen=True)
class GameRules:
    """A two-player zero-sum game's own rules, on observations (see the module docstring).

    Attributes:
      state_entries: the observation entries that hold the game state (not for networks).
      step: `step(obs, action) -> GameStep` for one env (vmap it for a batch): the move
        `action` from the state `obs` holds. A terminated state stays as it is.
      player: `player(obs) -> int32`, whose turn it is (0 or 1) in one env's state.
    """

    state_entries: tuple[str, ...]
    step: Callable[[Observation, jax.Array], GameStep]
    player: Callable[[Observation], jax.Array]

    def network_observation(self, obs: Observation, mask_entry: str | None) -> Any:
        """The entries a network reads: every one but the game state and the action mask;
        one array where a single entry is left."""
        kept = {
            name: value
            for name, value in obs.items()
            if name not in self.state_entries and name != mask_entry
        }
        return next(iter(kept.values())) if len(kept) == 1 else kept


def state_entry_names(state: Any, shared: dict[str, str]) -> dict[str, str]:
    """The observation entry of each leaf of a game state (a pytree of arrays), keyed by
    the leaf's path: `shared` maps a path to an entry the observation already has (pgx's
    `.observation` planes, `.legal_action_mask`), every other leaf gets its own
    `game_state<path>` entry."""
    paths = [jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_leaves_with_path(state)]
    return {path: shared.get(path, STATE_PREFIX + path) for path in paths}


def state_codec(state_shape: Any, shared: dict[str, str]):
    """`(encode, decode, specs)` for a game state shaped like `state_shape` (ShapeDtypes):
    `encode(state) -> {entry: array}` of the entries it owns (`specs`, their ArraySpecs),
    `decode(obs) -> state` from an observation holding them and the shared ones, cast
    back to the state's dtypes (a shared entry may be observed as another dtype)."""
    with_paths, treedef = jax.tree_util.tree_flatten_with_path(state_shape)
    order = [jax.tree_util.keystr(path) for path, _ in with_paths]
    leaves = [leaf for _, leaf in with_paths]
    names = state_entry_names(state_shape, shared)
    owned = {
        names[path]: leaf
        for path, leaf in zip(order, leaves, strict=True)
        if names[path].startswith(STATE_PREFIX)
    }
    specs = {
        name: ArraySpec(tuple(int(n) for n in leaf.shape), _entry_dtype(leaf.dtype).name)
        for name, leaf in owned.items()
    }

    def encode(state) -> dict[str, jax.Array]:
        values = jax.tree_util.tree_leaves(state)
        by_name = {names[p]: v for p, v in zip(order, values, strict=True)}
        return {name: _to_entry(by_name[name]) for name in specs}

    def decode(obs: Observation):
        values = [
            _from_entry(obs[names[p]], leaf.dtype) for p, leaf in zip(order, leaves, strict=True)
        ]
        return jax.tree_util.tree_unflatten(treedef, values)

    return encode, decode, specs


def _entry_dtype(dtype) -> jnp.dtype:
    """The observation dtype that holds a state leaf exactly: float32 for floats, int32
    for every integer and bool (observations are float32, int32, uint8, and bool for the
    action mask only)."""
    dtype = jnp.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.floating):
        if dtype.itemsize > 4:
            raise ValueError(f"a game state leaf of {dtype} does not fit float32")
        return jnp.dtype(jnp.float32)
    if dtype.itemsize > 4:
        raise ValueError(f"a game state leaf of {dtype} does not fit int32")
    return jnp.dtype(jnp.int32)


def _to_entry(value: jax.Array) -> jax.Array:
    value = jnp.asarray(value)  # A state may hold Python numbers (othello's).
    if value.dtype == jnp.uint32:  # Its bits, so that hashes above 2**31 come back whole.
        return jax.lax.bitcast_convert_type(value, jnp.int32)
    return value.astype(_entry_dtype(value.dtype))


def _from_entry(entry: jax.Array, dtype) -> jax.Array:
    if jnp.dtype(dtype) == jnp.uint32:
        return jax.lax.bitcast_convert_type(entry.astype(jnp.int32), jnp.uint32)
    return entry.astype(dtype)
