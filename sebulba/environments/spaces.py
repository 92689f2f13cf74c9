"""What an env observes and accepts, and the host-side conversions to and from it.

In the manner of dm_env's specs (as acme uses them), an `EnvSpec` describes the
observations as a pytree of `ArraySpec`s (a dict for envpool's dict observations, one
`ArraySpec` otherwise) and the actions as one action spec: `Discrete`, `Box` or
`MultiDiscrete`. The pipeline, evaluation and `sebulba.load_policy` build, shard and
convert every array from these specs and never ask which kind of space they hold; only
an agent (through `sebulba.agents.distributions`) looks at the action spec's kind.

Host-side conversions live here too, so every caller converts alike:
`host_observation` turns envpool's observations into the spec's arrays (float64 becomes
float32, Discrete entries int32), and each action spec's `to_env` turns a batch of
actions into what the env steps with (Box actions are clipped to the bounds there,
while the unclipped sample is what the agent stores and learns from).

Spaces of the wider envpool families map onto the same few kinds:

* Nested dict observations (Jumanji's `agent_position: {row, col}`, FrankaKitchen's
  goals) become one flat dict, nested names joined by "_" (`agent_position_row`), as
  Jumanji's Anakin adapter names them; `host_observation` flattens envpool's nested
  dicts alike, so actors, evaluation and `load_policy` see the same entries.
* MultiBinary observations (pgx's planes, Jumanji's masks) are float32 arrays of 0/1:
  the networks scale uint8 entries as pixels (by 1/255), which a 0/1 mask is not.
* An action mask, a dict entry named `action_mask` (Jumanji) or `legal_action_mask`
  (pgx) whose shape lays out the legal actions (`action_mask_layout`), is a bool
  array, and `EnvSpec.action_mask` names it: the agents' policies give the actions it
  marks illegal no probability (`sebulba.agents.distributions.mask_logits`). It stays an
  observation entry too, which the networks read as 0/1 features.
* A Discrete observation that does not start at 0 (Jumanji TSP's `position`, from -1)
  is kept as its integer value, without `num_values`: an embedding needs 0 .. n - 1.
* An integer Box action [K] with lower bounds 0 (Jumanji's multi-part actions, e.g.
  BinPack's (space, item)) is the `MultiDiscrete` of its bounds + 1.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from sebulba.errors import ConfigError

# The host dtype of each envpool observation dtype: accelerators prefer 32-bit numbers.
_HOST_DTYPES = {"float64": "float32", "int64": "int32", "uint64": "uint32"}


@dataclasses.dataclass(frozen=True)
class ArraySpec:
    """One observation array of one env, as the host holds it.

    Observation bounds are not carried: envpool's are unreliable (dm_control's Boxes
    claim [2.2e-308, 1.8e308]), and no component relies on them.

    Attributes:
      shape: its shape, e.g. (4,), (4, 84, 84) or () for a scalar.
      dtype: numpy dtype name ("float32", "uint8", "int32"; "bool" for an action mask).
      num_values: for a discrete entry (gymnasium `Discrete`, e.g. MiniGrid's
        "direction"), the number of values it takes (0 .. num_values - 1); else None.
      components: the indices of the env's vector components this array keeps, in
        order (`env.observation_indices`, e.g. CartPole's positions without their
        velocities); None: all of them. `host_observation` selects them.
    """

    shape: tuple[int, ...]
    dtype: str
    num_values: int | None = None
    components: tuple[int, ...] | None = None

    @property
    def value_bounds(self) -> tuple[int, int] | None:
        """[low, high) of the values a discrete entry takes; None: any value of its dtype."""
        return None if self.num_values is None else (0, self.num_values)


@dataclasses.dataclass(frozen=True)
class Discrete:
    """One action in {0, ..., num_actions - 1} per env: int32 [B]."""

    num_actions: int

    @property
    def shape(self) -> tuple[int, ...]:
        return ()

    @property
    def dtype(self) -> str:
        return "int32"

    @property
    def value_bounds(self) -> tuple[int, int]:
        """[low, high) of the action's values."""
        return 0, self.num_actions

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        return np.asarray(actions, np.int32)


@dataclasses.dataclass(frozen=True)
class Box:
    """A vector of real actions per env: float32 [B, *shape], valid within [low, high]."""

    shape: tuple[int, ...]
    low: tuple[float, ...]  # Flattened bounds, one per component.
    high: tuple[float, ...]

    @property
    def dtype(self) -> str:
        return "float32"

    @property
    def value_bounds(self) -> None:
        """None: a Gaussian policy's sample may lie outside [low, high]; it must be finite."""
        return None

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        """Clips to the bounds: a Gaussian policy samples outside them, the env may not."""
        low = np.reshape(self.low, self.shape)
        high = np.reshape(self.high, self.shape)
        return np.clip(np.asarray(actions, np.float32), low, high)


@dataclasses.dataclass(frozen=True)
class MultiDiscrete:
    """K discrete actions per env, component k in {0, ..., nvec[k] - 1}: int32 [B, K]."""

    nvec: tuple[int, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.nvec),)

    @property
    def dtype(self) -> str:
        return "int32"

    @property
    def value_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """[low, high) of each component's values, [K] each."""
        return np.zeros(len(self.nvec), np.int32), np.asarray(self.nvec, np.int32)

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        return np.asarray(actions, np.int32)


ActionSpec = Discrete | Box | MultiDiscrete

# The observation entries that mark a task's legal actions: Jumanji's and pgx's names.
ACTION_MASK_NAMES = ("action_mask", "legal_action_mask")


def action_mask_layout(shape: tuple[int, ...], action: ActionSpec) -> str | None:
    """How a mask of `shape` marks the legal actions of `action`, or None if it cannot.

    * "per_action": one flag per action of a Discrete n ([n]), or per choice of each
      component of a MultiDiscrete: [sum(nvec)], or [K, n] when every component has n
      choices (Jumanji's multi-agent tasks: one row per agent). The components stay
      independent.
    * "joint": one flag per combination of a MultiDiscrete's components, shaped nvec
      (Jumanji's Tetris [rotations, columns], Minesweeper [rows, columns], Sudoku): the
      components are then chosen together, as one choice among prod(nvec).

    A Box action has no mask. A [K, n] mask of a MultiDiscrete (n, n) (K = n = 2) fits
    both layouts; it is read as joint.
    """
    shape = tuple(shape)
    if isinstance(action, Discrete):
        return "per_action" if shape == (action.num_actions,) else None
    if not isinstance(action, MultiDiscrete):
        return None
    nvec = tuple(action.nvec)
    if len(nvec) > 1 and shape == nvec:
        return "joint"
    if shape == (sum(nvec),) or (len(set(nvec)) == 1 and shape == (len(nvec), nvec[0])):
        return "per_action"
    return None


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What an agent may know about the environment.

    Attributes:
      env_id: envpool task id, e.g. "CartPole-v1".
      observation: a pytree of `ArraySpec`: a flat dict of them for dict observations
        (dm_control, MiniGrid, Jumanji's nested ones flattened), one `ArraySpec` otherwise.
      action: the action space.
      is_atari: whether observations are stacked 84x84 frames of an Atari game.
      action_mask: the name of the observation entry that marks the legal actions
        (`with_action_mask`), None when the task has none.
      game: a two-player game's `sebulba.anakin.games.GameRules` (the env plays both
        sides; only self-play agents take it), None for every other task. Not compared:
        two makes of one game are the same spec.
    """

    env_id: str
    observation: Any
    action: ActionSpec
    is_atari: bool = False
    action_mask: str | None = None
    game: Any = dataclasses.field(default=None, compare=False)

    @property
    def action_mask_layout(self) -> str | None:
        """ "per_action" or "joint" (`action_mask_layout`); None without an action mask."""
        if self.action_mask is None:
            return None
        return action_mask_layout(self.observation[self.action_mask].shape, self.action)

    @property
    def obs_shape(self) -> tuple[int, ...]:
        """Shape of a single-array observation (agents written for one array use it)."""
        return self._single_observation().shape

    @property
    def obs_dtype(self) -> str:
        """dtype name of a single-array observation."""
        return self._single_observation().dtype

    @property
    def num_actions(self) -> int:
        """Size of a Discrete action space (agents written for one use it)."""
        if not isinstance(self.action, Discrete):
            raise ConfigError(f"env.id {self.env_id!r} has {self.action}, not a Discrete action")
        return self.action.num_actions

    def _single_observation(self) -> ArraySpec:
        if not isinstance(self.observation, ArraySpec):
            names = ", ".join(self.observation)
            raise ConfigError(f"env.id {self.env_id!r} observes a dict ({names}), not one array")
        return self.observation


def is_array_spec(x: Any) -> bool:
    """The leaf test for observation spec pytrees."""
    return isinstance(x, ArraySpec)


def map_observation(fn, observation_spec: Any, *rest: Any) -> Any:
    """`jax.tree.map` over the leaves of an observation spec (and pytrees like it)."""
    return jax.tree.map(fn, observation_spec, *rest, is_leaf=is_array_spec)


def observation_struct(observation_spec: Any, *leading: int) -> Any:
    """`jax.ShapeDtypeStruct`s of observations with the `leading` axes, e.g. (T + 1, B)."""
    return map_observation(
        lambda s: jax.ShapeDtypeStruct((*leading, *s.shape), np.dtype(s.dtype)), observation_spec
    )


def zero_observation(observation_spec: Any, *leading: int) -> Any:
    """numpy zeros of the observations with the `leading` axes (e.g. to initialise networks)."""
    return map_observation(lambda s: np.zeros((*leading, *s.shape), s.dtype), observation_spec)


def host_observation(observation_spec: Any, obs: Any) -> Any:
    """envpool's observations [B, ...] as the spec's arrays (float64 -> float32, ...).

    The one conversion of observations: the actors, evaluation and `load_policy` use it.
    Raises ValueError if `obs` does not have the spec's structure.
    """

    def convert(spec: ArraySpec, x) -> np.ndarray:
        x = np.asarray(x, spec.dtype)
        return x if spec.components is None else x[..., list(spec.components)]

    return map_observation(convert, observation_spec, dict_tree(obs))


def select_components(observation: Any, indices: tuple[int, ...], env_id: str) -> Any:
    """The spec of a vector observation reduced to the components `indices` names.

    Hides parts of the state, e.g. to make a task partially observed; `()` keeps all.

    Raises:
      ConfigError: naming env.observation_indices, unless the observation is one vector
        [D] and the indices are distinct and in [0, D).
    """
    indices = tuple(indices)
    if not indices:
        return observation
    if not (isinstance(observation, ArraySpec) and len(observation.shape) == 1):
        raise ConfigError(
            f"env.observation_indices {indices} needs a vector observation [D], but env.id "
            f"{env_id!r} observes {observation}"
        )
    size = observation.shape[0]
    ints = all(isinstance(i, int) and not isinstance(i, bool) for i in indices)
    if not ints or len(set(indices)) != len(indices) or not all(0 <= i < size for i in indices):
        raise ConfigError(
            f"env.observation_indices {indices} must be distinct integers in [0, {size}) "
            f"(env.id {env_id!r} observes {size} components)"
        )
    return dataclasses.replace(observation, shape=(len(indices),), components=indices)


# Joins the names of nested dict observations: {"a": {"b": x}} -> {"a_b": x}.
NAME_SEPARATOR = "_"


def dict_tree(obs: Any) -> Any:
    """envpool's dict observations as one flat plain dict (a pytree); arrays unchanged.

    Nested dicts are flattened, names joined by `NAME_SEPARATOR`, as
    `observation_spec_of` names their entries.
    """
    if not _is_mapping(obs):
        return obs
    return dict(_flat_arrays(obs, ()))


def _is_mapping(obs: Any) -> bool:
    return hasattr(obs, "keys") and not isinstance(obs, np.ndarray)


def _flat_arrays(obs, path: tuple[str, ...]) -> list[tuple[str, Any]]:
    """(joined name, array) of a nested dict of arrays, depth first in its key order."""
    items = []
    for key in obs.keys():
        value = obs[key]
        if _is_mapping(value):
            items.extend(_flat_arrays(value, (*path, key)))
        else:
            items.append((NAME_SEPARATOR.join((*path, key)), value))
    return items


def _is_dict_space(space) -> bool:
    return type(space).__name__ == "Dict"


def _flat_spaces(space, path: tuple[str, ...]) -> list[tuple[str, Any]]:
    """(joined name, space) of a nested gymnasium Dict, in `_flat_arrays`' order."""
    items = []
    for key, sub in space.spaces.items():
        if _is_dict_space(sub):
            items.extend(_flat_spaces(sub, (*path, key)))
        else:
            items.append((NAME_SEPARATOR.join((*path, key)), sub))
    return items


def _array_spec(space, env_id: str, name: str) -> ArraySpec:
    kind = type(space).__name__
    if kind == "Discrete":
        if int(getattr(space, "start", 0)) != 0:
            # Values start..start+n-1 are no embedding's indices: kept as numbers.
            return ArraySpec((), "int32")
        return ArraySpec((), "int32", int(space.n))
    if kind == "Box":
        dtype = np.dtype(space.dtype).name
        return ArraySpec(tuple(space.shape), _HOST_DTYPES.get(dtype, dtype))
    if kind == "MultiBinary":
        return ArraySpec(tuple(int(n) for n in np.atleast_1d(space.shape)), "float32")
    raise ConfigError(
        f"env.id {env_id!r} has an unsupported observation space {name}{space}: "
        "observations must be Box, Discrete or MultiBinary arrays, or a (nested) dict of them"
    )


def observation_spec_of(space, env_id: str) -> Any:
    """The observation spec of a gymnasium space: Box, Discrete, MultiBinary, or a Dict.

    A nested Dict becomes one flat dict, names joined by `NAME_SEPARATOR`
    (`agent_position_row`), in the order `dict_tree` flattens envpool's observations.

    Raises:
      ConfigError: naming env.id and the space, for any other space, or for nested
        names that join to the same name.
    """
    if not _is_dict_space(space):
        return _array_spec(space, env_id, "")
    items = _flat_spaces(space, ())
    names = [name for name, _ in items]
    clash = next((name for name in names if names.count(name) > 1), None)
    if clash is not None:
        raise ConfigError(
            f"env.id {env_id!r} observes two entries named {clash!r} once nested names "
            f"are joined by {NAME_SEPARATOR!r}"
        )
    return {name: _array_spec(sub, env_id, f"{name!r}: ") for name, sub in items}


def action_spec_of(space, env_id: str) -> ActionSpec:
    """The action spec of a gymnasium space: Discrete, Box or MultiDiscrete.

    Raises:
      ConfigError: naming env.id and the space, for any other space.
    """
    kind = type(space).__name__
    if kind == "Discrete" and int(getattr(space, "start", 0)) == 0:
        return Discrete(int(space.n))
    if kind == "Box" and np.issubdtype(space.dtype, np.floating):
        low = np.broadcast_to(space.low, space.shape).astype(np.float64).ravel()
        high = np.broadcast_to(space.high, space.shape).astype(np.float64).ravel()
        return Box(tuple(space.shape), tuple(low.tolist()), tuple(high.tolist()))
    from_zero = not np.any(getattr(space, "start", 0))
    if kind == "MultiDiscrete" and np.ndim(space.nvec) == 1 and from_zero:
        return MultiDiscrete(tuple(int(n) for n in space.nvec))
    if kind == "Box" and np.issubdtype(space.dtype, np.integer) and len(space.shape) == 1:
        low = np.broadcast_to(space.low, space.shape)
        high = np.broadcast_to(space.high, space.shape)
        # Integer choices 0..high per component: a MultiDiscrete that envpool calls a Box.
        if not np.any(low) and np.all(high >= 0) and np.all(high < np.iinfo(np.int32).max):
            return MultiDiscrete(tuple(int(n) + 1 for n in high))
    raise ConfigError(
        f"env.id {env_id!r} has an unsupported action space {space}: actions must be "
        "Discrete (from 0), a float Box, a 1-D MultiDiscrete (from 0) or a 1-D integer "
        "Box from 0"
    )


def with_action_mask(spec: EnvSpec) -> EnvSpec:
    """`spec` with its action mask found: the first dict entry of `ACTION_MASK_NAMES`
    whose shape lays out the actions (`action_mask_layout`) becomes a bool entry and
    `EnvSpec.action_mask`. An entry of such a name that lays out no actions (a mask of
    another shape) stays an ordinary observation. Every spec maker calls this, so the
    actors, the learner, evaluation and `load_policy` agree on the mask.
    """
    if not isinstance(spec.observation, dict):
        return spec
    for name in ACTION_MASK_NAMES:
        entry = spec.observation.get(name)
        if entry is not None and action_mask_layout(entry.shape, spec.action) is not None:
            observation = dict(spec.observation)
            observation[name] = dataclasses.replace(entry, dtype="bool", num_values=None)
            return dataclasses.replace(spec, observation=observation, action_mask=name)
    return spec


def env_spec_of(
    env_id: str, envs, *, is_atari: bool = False, observation_indices: tuple[int, ...] = ()
) -> EnvSpec:
    """Describes an envpool pool's (gymnasium) spaces; raises ConfigError if unsupported.

    `observation_indices` (`env.observation_indices`) keeps only those components of a
    vector observation (`select_components`).
    """
    observation = observation_spec_of(envs.observation_space, env_id)
    spec = EnvSpec(
        env_id=env_id,
        observation=select_components(observation, observation_indices, env_id),
        action=action_spec_of(envs.action_space, env_id),
        is_atari=is_atari,
    )
    return with_action_mask(spec)
