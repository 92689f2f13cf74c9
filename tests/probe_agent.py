"""A probe agent whose rollouts record which parameter version produced them.

Its only parameter is the version number itself, so the lag schedule is checked from
the data the learner receives, not from the pipeline's own bookkeeping. It acts uniformly
at random, or always takes `agent.constant_action` (e.g. a MiniGrid turn that never
reaches the goal, so every episode lasts the task's step limit). It reads no observation,
so it runs on any observation structure.
"""

import flax.struct
import jax
import jax.numpy as jnp
import ml_collections

from sebulba.agents.api import Agent, EnvSpec, Rollout, UpdatePlan
from sebulba.config.sizes import Sizes

# Counts Python traces of act and update: steady state must not add any.
TRACE_COUNTS = {"act": 0, "update": 0}


def get_config() -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    config.name = "tests.probe_agent"  # Selected by dotted path.
    config.num_steps = 4  # Steps per env per rollout.
    config.constant_action = -1  # An action taken at every step; -1: uniformly random.
    return config


@flax.struct.dataclass
class State:
    params: dict


def make(config: ml_collections.ConfigDict, env_spec: EnvSpec, sizes: Sizes) -> Agent:
    del sizes
    constant_action = config.agent.constant_action

    def init(key):
        del key
        return State({"version": jnp.ones((), jnp.int32)})

    def act(params, obs, keys):
        TRACE_COUNTS["act"] += 1
        del obs
        batch = keys.shape[0]
        if constant_action >= 0:
            actions = jnp.full((batch,), constant_action, jnp.int32)
        else:
            actions = jax.vmap(jax.random.randint, in_axes=(0, None, None, None))(
                keys, (), 0, env_spec.num_actions
            ).astype(jnp.int32)
        return actions, {"version": jnp.full((batch,), params["version"], jnp.int32)}

    def act_greedy(params, obs):
        # The uniform policy's mode: every action ties, argmax takes the first.
        del params
        batch = jax.tree.leaves(obs)[0].shape[0]
        return jnp.full((batch,), max(constant_action, 0), jnp.int32)

    def update(state: State, rollout: Rollout):
        TRACE_COUNTS["update"] += 1
        behaviour = rollout.policy_outputs["version"]
        metrics = {
            "behaviour_version_min": jnp.min(behaviour).astype(jnp.float32),
            "behaviour_version_max": jnp.max(behaviour).astype(jnp.float32),
            "learner_version_in": state.params["version"].astype(jnp.float32),
            "reward_sum": jnp.sum(rollout.rewards),
        }
        return State({"version": state.params["version"] + 1}), metrics

    return Agent(
        init=init,
        act=act,
        update=update,
        policy_params=lambda s: s.params,
        act_greedy=act_greedy,
        # Its whole update as one piece: the fused step's lag schedule is checked with it.
        plan_update=lambda state, rollout: UpdatePlan.whole(update, state, rollout),
    )
