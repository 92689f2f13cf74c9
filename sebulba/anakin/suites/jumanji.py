"""Jumanji (Bonnet et al. 2024): combinatorial, routing, packing and logic problems in JAX.

Reference: "Jumanji: a Diverse Suite of Scalable Reinforcement Learning Environments in
JAX" (ICLR 2024), https://github.com/instadeepai/jumanji.

`Environment.step(state, action)` does not auto-reset (only jumanji's wrappers do) and
takes no key: the state carries its own. Its dm_env-style timesteps fold the time limit
into a LAST step, and most environments end a timed-out episode with `termination`
(discount 0), like a terminal state. A LAST step is therefore truncated when its
discount is not 0 (jumanji's `truncation`) or the state's `step_count` reached the env's
`time_limit`, and terminated otherwise; a terminal state reached on the time limit's
very step reads as truncated, as the two cannot be told apart there.

Observations (NamedTuples and dataclasses, possibly nested) become a flat dict named
after their fields, nested names joined by "_" ("agent_position_row"); the `action_mask`
many of them hold is a bool entry that the policies obey (`spaces.with_action_mask`)
when its shape lays out the actions. Integer entries are int32 numbers, never
categorical (`num_values`): jumanji's `DiscreteArray` bounds do not hold (`_array_spec`).

Multi-agent tasks with one shared reward (Cleaner, MMST, RobotWarehouse) run as one
centralised agent choosing every agent's action (a MultiDiscrete action); those that
reward each agent separately are refused.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from sebulba.anakin.env_api import JaxEnv
from sebulba.environments.spaces import (
    ArraySpec,
    Box,
    Discrete,
    EnvSpec,
    MultiDiscrete,
    with_action_mask,
)
from sebulba.errors import ConfigError

PACKAGE = "jumanji"
_LAST = 2  # jumanji.types.StepType.LAST
# Tasks whose data jumanji downloads from the Hugging Face Hub when the env is made, as
# (repo, file): made only once the file is in the local cache, since a download that
# cannot happen retries for half a minute before it fails.
_DOWNLOADS = {"Sokoban-v0": ("InstaDeepAI/boxoban-levels", "unfiltered-train.npy")}


def task_ids() -> tuple[str, ...]:
    import jumanji

    # jumanji returns a set; sorted for a stable listing.
    return tuple(sorted(jumanji.registered_environments()))


def _spec_leaves(spec, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """(field path, array spec) of every array in a jumanji observation spec, in order."""
    from jumanji import specs

    if isinstance(spec, specs.Array):
        return [(path, spec)]
    # A composite spec holds its parts by the observation's field names; jumanji offers
    # `spec[name]` but no public listing of the names.
    return [leaf for name, sub in spec._specs.items() for leaf in _spec_leaves(sub, (*path, name))]


def _array_spec(spec, env_id: str, name: str) -> ArraySpec:
    shape = tuple(int(n) for n in spec.shape)
    dtype = np.dtype(spec.dtype)
    if dtype == np.bool_ or np.issubdtype(dtype, np.floating):
        # Masks and flags become 0/1 floats, like the other real-valued inputs.
        return ArraySpec(shape, "float32")
    if np.issubdtype(dtype, np.integer):
        # Grid codes, positions and counters (int8 ... int64): accelerators want 32 bits.
        # A DiscreteArray's `num_values` is not kept: jumanji's values leave that range
        # (TSP's position is -1 before the first city, Snake's step_count reaches its
        # time limit), and an embedding would read them out of bounds.
        return ArraySpec(shape, "int32")
    raise ConfigError(f"env.id {env_id!r} has an unsupported observation {name!r}: {spec}")


def _action_spec(spec, env_id: str):
    from jumanji import specs

    shape = tuple(int(n) for n in spec.shape)
    if isinstance(spec, specs.MultiDiscreteArray):
        if len(shape) == 1 and not np.any(np.asarray(spec.minimum)):
            return MultiDiscrete(tuple(int(n) for n in np.asarray(spec.num_values)))
    elif isinstance(spec, specs.DiscreteArray):
        return Discrete(int(spec.num_values))
    elif isinstance(spec, specs.BoundedArray) and np.issubdtype(spec.dtype, np.floating):
        low = np.broadcast_to(np.asarray(spec.minimum, np.float64), shape).ravel()
        high = np.broadcast_to(np.asarray(spec.maximum, np.float64), shape).ravel()
        return Box(shape, tuple(low.tolist()), tuple(high.tolist()))
    raise ConfigError(
        f"env.id {env_id!r} has an unsupported action spec {spec}: actions must be "
        "Discrete, a 1-D MultiDiscrete (from 0) or a float BoundedArray"
    )


def _check_downloaded(task: str, env_id: str) -> None:
    if task not in _DOWNLOADS:
        return
    from huggingface_hub import try_to_load_from_cache

    repo, filename = _DOWNLOADS[task]
    if not isinstance(try_to_load_from_cache(repo_id=repo, filename=filename), str):
        raise ConfigError(
            f"env.id {env_id!r} needs {filename} from the Hugging Face repo {repo}, which "
            "is not in the local Hugging Face cache and sebulba does not download: fetch it "
            f"once with huggingface_hub.hf_hub_download({repo!r}, {filename!r})"
        )


def make(task: str) -> JaxEnv:
    """The `JaxEnv` of one Jumanji task ("Snake-v1").

    Raises:
      ConfigError: the task's data is not downloaded, it rewards each agent separately,
        or its action or observation spec has no sebulba counterpart.
    """
    import jumanji

    env_id = f"jumanji:{task}"
    _check_downloaded(task, env_id)
    env = jumanji.make(task)
    reward_shape = tuple(env.reward_spec.shape)
    if reward_shape != ():
        raise ConfigError(
            f"env.id {env_id!r} is multi-agent with one reward per agent {reward_shape}: "
            "sebulba learns from one scalar reward"
        )
    leaves = _spec_leaves(env.observation_spec)
    names = ["_".join(path) for path, _ in leaves]
    spec = EnvSpec(
        env_id=env_id,
        observation={
            name: _array_spec(leaf, env_id, name)
            for name, (_, leaf) in zip(names, leaves, strict=True)
        },
        action=_action_spec(env.action_spec, env_id),
    )
    spec = with_action_mask(spec)  # `action_mask` marks the legal actions (bool).
    time_limit = getattr(env, "time_limit", None)
    time_limit = int(time_limit) if isinstance(time_limit, int | np.integer) else None

    def observe(observation) -> dict[str, jax.Array]:
        flat = {}
        for name, (path, _) in zip(names, leaves, strict=True):
            value = observation
            for field in path:
                value = value[field] if isinstance(value, dict) else getattr(value, field)
            flat[name] = jnp.asarray(value, spec.observation[name].dtype)
        return flat

    def reset(key: jax.Array):
        state, timestep = env.reset(key)
        return state, observe(timestep.observation)

    def step(state, action: jax.Array, key: jax.Array):
        del key  # Jumanji's state carries its own key.
        state, timestep = env.step(state, action)
        last = timestep.step_type == _LAST
        ran_out = timestep.discount != 0.0
        if time_limit is not None and hasattr(state, "step_count"):
            ran_out = jnp.logical_or(ran_out, state.step_count >= time_limit)
        truncated = jnp.logical_and(last, ran_out)
        terminated = jnp.logical_and(last, jnp.logical_not(ran_out))
        reward = jnp.asarray(timestep.reward, jnp.float32)
        return state, observe(timestep.observation), reward, terminated, truncated

    return JaxEnv(spec=spec, reset=reset, step=step, max_episode_steps=time_limit)
