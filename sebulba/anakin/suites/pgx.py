"""Pgx (Koyamada et al. 2023): board games, 2048 and MinAtar in JAX.

Reference: "Pgx: Hardware-Accelerated Parallel Game Simulators for Reinforcement
Learning" (NeurIPS 2023 Datasets and Benchmarks), https://github.com/sotetsuk/pgx.

Only single-player games run here (2048 and the five MinAtar games, which pgx 2.6 ships
in `pgx.minatar`); the board and card games are for two or more players and need
self-play. `Env.step(state, action, key)` does not auto-reset. Pgx has no time limit
(`state.truncated` stays False).

2048 observes a dict: its planes as "observation" and `legal_action_mask` (bool), which
the policies obey (`spaces.with_action_mask`): an illegal move would end the game with
pgx's penalty (-1). The MinAtar games observe their planes alone, as pgx's MinAtar
example does: every action is legal in them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from sebulba.anakin.env_api import JaxEnv
from sebulba.environments.spaces import ArraySpec, Discrete, EnvSpec, with_action_mask
from sebulba.errors import ConfigError

PACKAGE = "pgx"
_PLAYERS = {2: "two-player", 3: "three-player", 4: "four-player"}


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
    """The `JaxEnv` of one single-player Pgx game ("2048", "minatar-breakout").

    Raises:
      ConfigError: for games of two or more players.
    """
    import pgx

    env_id = f"pgx:{task}"
    env = pgx.make(task)
    players = int(env.num_players)
    if players != 1:
        kind = _PLAYERS.get(players, f"{players}-player")
        raise ConfigError(
            f"env.id {env_id!r} is a {kind} game: needs self-play, which sebulba does not do"
        )
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
