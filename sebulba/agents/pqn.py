"""PQN: parallelised Q-learning (Gallici et al. 2024, "Simplifying Deep Temporal Difference
Learning"), as in their reference implementation, purejaxql.

No replay buffer and no target network: a Q-network with a LayerNorm after every hidden
layer (`agent.norm`, `networks.py`) learns from the rollout just collected. At the start
of each update the learner's *current* network evaluates every observation of the rollout
once (`agent.q_targets="learner"`; with `"behaviour"` the actors' Q-values, stored in the
rollout, are used instead, as purejaxql does: one forward pass over the rollout fewer, and
under `pipeline.policy_lag=0` the same values, since the actors then hold the learner's
version), and the Q(lambda) targets follow from it (Peng and Williams' Q(lambda), the target
of rlax's `q_lambda`: G_t = r_t + gamma [(1 - lambda) max_a Q(s_{t+1}, a) + lambda
G_{t+1}], lambda 0.65); they stay fixed over `agent.update_epochs` passes of
`agent.num_minibatches` minibatches, each one RAdam step on 0.5 (Q(s_t, a_t) - G_t)^2.
The actors act epsilon-greedily on their version's Q-values.

Under `pipeline.policy_lag=1` rollout k was collected with version k - 1 while the
targets use the learner's version k (version k - 1's with `"behaviour"`). Peng's
Q(lambda) does not correct for the behaviour: a target follows the actions taken for
about 1 / (1 - gamma lambda) steps (2.8 at 0.99 and 0.65) before it bootstraps from
max_a Q, so it mixes the greedy policy's return with the behaviour's, and under lag 1 that
behaviour is one version older (docs/benchmarks.md, "PQN: policy lag 0 against 1",
measures it on MinAtar). The exploration
epsilon decays linearly from `agent.epsilon_start` to `agent.epsilon_finish` over the
first `agent.exploration_fraction` of the updates (purejaxql's schedule, per update). It
is learner state: each update stores the next version's epsilon, `policy_params` hands it
to the actors with the network, and checkpoints keep it, so which epsilon produced a
rollout depends on its version only, never on timing.

Episode ends are handled as in the PPO agents (`learner.episode_discounts`): a
termination stops bootstrapping, a truncation bootstraps from the value of the real next
observation, both cut the trace, and envpool's auto-reset steps carry no weight.

Reads top to bottom: config -> state -> Q(lambda) targets -> act -> loss -> update -> make.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
import ml_collections
import optax
import rlax

from sebulba import random_streams
from sebulba.agents import defaults, learner, minibatches, size_rules, update_pieces
from sebulba.agents.api import (
    Agent,
    Discrete,
    EnvSpec,
    Rollout,
    UpdatePlan,
    check_choice,
    check_decays,
    check_ranges,
    zero_observation,
)
from sebulba.agents.networks import (
    check_network_fits,
    has_convolutions_slow_in_a_loop,
    make_network,
)
from sebulba.config.sizes import Sizes
from sebulba.errors import ConfigError
from sebulba.lag_schedule import behaviour_version

# The networks with a Q head and a norm option (`networks.make_network`).
Q_NETWORKS = ("mlp", "nature_cnn", "impala_resnet", "minatar")
# Whose Q-values the targets take (`agent.q_targets`).
Q_TARGETS = ("learner", "behaviour")

# The interval of every numeric hyperparameter (`defaults.py`); `make` refuses values
# outside them.
HYPERPARAMETER_RANGES = defaults.PQN_RANGES

# The agent's defaults, kept free of JAX imports (`defaults.py`).
get_config = defaults.pqn_config


@flax.struct.dataclass
class PQNState(learner.TrainState):
    """The learner state: parameters, RAdam state, update count and the epsilon with which
    the version these parameters make acts."""

    epsilon: jax.Array  # float32 scalar.


def epsilon_schedule(hp: ml_collections.ConfigDict, num_updates: int) -> optax.Schedule:
    """Epsilon of the version made by `update_count` updates (purejaxql's per-update
    schedule): linear from `epsilon_start` to `epsilon_finish` over the first
    `exploration_fraction` of the run's updates, then constant."""
    schedule = optax.linear_schedule(
        hp.epsilon_start, hp.epsilon_finish, hp.exploration_fraction * num_updates
    )
    start, finish = hp.epsilon_start, hp.epsilon_finish
    # Within its bounds (`make` refuses a rising epsilon): optax's float arithmetic can end
    # a few ulps past epsilon_finish.
    return lambda count: jnp.clip(schedule(count), finish, start)


def q_lambda_targets(
    q_values: jax.Array,
    rewards: jax.Array,
    terminations: jax.Array,
    truncations: jax.Array,
    gamma: float,
    q_lambda: float,
) -> jax.Array:
    """Q(lambda) targets of T-step sequences, via rlax.

    Args:
      q_values: [T + 1, B, A] Q-values of obs[0 .. T].
      rewards, terminations, truncations: [T, B], as in `Rollout`.

    Returns:
      [T, B] targets G_t = r_t + d_t [(1 - l_t) max_a Q(obs[t + 1], a) + l_t G_{t+1}],
      with G_{T-1} bootstrapping from max_a Q(obs[T], a). d_t is gamma, 0 after a
      termination; l_t is lambda, 0 after a termination or a truncation, so a truncated
      step bootstraps from its real next observation and no step sees the next episode.
    """
    discount_t, lambda_t = learner.episode_discounts(terminations, truncations, gamma, q_lambda)
    values = jnp.max(q_values, axis=-1)  # [T + 1, B]
    per_env = jax.vmap(rlax.lambda_returns, in_axes=1, out_axes=1)
    return per_env(rewards, discount_t, values[1:], lambda_t)


def epsilon_greedy(q_values: jax.Array, epsilon: jax.Array, keys: jax.Array) -> jax.Array:
    """q_values [B, A], epsilon scalar, keys [B] -> int32 actions [B]: with probability
    epsilon a uniform action, otherwise the greedy one, each env from its own key."""

    def one_env(q, key):
        explore_key, action_key = jax.random.split(key)
        random_action = jax.random.randint(action_key, (), 0, q.shape[-1])
        explore = jax.random.uniform(explore_key) < epsilon
        return jnp.where(explore, random_action, jnp.argmax(q))

    return jax.vmap(one_env)(q_values, keys).astype(jnp.int32)


def env_major(x: jax.Array) -> jax.Array:
    """[t, B, ...] -> [B t, ...]: the sharded env axis stays leading, so no data moves
    between learner devices (a time-major flatten would interleave their shards)."""
    return jnp.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:])


def make(config: ml_collections.ConfigDict, env_spec: EnvSpec, sizes: Sizes) -> Agent:
    """Builds PQN's pure functions for this run.

    Raises:
      ConfigError: naming the field, for PQN-specific invalid values.
    """
    hp = config.agent
    check_ranges(hp, "agent", HYPERPARAMETER_RANGES)
    if not isinstance(env_spec.action, Discrete):
        raise ConfigError(
            f"agent.name 'pqn' takes Discrete actions (one Q-value each), but env.id "
            f"{env_spec.env_id!r} has {type(env_spec.action).__name__} actions"
        )
    check_decays(
        hp.epsilon_start,
        "agent.epsilon_start",
        hp.epsilon_finish,
        "agent.epsilon_finish",
        "epsilon",
    )
    check_choice(hp.network, "agent.network", Q_NETWORKS)
    check_choice(hp.q_targets, "agent.q_targets", Q_TARGETS)
    targets_from_behaviour = hp.q_targets == "behaviour"
    check_network_fits(hp.network, env_spec, among=Q_NETWORKS)
    # () is a linear Q-function of the torso's features; a zero width would fail at the
    # first checkpoint, a negative one inside JAX.
    if not all(isinstance(w, int) and w > 0 for w in tuple(hp.hidden_sizes)):
        raise ConfigError(f"agent.hidden_sizes {hp.hidden_sizes!r} must be positive integers")
    size_rules.pqn(hp, sizes)
    network = make_network(
        hp.network,
        env_spec.action,
        hp.conv_init,
        env_spec.observation,
        norm=hp.norm,
        q_head=True,
        hidden=hp.hidden_sizes,
        hidden_default=get_config().hidden_sizes,
        max_pool=hp.max_pool,
    )
    unroll = learner.unrolls_minibatch_loop(
        hp.minibatch_loop,
        slow_convolutions=has_convolutions_slow_in_a_loop(network, env_spec.observation),
    )
    steps_per_update = hp.update_epochs * hp.num_minibatches
    # purejaxql decays the step size at every gradient step, to 1e-20 after the last one.
    learning_rate = (
        optax.linear_schedule(hp.learning_rate, 1e-20, sizes.num_updates * steps_per_update)
        if hp.anneal_lr
        else optax.constant_schedule(hp.learning_rate)
    )
    optimizer = optax.chain(optax.clip_by_global_norm(hp.max_grad_norm), optax.radam(learning_rate))
    epsilon = epsilon_schedule(hp, sizes.num_updates)
    key = random_streams.learner_key(config.seed)
    policy_lag = config.pipeline.policy_lag

    def q_network(params, obs):
        """obs [N, ...] -> Q-values [N, A]."""
        return network.apply(params, obs)

    def init(init_key: jax.Array) -> PQNState:
        params = network.init(init_key, zero_observation(env_spec.observation, 1))
        count = jnp.zeros((), jnp.int32)
        return PQNState(params, optimizer.init(params), count, jnp.asarray(epsilon(0), jnp.float32))

    def policy_params(state: PQNState):
        # The epsilon travels with the parameters: a version's behaviour is fixed by it.
        return {"network": state.params, "epsilon": state.epsilon}

    def act(params, obs, keys: jax.Array):
        """obs [B, ...], keys [B] -> epsilon-greedy actions [B], and the Q-values [B, A] to
        store where the targets take the behaviour's (else no outputs)."""
        q_values = q_network(params["network"], obs)
        outputs = {"q_values": q_values} if targets_from_behaviour else {}
        return epsilon_greedy(q_values, params["epsilon"], keys), outputs

    def act_greedy(params, obs):
        """obs [B, ...] -> the greedy actions [B] (evaluation)."""
        return jnp.argmax(q_network(params["network"], obs), axis=-1).astype(jnp.int32)

    def loss_fn(params, batch):
        """0.5 (Q(s, a) - G)^2 averaged over the valid samples of a [t, B] minibatch."""
        flat = jax.tree.map(env_major, batch)
        q_values = q_network(params, flat["obs"])  # [t B, A]
        q_taken = jnp.take_along_axis(q_values, flat["actions"][:, None], axis=-1)[:, 0]
        weight = flat["valid"].astype(jnp.float32)
        loss = 0.5 * learner.masked_mean((q_taken - flat["targets"]) ** 2, weight)
        return loss, {"loss": loss, "q_mean": learner.masked_mean(q_taken, weight)}

    def plan_update(state: PQNState, rollout: Rollout) -> UpdatePlan:
        # The targets come from the learner's current network, once per rollout, or from
        # the Q-values the actors stored, and stay fixed over the epochs (purejaxql).
        if targets_from_behaviour:
            obs_q = rollout.policy_outputs["q_values"]  # [T + 1, B, A]
        else:
            obs_q = jax.vmap(q_network, in_axes=(None, 1), out_axes=1)(state.params, rollout.obs)
        targets = q_lambda_targets(
            jax.lax.stop_gradient(obs_q),
            rollout.rewards * hp.reward_scale,
            rollout.terminations,
            rollout.truncations,
            hp.gamma,
            hp.q_lambda,
        )
        samples = {
            "obs": jax.tree.map(lambda x: x[:-1], rollout.obs),
            "actions": rollout.actions,
            "valid": rollout.valid,
            "targets": targets,
        }
        update_key = jax.random.fold_in(key, state.update_count)
        # As PPO's: each env column shuffles its own T steps, so a minibatch holds the
        # same samples on any number of learner devices and never leaves its device.
        batches = minibatches.time_shuffled_epochs(
            rollout, update_key, hp.num_minibatches, hp.update_epochs
        )  # [epochs * minibatches, T / M, B]

        def gathered_loss(params, batch_time_index):
            return loss_fn(params, minibatches.take_time_steps(samples, batch_time_index))

        pieces = update_pieces.stateless_minibatch_pieces(
            gathered_loss, optimizer, state.params, state.opt_state, batches, unroll
        )

        def finish(params, opt_state, metrics, _):
            update_count = state.update_count + 1
            new_state = PQNState(
                params, opt_state, update_count, jnp.asarray(epsilon(update_count), jnp.float32)
            )
            weight = rollout.valid.astype(jnp.float32)
            metrics["target_mean"] = learner.masked_mean(targets, weight)
            # Version v holds epsilon(v - 1); rollout k was collected by v = max(1, k - lag).
            behaviour = behaviour_version(state.update_count + 1, policy_lag)
            metrics["behaviour_epsilon"] = jnp.asarray(epsilon(behaviour - 1), jnp.float32)
            metrics["learning_rate"] = learning_rate(state.update_count * steps_per_update)
            return new_state, metrics

        return pieces.plan(finish)

    return Agent(
        init=init,
        act=act,
        update=Agent.update_from_plan(plan_update),
        policy_params=policy_params,
        act_greedy=act_greedy,
        plan_update=plan_update,
    )
