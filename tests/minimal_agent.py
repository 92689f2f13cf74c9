"""A minimal agent living outside the package, selected by dotted path in the tests.

REINFORCE (Williams 1992) with a linear softmax policy: it proves the agent interface
is all the pipeline needs, and it is cheap enough to exercise the pipeline quickly.
"""

import flax.struct
import jax
import jax.numpy as jnp
import ml_collections
import optax
import rlax

from sebulba.agents.api import Agent, EnvSpec, Rollout
from sebulba.config.sizes import Sizes


def get_config() -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    config.name = "tests.minimal_agent"  # Selected by dotted path.
    config.num_steps = 16  # Steps per env per rollout.
    config.learning_rate = 0.01  # SGD step size.
    config.gamma = 0.99  # Discount.
    return config


@flax.struct.dataclass
class State:
    params: dict
    opt_state: optax.OptState
    updates: jax.Array


def make(config: ml_collections.ConfigDict, env_spec: EnvSpec, sizes: Sizes) -> Agent:
    del sizes
    obs_size = 1
    for d in env_spec.obs_shape:
        obs_size *= d
    optimizer = optax.sgd(config.agent.learning_rate)

    def logits_of(params, obs):
        x = obs.reshape(obs.shape[0], -1).astype(jnp.float32)
        return x @ params["w"] + params["b"]

    def init(key):
        params = {
            "w": 0.01 * jax.random.normal(key, (obs_size, env_spec.num_actions)),
            "b": jnp.zeros(env_spec.num_actions),
        }
        return State(params, optimizer.init(params), jnp.zeros((), jnp.int32))

    def act(params, obs, keys):
        logits = logits_of(params, obs)
        actions = jax.vmap(jax.random.categorical)(keys, logits).astype(jnp.int32)
        return actions, {"logits": logits}

    def act_greedy(params, obs):
        return jnp.argmax(logits_of(params, obs), axis=-1).astype(jnp.int32)

    def update(state: State, rollout: Rollout):
        discount_t = config.agent.gamma * (1.0 - rollout.terminations)
        # Monte-Carlo-free returns: bootstrap with zero, i.e. discounted reward-to-go.
        returns = jax.vmap(rlax.discounted_returns, in_axes=(1, 1, None), out_axes=1)(
            rollout.rewards, discount_t * (1.0 - rollout.truncations), 0.0
        )
        weight = rollout.valid.astype(jnp.float32)

        def loss_fn(params):
            logits = jax.vmap(logits_of, in_axes=(None, 0))(params, rollout.obs[:-1])
            logp = jax.nn.log_softmax(logits)
            logp_a = jnp.take_along_axis(logp, rollout.actions[..., None], axis=-1)[..., 0]
            advantage = returns - jnp.sum(returns * weight) / jnp.maximum(weight.sum(), 1.0)
            return -jnp.sum(logp_a * advantage * weight) / jnp.maximum(weight.sum(), 1.0)

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        updates, opt_state = optimizer.update(grads, state.opt_state)
        params = optax.apply_updates(state.params, updates)
        return State(params, opt_state, state.updates + 1), {"loss": loss}

    return Agent(
        init=init,
        act=act,
        update=update,
        policy_params=lambda s: s.params,
        act_greedy=act_greedy,
    )
