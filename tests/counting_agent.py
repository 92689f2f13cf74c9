"""A recurrent probe agent: its carry counts the steps since its env's episode started.

It acts uniformly at random and stores, with every observation, the carry it acted from,
so the tests can check where the pipeline reset the carry and what it stored as a
rollout's initial carry. Its update replays the count with the shared reset rule.
"""

import flax.struct
import jax
import jax.numpy as jnp
import ml_collections

from sebulba.agents.api import Agent, EnvSpec, Rollout, episode_starts, reset_carry
from sebulba.config.sizes import Sizes


def get_config() -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    config.name = "tests.counting_agent"  # Selected by dotted path.
    config.num_steps = 8  # Steps per env per rollout.
    return config


@flax.struct.dataclass
class State:
    params: dict


def initial_carry(num_envs: int):
    return {"age": jnp.zeros((num_envs,), jnp.int32)}


def replayed_ages(rollout: Rollout) -> jax.Array:
    """[T + 1, B] the ages a learner recomputes from the initial carry and the flags."""

    def step(carry, start):
        carry = reset_carry(carry, start, initial_carry(start.shape[0]))
        return {"age": carry["age"] + 1}, carry["age"]

    _, ages = jax.lax.scan(step, rollout.initial_carry, episode_starts(rollout.valid))
    return ages


def make(config: ml_collections.ConfigDict, env_spec: EnvSpec, sizes: Sizes) -> Agent:
    del config, sizes

    def init(key):
        del key
        return State({"version": jnp.ones((), jnp.int32)})

    def act(params, carry, obs, keys):
        del params
        actions = jax.vmap(jax.random.randint, in_axes=(0, None, None, None))(
            keys, (), 0, env_spec.num_actions
        ).astype(jnp.int32)
        return {"age": carry["age"] + 1}, actions, {"age": carry["age"]}

    def act_greedy(params, carry, obs):
        del params
        return {"age": carry["age"] + 1}, jnp.zeros((obs.shape[0],), jnp.int32)

    def update(state: State, rollout: Rollout):
        stored = rollout.policy_outputs["age"]
        metrics = {
            "initial_carry_max": jnp.max(rollout.initial_carry["age"]).astype(jnp.float32),
            "replay_mismatches": jnp.sum(replayed_ages(rollout) != stored).astype(jnp.float32),
        }
        return State({"version": state.params["version"] + 1}), metrics

    return Agent(
        init=init,
        act=act,
        update=update,
        policy_params=lambda s: s.params,
        act_greedy=act_greedy,
        initial_carry=initial_carry,
    )
