"""Soft actor-critic (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and
Applications"), learning from a replay buffer held on the learner devices (`replay.py`).

CleanRL's `sac_continuous_action.py` is the reference (configs/sac_mujoco.py lists every
difference of the runs): twin soft Q-networks on concat(observation, action) with target
copies that follow them by Polyak averaging (`agent.tau` every
`agent.target_network_frequency` critic steps); a tanh-squashed Gaussian actor whose
log-std is squashed into [-5, 2], its actions rescaled to the Box bounds; the entropy
temperature alpha learned towards a target entropy of -(action dimensions)
(`agent.autotune`; fixed `agent.alpha` otherwise); TD3's delayed policy updates, where
every `agent.policy_frequency`-th critic step is followed by `agent.policy_frequency`
actor (and alpha) steps on the same minibatch, so actor and critic take as many steps;
uniform random actions until `agent.learning_starts` env steps.

The learner state holds the actor, the critics and their targets, log(alpha), the three
Adam states, the replay buffer (sharded along envs: `Agent.state_partition_specs`) and
whether the behaviour still explores uniformly. That flag travels to the actors with the
actor's parameters (`policy_params`), as DQN's epsilon does, so a rollout's behaviour
depends only on the version that collected it. Each update adds its rollout to the
buffer, then takes `agent.replay_ratio` x (env steps per update) critic steps; under the
one-step lag the newest rollout was collected by the previous version, and the buffer
mixes older versions anyway (off-policy learning needs no correction).

Deviations from CleanRL in the agent itself (the configs list those of the schedule):
* The tanh correction of the log-probability is exact, log(1 - tanh(u)^2) =
  2 (log 2 - u - softplus(-2u)), where CleanRL adds 1e-6 inside the logarithm.
* Weights are initialised like PyTorch's Linear (uniform within +-1/sqrt(fan_in)), biases
  at zero (PyTorch: uniform as well).
* Losses are means over the sampled transitions weighted by the buffer's sample weights:
  envpool's auto-reset steps, which are no transitions, weigh 0.
* Time-limit truncations bootstrap, as CleanRL's (which stores the final observation).

Reads top to bottom: config -> networks -> state -> act -> loss -> update -> make.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from sebulba import random_streams
from sebulba.agents import defaults, replay, size_rules
from sebulba.agents.api import (
    Agent,
    Box,
    EnvSpec,
    Rollout,
    check_choice,
    check_ranges,
    zero_observation,
)
from sebulba.agents.networks import check_network_fits, describe_observation
from sebulba.config.sizes import Sizes
from sebulba.errors import ConfigError
from sebulba.lag_schedule import behaviour_version

HYPERPARAMETER_RANGES = defaults.SAC_RANGES
NETWORKS = ("mlp",)

get_config = defaults.sac_config

# The actor's log-std is squashed into this interval (CleanRL, from SpinUp and Yarats).
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0

# PyTorch's nn.Linear weights: uniform within +-1/sqrt(fan_in) (variance 1 / (3 fan_in)).
_TORCH_LINEAR_INIT = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")


def _dense(features: int) -> nn.Dense:
    return nn.Dense(features, kernel_init=_TORCH_LINEAR_INIT, bias_init=nn.initializers.zeros)


def _features(obs: jax.Array) -> jax.Array:
    """Vector observations [..., D] as float32 (any leading axes)."""
    return obs.astype(jnp.float32)


class Actor(nn.Module):
    """obs [..., D] -> {"mean", "log_std": [..., A]} of the pre-squash Gaussian."""

    action_size: int
    hidden: Sequence[int]

    @nn.compact
    def __call__(self, obs):
        x = _features(obs)
        for width in self.hidden:
            x = nn.relu(_dense(width)(x))
        mean = _dense(self.action_size)(x)
        squashed = jnp.tanh(_dense(self.action_size)(x))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (squashed + 1.0)
        return {"mean": mean, "log_std": log_std}


class TwinQ(nn.Module):
    """(obs [..., D], actions [..., A]) -> Q-values [2, ...] of two independent critics."""

    hidden: Sequence[int]

    @nn.compact
    def __call__(self, obs, actions):
        x = jnp.concatenate([_features(obs), actions.astype(jnp.float32)], axis=-1)
        values = []
        for _ in range(2):
            h = x
            for width in self.hidden:
                h = nn.relu(_dense(width)(h))
            values.append(_dense(1)(h)[..., 0])
        return jnp.stack(values)


@flax.struct.dataclass
class TanhGaussian:
    """A Gaussian squashed by tanh and rescaled to the Box [low, high]: action =
    tanh(u) * scale + offset, u ~ N(mean, std), scale = (high - low) / 2,
    offset = (high + low) / 2 (all [A], the Box flattened)."""

    scale: jax.Array
    offset: jax.Array

    def sample(self, params: dict, noise: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Reparameterised: mean, log_std, noise [..., A] -> (actions [..., A], log-prob [...]).

        The log-density of the action is the Gaussian's at u less log |d action / du| =
        sum_i log(scale_i) + log(1 - tanh(u_i)^2), the latter written without cancellation.
        """
        std = jnp.exp(params["log_std"])
        pre_squash = params["mean"] + std * noise
        gaussian = -0.5 * noise**2 - params["log_std"] - 0.5 * math.log(2 * math.pi)
        log_tanh_slope = 2.0 * (math.log(2.0) - pre_squash - jax.nn.softplus(-2.0 * pre_squash))
        log_prob = jnp.sum(gaussian - log_tanh_slope - jnp.log(self.scale), axis=-1)
        return jnp.tanh(pre_squash) * self.scale + self.offset, log_prob

    def mode(self, params: dict) -> jax.Array:
        """The squashed mean [..., A] (CleanRL's deterministic action)."""
        return jnp.tanh(params["mean"]) * self.scale + self.offset


@flax.struct.dataclass
class SACState:
    """The learner state.

    Attributes:
      actor_params, q_params, target_q_params: the actor, the twin critics and their
        Polyak-averaged targets.
      actor_opt_state, q_opt_state, alpha_opt_state: their Adam states (alpha's is unused
        without autotune).
      log_alpha: float32, log of the entropy temperature.
      buffer: the replay buffer, leaves [C, B, ...] sharded along B.
      count: int32, steps per env written to the buffer so far.
      update_count: int32, updates done (the version is update_count + 1).
      gradient_steps: int32, critic gradient steps so far (the clock of the delayed actor
        steps and of the target updates).
      explore_uniformly: bool, whether this version's behaviour draws uniform random
        actions (env steps consumed < learning_starts) instead of the actor's.
    """

    actor_params: dict
    q_params: dict
    target_q_params: dict
    actor_opt_state: optax.OptState
    q_opt_state: optax.OptState
    alpha_opt_state: optax.OptState
    log_alpha: jax.Array
    buffer: replay.Replay
    count: jax.Array
    update_count: jax.Array
    gradient_steps: jax.Array
    explore_uniformly: jax.Array


@flax.struct.dataclass
class Learning:
    """The part of `SACState` that gradient steps change (the carry of their scan)."""

    actor_params: dict
    q_params: dict
    target_q_params: dict
    actor_opt_state: optax.OptState
    q_opt_state: optax.OptState
    alpha_opt_state: optax.OptState
    log_alpha: jax.Array
    gradient_steps: jax.Array


_METRICS = (
    "q1_loss",
    "q2_loss",
    "q1_values",
    "q2_values",
    "actor_loss",
    "alpha_loss",
    "alpha",
    "entropy",
)


def _weighted_mean(x: jax.Array, weights: jax.Array) -> jax.Array:
    return jnp.sum(x * weights) / jnp.maximum(jnp.sum(weights), 1.0)


def make(config: ml_collections.ConfigDict, env_spec: EnvSpec, sizes: Sizes) -> Agent:
    """Builds SAC's pure functions for this run.

    Raises:
      ConfigError: naming the field, for a non-Box action space, observations the
        network cannot take, or invalid sizes.
    """
    hp = config.agent
    check_ranges(hp, "agent", HYPERPARAMETER_RANGES)
    action = env_spec.action
    if not isinstance(action, Box):
        raise ConfigError(
            f"agent.name 'sac' needs a Box action space; env.id {env_spec.env_id!r} "
            f"has {type(action).__name__} actions"
        )
    low, high = np.asarray(action.low, np.float32), np.asarray(action.high, np.float32)
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(low < high)):
        raise ConfigError(
            f"agent.name 'sac' squashes actions into the Box bounds; env.id "
            f"{env_spec.env_id!r} has bounds {action.low} .. {action.high}, not finite"
        )
    check_choice(hp.network, "agent.network", NETWORKS)
    check_network_fits(hp.network, env_spec)
    # "mlp" flattens arrays of any shape; these networks read obs [..., D] with any leading
    # axes, so an observation of more axes would pass for a batch of them.
    if len(env_spec.observation.shape) != 1:
        raise ConfigError(
            f"agent.name 'sac' takes vector observations [D], but env.id "
            f"{env_spec.env_id!r} observes {describe_observation(env_spec.observation)}"
        )
    hidden = tuple(hp.hidden_sizes)
    if not hidden or not all(isinstance(w, int) and w > 0 for w in hidden):
        raise ConfigError(f"agent.hidden_sizes {hp.hidden_sizes!r} must be positive integers")
    replay_sizes = size_rules.sac(hp, sizes)
    capacity, samples_per_env = replay_sizes.capacity, replay_sizes.samples_per_env
    gradient_steps = replay_sizes.gradient_steps
    first_learning_update = replay_sizes.first_learning_update
    num_steps = sizes.num_steps
    action_size = math.prod(action.shape)
    target_entropy = -float(action_size) if hp.target_entropy is None else hp.target_entropy
    policy = TanhGaussian(scale=jnp.asarray((high - low) / 2), offset=jnp.asarray((high + low) / 2))
    actor = Actor(action_size, hidden)
    critic = TwinQ(hidden)
    actor_optimizer = optax.adam(hp.policy_learning_rate)
    q_optimizer = optax.adam(hp.q_learning_rate)
    alpha_optimizer = optax.adam(hp.alpha_learning_rate)
    key = random_streams.learner_key(config.seed)
    policy_lag = config.pipeline.policy_lag

    def flat(actions: jax.Array) -> jax.Array:
        """Actions [..., *action.shape] -> [..., A]."""
        return actions.reshape(*actions.shape[: actions.ndim - len(action.shape)], action_size)

    def init(init_key: jax.Array) -> SACState:
        obs = zero_observation(env_spec.observation, 1)
        actor_key, q_key = jax.random.split(init_key)
        actor_params = actor.init(actor_key, obs)
        q_params = critic.init(q_key, obs, jnp.zeros((1, action_size), jnp.float32))
        # Autotune starts from log alpha 0 (alpha 1), as CleanRL does.
        log_alpha = 0.0 if hp.autotune else math.log(hp.alpha)

        def zero():  # A new array per field: the update donates every one.
            return jnp.zeros((), jnp.int32)

        return SACState(
            actor_params=actor_params,
            q_params=q_params,
            # A copy: the update donates the state, and one buffer cannot be donated twice.
            target_q_params=jax.tree.map(jnp.copy, q_params),
            actor_opt_state=actor_optimizer.init(actor_params),
            q_opt_state=q_optimizer.init(q_params),
            alpha_opt_state=alpha_optimizer.init(jnp.zeros((), jnp.float32)),
            log_alpha=jnp.asarray(log_alpha, jnp.float32),
            buffer=replay.empty_for(env_spec, sizes, capacity),
            count=zero(),
            update_count=zero(),
            gradient_steps=zero(),
            explore_uniformly=jnp.asarray(hp.learning_starts > 0),
        )

    def policy_params(state: SACState):
        return {"actor": state.actor_params, "explore_uniformly": state.explore_uniformly}

    def act(params, obs, keys: jax.Array):
        """obs [B, ...], keys [B] -> actions [B, *action.shape] within the bounds, no outputs."""
        noise = jax.vmap(lambda k: jax.random.normal(jax.random.fold_in(k, 0), (action_size,)))(
            keys
        )
        sampled, _ = policy.sample(actor.apply(params["actor"], obs), noise)
        uniform = jax.vmap(
            lambda k: jax.random.uniform(
                jax.random.fold_in(k, 1), (action_size,), minval=low, maxval=high
            )
        )(keys)
        actions = jnp.where(params["explore_uniformly"], uniform, sampled)
        return actions.reshape(-1, *action.shape).astype(jnp.float32), {}

    def act_greedy(params, obs):
        actions = policy.mode(actor.apply(params["actor"], obs))
        return actions.reshape(-1, *action.shape).astype(jnp.float32)

    def column_noise(step_key: jax.Array, stream: int, env_ids: jax.Array) -> jax.Array:
        """Standard normal noise [S, B, A], column b keyed by its global env id, so a
        sample's noise does not depend on which device holds the column."""
        stream_key = jax.random.fold_in(step_key, stream)
        return jax.vmap(
            lambda e: jax.random.normal(
                jax.random.fold_in(stream_key, e), (samples_per_env, action_size)
            ),
            out_axes=1,
        )(env_ids)

    def critic_loss(q_params, target_q_params, actor_params, alpha, batch, noise):
        next_actions, next_log_prob = policy.sample(
            actor.apply(actor_params, batch.next_obs), noise
        )
        next_q = jnp.min(critic.apply(target_q_params, batch.next_obs, next_actions), axis=0)
        soft_value = next_q - alpha * next_log_prob
        target = jax.lax.stop_gradient(batch.returns + batch.discounts * soft_value)
        q1, q2 = critic.apply(q_params, batch.obs, flat(batch.actions))
        q1_loss = _weighted_mean((q1 - target) ** 2, batch.weights)
        q2_loss = _weighted_mean((q2 - target) ** 2, batch.weights)
        metrics = {
            "q1_loss": q1_loss,
            "q2_loss": q2_loss,
            "q1_values": _weighted_mean(q1, batch.weights),
            "q2_values": _weighted_mean(q2, batch.weights),
        }
        return q1_loss + q2_loss, metrics

    def actor_loss(actor_params, q_params, alpha, batch, noise):
        actions, log_prob = policy.sample(actor.apply(actor_params, batch.obs), noise)
        q = jnp.min(critic.apply(q_params, batch.obs, actions), axis=0)
        return _weighted_mean(alpha * log_prob - q, batch.weights)

    def alpha_loss(log_alpha, log_prob, weights):
        # CleanRL's form: alpha (not log alpha) times the entropy's excess over the target.
        return _weighted_mean(-jnp.exp(log_alpha) * (log_prob + target_entropy), weights)

    def actor_step(learning: Learning, keys, batch) -> tuple[Learning, dict]:
        """One actor step, then (autotune) one alpha step with fresh actions of the new actor."""
        alpha = jnp.exp(learning.log_alpha)
        loss, grads = jax.value_and_grad(actor_loss)(
            learning.actor_params, learning.q_params, alpha, batch, keys[0]
        )
        updates, actor_opt_state = actor_optimizer.update(
            grads, learning.actor_opt_state, learning.actor_params
        )
        actor_params = optax.apply_updates(learning.actor_params, updates)
        _, log_prob = policy.sample(actor.apply(actor_params, batch.obs), keys[1])
        log_prob = jax.lax.stop_gradient(log_prob)
        temperature_loss, alpha_grad = jax.value_and_grad(alpha_loss)(
            learning.log_alpha, log_prob, batch.weights
        )
        log_alpha, alpha_opt_state = learning.log_alpha, learning.alpha_opt_state
        if hp.autotune:
            updates, alpha_opt_state = alpha_optimizer.update(alpha_grad, alpha_opt_state)
            log_alpha = optax.apply_updates(log_alpha, updates)
        metrics = {
            "actor_loss": loss,
            "alpha_loss": temperature_loss,
            "entropy": -_weighted_mean(log_prob, batch.weights),
        }
        learning = learning.replace(
            actor_params=actor_params,
            actor_opt_state=actor_opt_state,
            log_alpha=log_alpha,
            alpha_opt_state=alpha_opt_state,
        )
        return learning, metrics

    def gradient_step(learning: Learning, step_key, env_ids, buffer, count):
        """One critic step, the delayed actor steps when due, then the targets' move."""
        batch = replay.sample(
            buffer, count, jax.random.fold_in(step_key, 0), env_ids, samples_per_env, 1, hp.gamma
        )
        alpha = jnp.exp(learning.log_alpha)
        grads, q_metrics = jax.grad(critic_loss, has_aux=True)(
            learning.q_params,
            learning.target_q_params,
            learning.actor_params,
            alpha,
            batch,
            column_noise(step_key, 1, env_ids),
        )
        updates, q_opt_state = q_optimizer.update(grads, learning.q_opt_state, learning.q_params)
        q_params = optax.apply_updates(learning.q_params, updates)
        steps = learning.gradient_steps + 1
        learning = learning.replace(
            q_params=q_params, q_opt_state=q_opt_state, gradient_steps=steps
        )

        # TD3's delay: every policy_frequency-th critic step, policy_frequency actor steps.
        actor_keys = jnp.stack(
            [
                jnp.stack(
                    [
                        column_noise(step_key, 2 + 2 * j, env_ids),
                        column_noise(step_key, 3 + 2 * j, env_ids),
                    ]
                )
                for j in range(hp.policy_frequency)
            ]
        )  # [policy_frequency, 2, S, B, A]

        def train_actor(learning):
            def body(learning, keys):
                return actor_step(learning, keys, batch)

            learning, metrics = jax.lax.scan(body, learning, actor_keys)
            return learning, jax.tree.map(jnp.mean, metrics)

        def skip_actor(learning):
            zero = jnp.zeros((), jnp.float32)
            return learning, {"actor_loss": zero, "alpha_loss": zero, "entropy": zero}

        actor_turn = steps % hp.policy_frequency == 0
        learning, actor_metrics = jax.lax.cond(actor_turn, train_actor, skip_actor, learning)

        follow = steps % hp.target_network_frequency == 0
        target_q_params = jax.tree.map(
            lambda t, p: jnp.where(follow, hp.tau * p + (1.0 - hp.tau) * t, t),
            learning.target_q_params,
            learning.q_params,
        )
        learning = learning.replace(target_q_params=target_q_params)
        return learning, (q_metrics, actor_metrics, actor_turn.astype(jnp.float32))

    def update(state: SACState, rollout: Rollout):
        buffer = replay.add(state.buffer, rollout, state.count)
        count = state.count + num_steps
        # Update counts, not env steps: see `size_rules.ReplaySizes.first_learning_update`.
        updates_done = state.update_count + 1
        learning_now = jnp.logical_and(
            updates_done >= first_learning_update, replay.sampleable(count, 1)
        )
        update_key = jax.random.fold_in(key, state.update_count)
        step_keys = jax.vmap(lambda i: jax.random.fold_in(update_key, i))(
            jnp.arange(gradient_steps)
        )
        learning = Learning(
            actor_params=state.actor_params,
            q_params=state.q_params,
            target_q_params=state.target_q_params,
            actor_opt_state=state.actor_opt_state,
            q_opt_state=state.q_opt_state,
            alpha_opt_state=state.alpha_opt_state,
            log_alpha=state.log_alpha,
            gradient_steps=state.gradient_steps,
        )

        def train(learning):
            def body(learning, step_key):
                return gradient_step(learning, step_key, rollout.env_ids, buffer, count)

            learning, (q_metrics, actor_metrics, actor_turns) = jax.lax.scan(
                body, learning, step_keys
            )
            metrics = jax.tree.map(jnp.mean, q_metrics)
            # Actor metrics: the mean over the critic steps that were followed by actor steps.
            metrics.update(jax.tree.map(lambda m: _weighted_mean(m, actor_turns), actor_metrics))
            return learning, metrics

        def wait(learning):
            zero = jnp.zeros((), jnp.float32)
            return learning, {name: zero for name in _METRICS if name != "alpha"}

        learning, metrics = jax.lax.cond(learning_now, train, wait, learning)
        metrics["alpha"] = jnp.exp(learning.log_alpha)
        # Rollout k was collected by version v = max(1, k - policy_lag), which explores
        # uniformly while its v - 1 updates are short of the first learning update (as
        # `init` and this update set the flag); 1.0: uniform random actions.
        behaviour = behaviour_version(updates_done, policy_lag)
        behaviour_explores = behaviour - 1 < first_learning_update
        metrics["behaviour_explore_uniformly"] = behaviour_explores.astype(jnp.float32)
        metrics["learning"] = learning_now.astype(jnp.float32)
        metrics["gradient_steps"] = learning.gradient_steps.astype(jnp.float32)
        new_state = SACState(
            actor_params=learning.actor_params,
            q_params=learning.q_params,
            target_q_params=learning.target_q_params,
            actor_opt_state=learning.actor_opt_state,
            q_opt_state=learning.q_opt_state,
            alpha_opt_state=learning.alpha_opt_state,
            log_alpha=learning.log_alpha,
            buffer=buffer,
            count=count,
            update_count=state.update_count + 1,
            gradient_steps=learning.gradient_steps,
            explore_uniformly=updates_done < first_learning_update,
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
