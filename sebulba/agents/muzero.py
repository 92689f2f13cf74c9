"""MuZero (Schrittwieser et al. 2020) with Gumbel search (Danihelka et al. 2022): acting
by planning with a learned model, learning from sequences replayed on the learner devices.

The paper's three functions, on a latent state s:

* representation h: observation o_t -> s^0, the project's torsos (`agent.network`: mlp,
  minatar, nature_cnn, impala_resnet) ending in a linear layer of `agent.latent_size`;
* dynamics g: (s^k, a^k) -> (r^{k+1}, s^{k+1});
* prediction f: s^k -> (p^k, v^k), policy logits and value.

Each hidden state is scaled to [0, 1] over its features, as the paper's. Values and
rewards are categorical over the support [-S, S] (S = `agent.support_size`) of the
invertible transform h(x) = sign(x) (sqrt(|x| + 1) - 1) + 0.001 x (rlax's MuZero pair:
the two-hot target of a scalar, and the expectation back).

**Acting** (the actor devices, inside the act step, the scan loop and the Anakin
program): `mctx.gumbel_muzero_policy` (or `mctx.muzero_policy`, `agent.search`) runs
`agent.num_simulations` simulations from h(o_t) through g and f. The env takes the
search's action; the rollout carries the search's improved policy pi_t (Gumbel: the
softmax of the prior logits plus the completed Q-values; MuZero: the visit
distribution) and root value nu_t as `policy_outputs`. Each env searches with its own
key, so a rollout does not depend on how the envs are spread over devices.

**Learning**: each update adds its rollout, search results included, to a replay ring
on the learner devices, split along envs (`replay.py`), then takes `agent.replay_ratio`
x env steps gradient steps. A sample is a window of one env column starting at a
position p drawn uniformly, or by priority (`agent.priority_exponent`: P proportional to
priority ** alpha, a step's priority |v - z| at its last draw, losses weighted by
(N P) ** -beta): the representation of o_p, unrolled K = `agent.unroll_steps` times
through the dynamics with the actions taken, a_p .. a_{p+K-1}. Targets, for k = 0 .. K
at position q = p + k:

* policy: the stored search policy pi_q; with Reanalyse (`agent.reanalyse_fraction`),
  for the first share of each env column's windows, the policy of a fresh search of o_q
  by the learner's current network, without noise;
* value: the n-step return (n = `agent.td_steps`) sum_{j<m} gamma^j r_{q+j} +
  gamma^m nu_{q+m}, stopped at the episode's end (no bootstrap after a termination;
  after a time-limit truncation the value of the real final observation), where nu is
  the learner's current value of the stored observation (`agent.value_bootstrap`
  network, the default) or the root value stored when it was searched (search, the
  paper's MuZero);
* reward (k < K): r_q.

Steps past the end of the sample's episode (and envpool's auto-reset steps) are masked
out of every loss, where the paper trains an absorbing state: a time-limit truncation
has no absorbing state to learn. The unrolled steps' losses are scaled by 1 / K and the
gradient entering the dynamics by 1/2, as the paper's.

The one-step lag: rollout k is searched with version max(1, k - 1), and its stored
values are those of that version; the replay mixes older versions anyway, which the
n-step value targets take as they come (as the paper's, without off-policy correction).

Reads top to bottom: config -> support -> networks -> search -> targets -> loss ->
update -> make.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import mctx
import ml_collections
import optax
import rlax

from sebulba import random_streams
from sebulba.agents import defaults, replay, size_rules
from sebulba.agents.api import (
    Agent,
    Discrete,
    EnvSpec,
    Rollout,
    check_choice,
    check_ranges,
    zero_observation,
)
from sebulba.agents.networks import check_network_fits, make_network
from sebulba.agents.search import SEARCHES, acting_functions, search_each_env
from sebulba.config.sizes import Sizes
from sebulba.errors import ConfigError

HYPERPARAMETER_RANGES = defaults.MUZERO_RANGES
VALUE_BOOTSTRAPS = ("search", "network")
# The torsos that end in a linear layer of any width (`make_network(..., q_head=True)`).
# Added to every priority |v - z| so that no stored step's probability reaches 0.
PRIORITY_FLOOR = 1e-6
REPRESENTATION_NETWORKS = ("mlp", "minatar", "nature_cnn", "impala_resnet")

get_config = defaults.muzero_config


def support_pair(support_size: int) -> rlax.TxPair:
    """Scalar <-> categorical over h's support [-S, S] in 2S + 1 bins (rlax's MuZero pair):
    `apply(x)` is the two-hot distribution of h(x), `apply_inv(probs)` the scalar back."""
    return rlax.muzero_pair(
        -float(support_size),
        float(support_size),
        2 * support_size + 1,
        rlax.SIGNED_HYPERBOLIC_PAIR,
    )


def largest_value(support_size: int) -> float:
    """The largest |x| the support holds: h^-1(S)."""
    return float(rlax.signed_parabolic(jnp.float32(support_size)))


def scale_gradient(x: jax.Array, scale: float) -> jax.Array:
    """x in the forward pass; its gradient times `scale` in the backward pass."""
    return x * scale + jax.lax.stop_gradient(x) * (1.0 - scale)


def _to_unit(x: jax.Array) -> jax.Array:
    # The paper's scaling of each hidden state to [0, 1] over its features.
    low = jnp.min(x, axis=-1, keepdims=True)
    high = jnp.max(x, axis=-1, keepdims=True)
    return (x - low) / jnp.maximum(high - low, 1e-5)


def _tower(x: jax.Array, hidden: Sequence[int]) -> jax.Array:
    for width in hidden:
        x = nn.relu(nn.LayerNorm()(nn.Dense(width)(x)))
    return x


class Dynamics(nn.Module):
    """g: (s^k [N, D], a^k [N]) -> (reward logits [N, bins], s^{k+1} [N, D])."""

    latent_size: int
    num_actions: int
    hidden: Sequence[int]
    bins: int

    @nn.compact
    def __call__(self, latent, action):
        x = jnp.concatenate([latent, jax.nn.one_hot(action, self.num_actions)], axis=-1)
        x = _tower(x, self.hidden)
        next_latent = _to_unit(nn.Dense(self.latent_size)(x))
        # Zero-initialised: every first reward prediction is the support's middle, 0.
        reward_logits = nn.Dense(self.bins, kernel_init=nn.initializers.zeros)(x)
        return reward_logits, next_latent


class Prediction(nn.Module):
    """f: s^k [N, D] -> (policy logits [N, A], value logits [N, bins])."""

    num_actions: int
    hidden: Sequence[int]
    bins: int

    @nn.compact
    def __call__(self, latent):
        x = _tower(latent, self.hidden)
        policy_logits = nn.Dense(self.num_actions, kernel_init=nn.initializers.zeros)(x)
        value_logits = nn.Dense(self.bins, kernel_init=nn.initializers.zeros)(x)
        return policy_logits, value_logits


@flax.struct.dataclass
class SearchResults:
    """What the actors' searches left for each stored step, leaves [C, B, ...] in the
    ring (position for position with the `Replay` beside them).

    Attributes:
      policy: [.., A] the search's improved policy pi_t.
      value: the search's root value nu_t.
    """

    policy: jax.Array
    value: jax.Array


@flax.struct.dataclass
class MuZeroState:
    """The learner state.

    Attributes:
      params: {"representation", "dynamics", "prediction"} parameters.
      opt_state: Adam's state.
      buffer: the replay ring, leaves [C, B, ...] sharded along B.
      search: the search results of the stored steps, sharded like `buffer`.
      priorities: [C, B] each stored step's priority as a window start (prioritised
        replay, `agent.priority_exponent` > 0: |v - z| of its last sample, the column's
        largest when stored), sharded like `buffer`; ones otherwise.
      count: int32, steps per env written to the ring so far.
      update_count: int32, updates done (the version is update_count + 1).
    """

    params: dict
    opt_state: optax.OptState
    buffer: replay.Replay
    search: SearchResults
    priorities: jax.Array
    count: jax.Array
    update_count: jax.Array


@flax.struct.dataclass
class Targets:
    """A batch of windows' targets, leaves [K + 1, N, ...] (N samples) unless noted.

    Attributes:
      policy: [K + 1, N, A] the stored search policies.
      value: the n-step value targets.
      reward: [K, N] the rewards of the steps taken.
      alive: 1.0 where position p + k is a real state of the sample's episode, else 0.
      weight: [N] each window's importance weight (prioritised replay; else ones).
    """

    policy: jax.Array
    value: jax.Array
    reward: jax.Array
    alive: jax.Array
    weight: jax.Array


def window_targets(
    rewards: jax.Array,
    terminations: jax.Array,
    truncations: jax.Array,
    valid: jax.Array,
    search_values: jax.Array,
    unroll_steps: int,
    td_steps: int,
    gamma: float,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The value targets and masks of windows of K + n + 1 stored steps.

    Args:
      rewards, terminations, truncations, valid, search_values: [K + n + 1, N] the
        window's positions p .. p + K + n.

    Returns:
      value [K + 1, N]: for each q = p + k the n-step return, bootstrapped from the stored
        root value where the episode goes on (or was truncated) after m <= n steps.
      alive [K + 1, N]: 1.0 where q is reached from p within one episode (every step
        before it real and not its episode's last) and is itself a real step.
      reward_mask [K, N]: alive[:K] (the step taken from a live state, its last included).
    """
    k_steps, n = unroll_steps, td_steps
    ended = jnp.logical_or(terminations, truncations)
    goes_on = jnp.logical_and(valid, jnp.logical_not(ended)).astype(jnp.float32)
    # alive[k] = prod_{j<k} goes_on[j] * valid[k].
    reached = jnp.cumprod(jnp.concatenate([jnp.ones_like(goes_on[:1]), goes_on[:k_steps]]), 0)
    alive = reached * valid[: k_steps + 1].astype(jnp.float32)
    # For each q = k, the steps q .. q + n - 1: step j is taken while every earlier one
    # went on (the window's `replay.sample` rule, per start).
    index = jnp.arange(k_steps + 1)[:, None] + jnp.arange(n)[None, :]  # [K + 1, n]
    step_goes_on = goes_on[index]  # [K + 1, n, N]
    step_valid = valid[index].astype(jnp.float32)
    before = jnp.cumprod(
        jnp.concatenate([jnp.ones_like(step_goes_on[:, :1]), step_goes_on[:, :-1]], axis=1), 1
    )
    taken = before * step_valid  # [K + 1, n, N]
    num_taken = jnp.sum(taken, axis=1).astype(jnp.int32)  # m [K + 1, N]
    powers = gamma ** jnp.arange(n, dtype=jnp.float32)[None, :, None]
    returns = jnp.sum(taken * powers * rewards[index], axis=1)
    last = jnp.arange(k_steps + 1)[:, None] + jnp.maximum(num_taken - 1, 0)  # [K + 1, N]
    terminated = jnp.take_along_axis(terminations, last, axis=0)
    bootstrap_at = jnp.arange(k_steps + 1)[:, None] + num_taken
    bootstrap = jnp.take_along_axis(search_values, bootstrap_at, axis=0)
    discount = jnp.where(terminated, 0.0, gamma ** num_taken.astype(jnp.float32))
    value = returns + discount * bootstrap
    return value, alive, alive[:k_steps]


def reanalysed_count(reanalyse_fraction: float, samples_per_env: int) -> int:
    """How many of each env column's windows Reanalyse searches again (the first ones)."""
    return round(reanalyse_fraction * samples_per_env)


def reanalyse(
    policy: jax.Array,
    window_obs: Any,
    fresh_policy: Callable[[Any], jax.Array],
    samples_per_env: int,
    reanalysed: int,
) -> jax.Array:
    """Policy targets [K + 1, B * S, A] (env-major: column b's S windows together) with
    those of each column's first `reanalysed` windows replaced by `fresh_policy` of their
    stored observations (leaves [K + 1, B * S, ...]): the same windows of each env column
    on every layout, so the run does not depend on how envs are spread over devices."""
    if reanalysed == 0:
        return policy
    steps, flat = policy.shape[:2]
    envs = flat // samples_per_env

    def first_windows(x):  # [K + 1, B * S, ...] -> [(K + 1) * B * R, ...]
        x = x.reshape(steps, envs, samples_per_env, *x.shape[2:])[:, :, :reanalysed]
        return x.reshape(-1, *x.shape[3:])

    fresh = fresh_policy(jax.tree.map(first_windows, window_obs))
    fresh = fresh.reshape(steps, envs, reanalysed, -1)
    by_column = policy.reshape(steps, envs, samples_per_env, -1)
    return by_column.at[:, :, :reanalysed].set(fresh).reshape(policy.shape)


def make(config: ml_collections.ConfigDict, env_spec: EnvSpec, sizes: Sizes) -> Agent:
    """Builds MuZero's pure functions for this run.

    Raises:
      ConfigError: naming the field, for a non-Discrete action space, a network without a
        representation head, or invalid sizes and search settings.
    """
    hp = config.agent
    check_ranges(hp, "agent", HYPERPARAMETER_RANGES)
    if not isinstance(env_spec.action, Discrete):
        raise ConfigError(
            f"agent.name 'muzero' needs a Discrete action space; env.id {env_spec.env_id!r} "
            f"has {type(env_spec.action).__name__} actions"
        )
    if env_spec.action_mask is not None:
        raise ConfigError(
            f"agent.name 'muzero' does not read action masks yet; env.id "
            f"{env_spec.env_id!r} has one ({env_spec.action_mask!r})"
        )
    check_choice(hp.search, "agent.search", SEARCHES)
    check_choice(hp.value_bootstrap, "agent.value_bootstrap", VALUE_BOOTSTRAPS)
    check_network_fits(hp.network, env_spec, among=REPRESENTATION_NETWORKS)
    num_actions = env_spec.action.num_actions
    k_steps, n = hp.unroll_steps, hp.td_steps
    replay_sizes = size_rules.muzero(hp, sizes)
    capacity, samples_per_env = replay_sizes.capacity, replay_sizes.samples_per_env
    gradient_steps = replay_sizes.gradient_steps
    reanalysed = reanalysed_count(hp.reanalyse_fraction, samples_per_env)
    prioritised = hp.priority_exponent > 0
    first_learning_update = replay_sizes.first_learning_update
    support = support_pair(hp.support_size)
    bins = 2 * hp.support_size + 1
    representation = make_network(
        hp.network,
        Discrete(hp.latent_size),
        hp.conv_init,
        env_spec.observation,
        q_head=True,
        hidden=hp.hidden_sizes,
        max_pool=hp.max_pool,
    )
    dynamics = Dynamics(hp.latent_size, num_actions, tuple(hp.model_hidden_sizes), bins)
    prediction = Prediction(num_actions, tuple(hp.model_hidden_sizes), bins)
    # Adam's count advances only on the gradient steps taken (from the first update that
    # learns), so an annealed step size reaches 0 at the run's last one.
    learning_steps = (sizes.num_updates - first_learning_update + 1) * gradient_steps
    learning_rate = (
        optax.linear_schedule(hp.learning_rate, 0.0, learning_steps)
        if hp.anneal_lr
        else hp.learning_rate
    )
    optimizer = optax.chain(optax.clip_by_global_norm(hp.max_grad_norm), optax.adam(learning_rate))
    key = random_streams.learner_key(config.seed)
    num_steps = sizes.num_steps

    def to_scalar(logits):
        return support.apply_inv(jax.nn.softmax(logits))

    def represent(params, obs):
        return _to_unit(representation.apply(params["representation"], obs))

    def recurrent_fn(params, unused_key, action, latent):
        reward_logits, next_latent = dynamics.apply(params["dynamics"], latent, action)
        policy_logits, value_logits = prediction.apply(params["prediction"], next_latent)
        output = mctx.RecurrentFnOutput(
            reward=to_scalar(reward_logits),
            discount=jnp.full(action.shape, hp.gamma, jnp.float32),
            prior_logits=policy_logits,
            value=to_scalar(value_logits),
        )
        return output, next_latent

    def search(params, obs, keys: jax.Array, exploring: bool):
        """Each env's search: (actions [B], improved policies [B, A], root values [B])."""
        latent = represent(params, obs)
        policy_logits, value_logits = prediction.apply(params["prediction"], latent)
        root_values = to_scalar(value_logits)

        return search_each_env(
            hp, params, keys, policy_logits, root_values, latent, recurrent_fn, exploring
        )

    def init(init_key: jax.Array) -> MuZeroState:
        keys = jax.random.split(init_key, 3)
        obs = zero_observation(env_spec.observation, 1)
        latent = jnp.zeros((1, hp.latent_size), jnp.float32)
        params = {
            "representation": representation.init(keys[0], obs),
            "dynamics": dynamics.init(keys[1], latent, jnp.zeros((1,), jnp.int32)),
            "prediction": prediction.init(keys[2], latent),
        }
        num_envs = sizes.num_envs

        def zero():  # A new array per field: the update donates every one.
            return jnp.zeros((), jnp.int32)

        return MuZeroState(
            params=params,
            opt_state=optimizer.init(params),
            buffer=replay.empty_for(env_spec, sizes, capacity),
            search=SearchResults(
                policy=jnp.zeros((capacity, num_envs, num_actions), jnp.float32),
                value=jnp.zeros((capacity, num_envs), jnp.float32),
            ),
            priorities=jnp.ones((capacity, num_envs), jnp.float32),
            count=zero(),
            update_count=zero(),
        )

    def policy_params(state: MuZeroState):
        return state.params

    act, greedy_search = acting_functions(search)

    def act_greedy(params, obs):
        return greedy_search(params, obs)[0]

    def env_major(x):
        # [S, B, ...] -> [B * S, ...] keeping the sharded env axis leading (no data moves).
        return jnp.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:])

    def sample(params, buffer, results, priorities, count, step_key, env_ids):
        """A batch of windows: (first observations [N, ...], actions [K, N], Targets,
        the windows' start positions [S, B])."""
        if prioritised:
            starts, probabilities, startable = replay.sample_prioritised_starts(
                priorities,
                count,
                step_key,
                env_ids,
                samples_per_env,
                k_steps + n,
                hp.priority_exponent,
            )  # [S, B]
            weight = (startable * probabilities) ** -hp.priority_importance
            weight = env_major(weight / jnp.max(weight))  # The batch's largest is 1.
        else:
            starts = replay.sample_starts(
                count, capacity, step_key, env_ids, samples_per_env, k_steps + n
            )  # [S, B]
            weight = jnp.ones((starts.size,), jnp.float32)
        positions = starts[None] + jnp.arange(k_steps + n + 1)[:, None, None]  # [L, S, B]
        length = positions.shape[0]

        def window(tree, steps):
            flat = positions[:steps].reshape(steps * samples_per_env, -1)
            taken = replay.take(tree, flat, capacity)
            return jax.tree.map(
                lambda x: jax.vmap(env_major)(x.reshape(steps, samples_per_env, *x.shape[1:])),
                taken,
            )

        rewards, terminations, truncations, valid, values = window(
            (buffer.rewards, buffer.terminations, buffer.truncations, buffer.valid, results.value),
            length,
        )
        if hp.value_bootstrap == "network":
            # Every window position's value under the current parameters (no gradient):
            # fresher than the root value searched when the step was acted.
            window_obs = window(buffer.obs, length)
            values = jax.lax.stop_gradient(
                jax.vmap(
                    lambda o: to_scalar(
                        prediction.apply(params["prediction"], represent(params, o))[1]
                    )
                )(window_obs)
            )
        value, alive, reward_mask = window_targets(
            rewards, terminations, truncations, valid, values, k_steps, n, hp.gamma
        )
        policy = window(results.policy, k_steps + 1)
        if reanalysed:
            # Reanalyse: a fresh search by the learner's network, without noise or gradient.
            policy = reanalyse(
                policy,
                window(buffer.obs, k_steps + 1),
                lambda obs: jax.lax.stop_gradient(greedy_search(params, obs)[1]),
                samples_per_env,
                reanalysed,
            )
        actions = window(buffer.actions, k_steps)
        obs = jax.tree.map(env_major, replay.take(buffer.obs, starts, capacity))
        del reward_mask  # The same as alive[:K].
        return obs, actions, Targets(policy, value, rewards[:k_steps], alive, weight), starts

    def loss_fn(params, obs, actions, targets: Targets):
        batch = actions.shape[1]
        latent = represent(params, obs)
        policy_loss = value_loss = reward_loss = jnp.float32(0.0)
        value_error = None
        for k in range(k_steps + 1):
            # The paper scales the unrolled steps' losses by 1 / K.
            scale = 1.0 if k == 0 else 1.0 / k_steps
            alive = targets.weight * targets.alive[k]
            policy_logits, value_logits = prediction.apply(params["prediction"], latent)
            cross_entropy = -jnp.sum(targets.policy[k] * jax.nn.log_softmax(policy_logits), axis=-1)
            policy_loss += scale * jnp.sum(alive * cross_entropy) / batch
            value_target = support.apply(jax.lax.stop_gradient(targets.value[k]))
            value_ce = -jnp.sum(value_target * jax.nn.log_softmax(value_logits), axis=-1)
            value_loss += scale * jnp.sum(alive * value_ce) / batch
            if k == 0:  # A window's priority: |v - z| at its start (the paper's).
                value_error = jnp.abs(to_scalar(value_logits) - targets.value[0])
            if k < k_steps:
                reward_logits, latent = dynamics.apply(
                    params["dynamics"], scale_gradient(latent, 0.5), actions[k]
                )
                reward_target = support.apply(targets.reward[k])
                reward_ce = -jnp.sum(reward_target * jax.nn.log_softmax(reward_logits), axis=-1)
                reward_loss += (1.0 / k_steps) * jnp.sum(alive * reward_ce) / batch
        loss = policy_loss + hp.value_loss_coef * value_loss + reward_loss
        metrics = {
            "loss": loss,
            "policy_loss": policy_loss,
            "value_loss": value_loss,
            "reward_loss": reward_loss,
        }
        return loss, (metrics, jax.lax.stop_gradient(value_error))

    def gradient_step(carry, step_key, env_ids, buffer, results, count):
        params, opt_state, priorities = carry
        obs, actions, targets, starts = sample(
            params, buffer, results, priorities, count, step_key, env_ids
        )
        grads, (metrics, value_error) = jax.grad(loss_fn, has_aux=True)(
            params, obs, actions, targets
        )
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        if prioritised:
            # Env-major [B * S] back to the starts' [S, B]; a floor keeps every P > 0.
            errors = value_error.reshape(starts.shape[1], starts.shape[0]).T
            priorities = replay.write_at(priorities, starts, errors + PRIORITY_FLOOR)
        return (params, opt_state, priorities), metrics

    def update(state: MuZeroState, rollout: Rollout):
        buffer = replay.add(state.buffer, rollout, state.count)
        outputs = rollout.policy_outputs
        results = replay.write_steps(
            state.search,
            SearchResults(
                policy=outputs["search_policy"][:num_steps],
                value=outputs["search_value"][:num_steps],
            ),
            state.count,
        )
        priorities = state.priorities
        if prioritised:
            # New steps start at their column's largest priority: each is drawn soon.
            largest = jnp.max(priorities, axis=0)
            new = jnp.broadcast_to(largest, (num_steps, *largest.shape))
            priorities = replay.write_steps(priorities, new, state.count)
        count = state.count + num_steps
        learning = jnp.logical_and(
            state.update_count + 1 >= first_learning_update,
            replay.sampleable(count, k_steps + n),
        )
        update_key = jax.random.fold_in(key, state.update_count)
        step_keys = jax.vmap(lambda i: jax.random.fold_in(update_key, i))(
            jnp.arange(gradient_steps)
        )

        def train(carry):
            def body(carry, step_key):
                return gradient_step(carry, step_key, rollout.env_ids, buffer, results, count)

            carry, metrics = jax.lax.scan(body, carry, step_keys)
            return carry, jax.tree.map(jnp.mean, metrics)

        def wait(carry):
            zero = jnp.zeros((), jnp.float32)
            return carry, {
                name: zero for name in ("loss", "policy_loss", "value_loss", "reward_loss")
            }

        (params, opt_state, priorities), metrics = jax.lax.cond(
            learning, train, wait, (state.params, state.opt_state, priorities)
        )
        valid = rollout.valid.astype(jnp.float32)
        searched = outputs["search_value"][:num_steps]
        metrics["search_value"] = jnp.sum(valid * searched) / jnp.maximum(jnp.sum(valid), 1.0)
        policy = outputs["search_policy"][:num_steps]
        entropy = -jnp.sum(policy * jnp.log(jnp.maximum(policy, 1e-12)), axis=-1)
        metrics["search_entropy"] = jnp.sum(valid * entropy) / jnp.maximum(jnp.sum(valid), 1.0)
        metrics["learning"] = learning.astype(jnp.float32)
        new_state = MuZeroState(
            params=params,
            opt_state=opt_state,
            buffer=buffer,
            search=results,
            priorities=priorities,
            count=count,
            update_count=state.update_count + 1,
        )
        return new_state, metrics

    def state_partition_specs(state):
        specs = replay.state_partition_specs(state)
        return specs.replace(
            search=jax.tree.map(lambda _: replay.PARTITION_SPEC, state.search),
            priorities=replay.PARTITION_SPEC,
        )

    return Agent(
        init=init,
        act=act,
        update=update,
        policy_params=policy_params,
        act_greedy=act_greedy,
        restart_envs=replay.restart_envs,
        state_partition_specs=state_partition_specs,
        simulations_per_step=config.agent.num_simulations,
    )
