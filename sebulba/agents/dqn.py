"""DQN (Mnih et al. 2015) with double Q (van Hasselt et al. 2016) and n-step returns,
learning from a replay buffer held on the learner devices (`replay.py`).

CleanRL's `dqn_jax.py` / `dqn_atari_jax.py` settings are the configs' starting point
(configs/dqn_cartpole.py, configs/dqn_atari.py list every difference): Adam, a target
network copied every `agent.target_network_frequency` gradient steps (`agent.tau` 1: a
hard copy), epsilon-greedy actions with epsilon decayed linearly from `agent.start_e` to
`agent.end_e` over `agent.exploration_fraction` of the run, learning after
`agent.learning_starts` env steps, `agent.replay_ratio` gradient steps per env step on
minibatches of `agent.batch_size` transitions. The agent's defaults add double Q
(`agent.double_q`); n-step returns (`agent.n_step`, default 1 as CleanRL) and the Huber
loss (`agent.loss`, default CleanRL's squared error) are options.

The learner state holds the online and target parameters, the replay buffer (sharded
along envs: `Agent.state_partition_specs`), and epsilon, which travels to the actors with
the parameters (`policy_params`), so a rollout's exploration depends only on the version
that collected it. Each update adds its rollout to the buffer, then takes its gradient
steps; under the one-step lag the newest rollout was collected by the previous version,
and the buffer mixes older versions anyway (off-policy learning needs no correction).

The Q-network is the actor-critic network of `networks.py` with its policy head's
logits read as Q-values (its value head is unused). The Q head therefore starts as the
policy head does, orthogonal with gain 0.01, so every Q-value is near 0 at initialisation
and the first targets are about the rewards; CleanRL's Q-network ends in a flax Dense with
its default lecun_normal init, and PQN's `q_head` has gain 1.
Kept deliberately: the recorded DQN runs (docs/records/dqn_cartpole.json) were made
with it, and another initialisation would change their numbers.

Reads top to bottom: config -> state -> act -> loss -> update -> make.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
import ml_collections
import optax

from sebulba import random_streams
from sebulba.agents import defaults, replay, size_rules
from sebulba.agents.api import (
    Agent,
    Discrete,
    EnvSpec,
    Rollout,
    check_choice,
    check_decays,
    check_ranges,
    zero_observation,
)
from sebulba.agents.networks import check_network_fits, make_network
from sebulba.config.sizes import Sizes
from sebulba.errors import ConfigError
from sebulba.lag_schedule import behaviour_version

HYPERPARAMETER_RANGES = defaults.DQN_RANGES
LOSSES = ("huber", "mse")

get_config = defaults.dqn_config


@flax.struct.dataclass
class DQNState:
    """The learner state.

    Attributes:
      params, target_params: online and target Q-network parameters.
      opt_state: Adam's state.
      buffer: the replay buffer, leaves [C, B, ...] sharded along B.
      count: int32, steps per env written to the buffer so far.
      update_count: int32, updates done (the version is update_count + 1).
      gradient_steps: int32, gradient steps taken so far (the target copy's clock).
      epsilon: float32, the exploration rate of this version's behaviour (the metrics
        report `behaviour_epsilon`, the one that collected the rollout each update consumes).
    """

    params: dict
    target_params: dict
    opt_state: optax.OptState
    buffer: replay.Replay
    count: jax.Array
    update_count: jax.Array
    gradient_steps: jax.Array
    epsilon: jax.Array


def linear_schedule(start: float, end: float, duration: float, step: jax.Array) -> jax.Array:
    """CleanRL's epsilon: start -> end linearly over `duration` env steps, then end."""
    slope = (end - start) / max(duration, 1.0)
    return jnp.maximum(slope * step.astype(jnp.float32) + start, end)


def make(config: ml_collections.ConfigDict, env_spec: EnvSpec, sizes: Sizes) -> Agent:
    """Builds DQN's pure functions for this run.

    Raises:
      ConfigError: naming the field, for a non-Discrete action space or invalid sizes.
    """
    hp = config.agent
    check_ranges(hp, "agent", HYPERPARAMETER_RANGES)
    if not isinstance(env_spec.action, Discrete):
        raise ConfigError(
            f"agent.name 'dqn' needs a Discrete action space; env.id {env_spec.env_id!r} "
            f"has {type(env_spec.action).__name__} actions"
        )
    check_choice(hp.loss, "agent.loss", LOSSES)
    # linear_schedule decays: an increasing one would pass 1 (CleanRL's does too).
    check_decays(hp.start_e, "agent.start_e", hp.end_e, "agent.end_e", "epsilon")
    check_network_fits(hp.network, env_spec)
    num_steps = sizes.num_steps
    replay_sizes = size_rules.dqn(hp, sizes)
    capacity, samples_per_env = replay_sizes.capacity, replay_sizes.samples_per_env
    gradient_steps = replay_sizes.gradient_steps
    first_learning_update = replay_sizes.first_learning_update
    network = make_network(
        hp.network,
        env_spec.action,
        hp.conv_init,
        env_spec.observation,
        activation=hp.activation,
        max_pool=hp.max_pool,
    )
    optimizer = optax.adam(hp.learning_rate)
    exploration_steps = hp.exploration_fraction * config.total_timesteps
    key = random_streams.learner_key(config.seed)
    policy_lag = config.pipeline.policy_lag

    def epsilon_of(version: jax.Array) -> jax.Array:
        """The epsilon of policy version `version` (int32, from 1): the schedule at the env
        steps its `version - 1` updates consumed (`hp.start_e` for version 1)."""
        env_steps = replay.env_steps_after(version - 2, sizes.steps_per_update)
        return linear_schedule(hp.start_e, hp.end_e, exploration_steps, env_steps)

    def q_values(params, obs):
        logits, _ = network.apply(params, obs)
        return logits  # [N, A]

    def init(init_key: jax.Array) -> DQNState:
        params = network.init(init_key, zero_observation(env_spec.observation, 1))

        def zero():  # A new array per field: the update donates every one.
            return jnp.zeros((), jnp.int32)

        return DQNState(
            params=params,
            # A copy: the update donates the state, and one buffer cannot be donated twice.
            target_params=jax.tree.map(jnp.copy, params),
            opt_state=optimizer.init(params),
            buffer=replay.empty_for(env_spec, sizes, capacity),
            count=zero(),
            update_count=zero(),
            gradient_steps=zero(),
            epsilon=jnp.asarray(hp.start_e, jnp.float32),
        )

    def policy_params(state: DQNState):
        return {"q": state.params, "epsilon": state.epsilon}

    def act(params, obs, keys: jax.Array):
        """obs [B, ...], keys [B] -> epsilon-greedy actions [B], no outputs."""
        greedy = jnp.argmax(q_values(params["q"], obs), axis=-1).astype(jnp.int32)

        def explore(k):
            coin = jax.random.uniform(jax.random.fold_in(k, 0))
            random_action = jax.random.randint(
                jax.random.fold_in(k, 1), (), 0, env_spec.action.num_actions
            )
            return coin < params["epsilon"], random_action

        exploring, random_actions = jax.vmap(explore)(keys)
        return jnp.where(exploring, random_actions, greedy).astype(jnp.int32), {}

    def act_greedy(params, obs):
        return jnp.argmax(q_values(params["q"], obs), axis=-1).astype(jnp.int32)

    def env_major(x):
        # [S, B, ...] -> [B * S, ...] keeping the sharded env axis leading (no data moves).
        return jnp.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:])

    def loss_fn(params, target_params, batch: replay.Sample):
        batch = jax.tree.map(env_major, batch)
        q = q_values(params, batch.obs)
        q_taken = jnp.take_along_axis(q, batch.actions[:, None], axis=-1)[:, 0]
        next_target = q_values(target_params, batch.next_obs)
        if hp.double_q:  # The online network picks, the target network evaluates.
            best = jnp.argmax(q_values(params, batch.next_obs), axis=-1)
        else:
            best = jnp.argmax(next_target, axis=-1)
        bootstrap = jnp.take_along_axis(next_target, best[:, None], axis=-1)[:, 0]
        target = jax.lax.stop_gradient(batch.returns + batch.discounts * bootstrap)
        error = q_taken - target
        per_sample = optax.huber_loss(error, delta=1.0) if hp.loss == "huber" else error**2
        weight_sum = jnp.maximum(jnp.sum(batch.weights), 1.0)
        loss = jnp.sum(per_sample * batch.weights) / weight_sum
        q_mean = jnp.sum(q_taken * batch.weights) / weight_sum
        return loss, {"td_loss": loss, "q_values": q_mean}

    def gradient_step(carry, step_key, env_ids, buffer, count):
        params, target_params, opt_state, steps = carry
        batch = replay.sample(
            buffer, count, step_key, env_ids, samples_per_env, hp.n_step, hp.gamma
        )
        grads, metrics = jax.grad(loss_fn, has_aux=True)(params, target_params, batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        steps = steps + 1
        copy = steps % hp.target_network_frequency == 0
        target_params = jax.tree.map(
            lambda t, p: jnp.where(copy, hp.tau * p + (1.0 - hp.tau) * t, t),
            target_params,
            params,
        )
        return (params, target_params, opt_state, steps), metrics

    def update(state: DQNState, rollout: Rollout):
        buffer = replay.add(state.buffer, rollout, state.count)
        count = state.count + num_steps
        learning = jnp.logical_and(
            state.update_count + 1 >= first_learning_update, replay.sampleable(count, hp.n_step)
        )
        update_key = jax.random.fold_in(key, state.update_count)
        step_keys = jax.vmap(lambda i: jax.random.fold_in(update_key, i))(
            jnp.arange(gradient_steps)
        )
        carry = (state.params, state.target_params, state.opt_state, state.gradient_steps)

        def train(carry):
            def body(carry, step_key):
                return gradient_step(carry, step_key, rollout.env_ids, buffer, count)

            carry, metrics = jax.lax.scan(body, carry, step_keys)
            return carry, jax.tree.map(jnp.mean, metrics)

        def wait(carry):
            zero = jnp.zeros((), jnp.float32)
            return carry, {"td_loss": zero, "q_values": zero}

        (params, target_params, opt_state, steps), metrics = jax.lax.cond(
            learning, train, wait, carry
        )
        epsilon = epsilon_of(state.update_count + 2)  # Of version k + 1, which update k makes.
        # Rollout k was collected by version max(1, k - policy_lag): its epsilon, not the
        # learner's version k's (one version newer under the one-step lag).
        update_number = state.update_count + 1
        metrics["behaviour_epsilon"] = epsilon_of(behaviour_version(update_number, policy_lag))
        metrics["learning"] = learning.astype(jnp.float32)
        metrics["gradient_steps"] = steps.astype(jnp.float32)
        new_state = DQNState(
            params=params,
            target_params=target_params,
            opt_state=opt_state,
            buffer=buffer,
            count=count,
            update_count=state.update_count + 1,
            gradient_steps=steps,
            epsilon=epsilon.astype(jnp.float32),
        )
        return new_state, metrics

    return Agent(
        init=init,
        act=act,
        update=update,
        policy_params=policy_params,
        act_greedy=act_greedy,
        restart_envs=replay.restart_envs,
        state_partition_specs=replay.state_partition_specs,
    )
