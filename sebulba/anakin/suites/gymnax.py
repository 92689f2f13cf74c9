"""gymnax (Lange 2022): classic control, bsuite and MinAtar in JAX.

`step_env` is gymnax's step without auto-reset; its `terminated` is the natural end of
an episode, and the time limit (`max_steps_in_episode`) is read from the state, as
gymnax's own auto-resetting `step` does.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from sebulba.anakin.env_api import JaxEnv
from sebulba.environments.spaces import ArraySpec, Box, Discrete, EnvSpec
from sebulba.errors import ConfigError

PACKAGE = "gymnax"
_HOST_DTYPES = {"float64": "float32", "int64": "int32", "bool": "float32"}


def task_ids() -> tuple[str, ...]:
    import gymnax

    return tuple(gymnax.registered_envs)


def _observation_spec(space, env_id: str) -> ArraySpec:
    kind = type(space).__name__
    if kind == "Discrete":
        return ArraySpec((), "int32", int(space.n))
    if kind == "Box":
        dtype = np.dtype(space.dtype).name
        return ArraySpec(tuple(space.shape), _HOST_DTYPES.get(dtype, dtype))
    raise ConfigError(f"env.id {env_id!r} has an unsupported observation space {space}")


def _action_spec(space, env_id: str):
    kind = type(space).__name__
    if kind == "Discrete":
        return Discrete(int(space.n))
    if kind == "Box":
        shape = tuple(space.shape)
        low = np.broadcast_to(np.asarray(space.low, np.float64), shape).ravel()
        high = np.broadcast_to(np.asarray(space.high, np.float64), shape).ravel()
        return Box(shape, tuple(low.tolist()), tuple(high.tolist()))
    raise ConfigError(f"env.id {env_id!r} has an unsupported action space {space}")


# Tasks whose construction downloads a data set (MNIST): no network here but the
# package index, and a run must not depend on one.
_DOWNLOADS = {"MNISTBandit-bsuite": "the MNIST data set"}


def make(task: str) -> JaxEnv:
    import gymnax

    if task in _DOWNLOADS:
        raise ConfigError(
            f"env.id 'gymnax:{task}' downloads {_DOWNLOADS[task]} when it is made; sebulba "
            "runs only envs that need no download"
        )
    env, params = gymnax.make(task)
    env_id = f"gymnax:{task}"
    spec = EnvSpec(
        env_id=env_id,
        observation=_observation_spec(env.observation_space(params), env_id),
        action=_action_spec(env.action_space(params), env_id),
    )

    def reset(key):
        obs, state = env.reset_env(key, params)
        return state, obs

    def step(state, action, key):
        if isinstance(spec.action, Box) and spec.action.shape == ():
            action = jnp.reshape(action, ())
        obs, state, reward, terminated, _ = env.step_env(key, state, action, params)
        truncated = env.is_truncated(state, params)
        return state, obs, reward, terminated, truncated

    return JaxEnv(
        spec=spec, reset=reset, step=step, max_episode_steps=int(params.max_steps_in_episode)
    )
