"""AlphaZero (Silver et al. 2018) with Gumbel search (Danihelka et al. 2022): self-play of
a two-player game, searching the game's own rules, as Pgx's AlphaZero example does.

The env plays both sides (`sebulba.anakin.games`): each step is the move of the player
whose turn it is, the observation is the board as that player sees it, the reward is
the mover's. The spec's `GameRules` step the real game from any observation, so the
search needs no learned model. One network, on the board planes (`agent.network`: mlp,
minatar), gives the policy logits p and the value v in [-1, 1] (tanh) of the position
for the player to move.

**Acting** (the actor devices, inside the act step and the Anakin program): each env's
search (`agent.search`, `sebulba.agents.search`) runs `agent.num_simulations`
simulations from the position. A simulation's move steps the game's rules; its reward
is the mover's, and the value below it changes sign where the turn passes (the discount
is -1, +1 where the same player moves again, 0 once the game is over, where the value
is 0). Illegal moves are invalid at the root and have the lowest prior below it. The
env plays the search's action; the rollout carries the search's improved policy pi_t
and root value nu_t.

**Learning**, on-policy from each rollout (Pgx's example trains on the self-play it has
just collected): targets

* policy: pi_t;
* value: the game's outcome for the player to move at t, z_t = r_t + d_t z_{t+1} with
  d_t = 0 after the game's last move and -1 (or +1) where the turn passes (or not);
  where a game goes on past the rollout's end, z_T is the searched root value nu_T;

and the loss, over the rollout's real moves (envpool's reset steps masked out), the
cross-entropy of pi_t and the network's policy plus `agent.value_loss_coef` x
0.5 (v_t - z_t)^2, in `agent.num_minibatches` minibatches of each env column's shuffled
moves, `agent.update_epochs` times.

The one-step lag: rollout k is searched with version max(1, k - 1), and its bootstrap
nu_T is that version's; the outcome targets of finished games do not depend on it.

The pipeline's episode return is the sum of the movers' rewards: 1 for a decisive game
(its last move won it), 0 for a draw. Perfect play of a drawn game (tic-tac-toe) makes
it 0. `sebulba.anakin.matches` plays a trained policy against other players.

Reads top to bottom: network -> search -> targets -> loss -> update -> make.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import mctx
import ml_collections
import optax

from sebulba import random_streams
from sebulba.agents import defaults, learner, minibatches, size_rules, update_pieces
from sebulba.agents.api import (
    Agent,
    Discrete,
    EnvSpec,
    Rollout,
    UpdatePlan,
    check_choice,
    check_ranges,
    zero_observation,
)
from sebulba.agents.networks import (
    check_network_fits,
    has_convolutions_slow_in_a_loop,
    make_network,
)
from sebulba.agents.search import SEARCHES, acting_functions, search_each_env
from sebulba.config.sizes import Sizes
from sebulba.errors import ConfigError

HYPERPARAMETER_RANGES = defaults.ALPHAZERO_RANGES
# The torsos that end in a linear layer of any width (`make_network(..., q_head=True)`)
# and read board planes.
BOARD_NETWORKS = ("mlp", "minatar")
MINIBATCH_LOOPS = ("auto", "scan", "unrolled")

# Plays two-player games against itself (`sebulba.agents.api.plays_self_play`).
SELF_PLAY = True

get_config = defaults.alphazero_config


class PolicyValue(nn.Module):
    """Board planes [N, ...] -> (policy logits [N, A], value [N] in [-1, 1])."""

    torso: nn.Module
    num_actions: int

    @nn.compact
    def __call__(self, planes):
        x = nn.relu(self.torso(planes))
        policy_logits = nn.Dense(self.num_actions, kernel_init=nn.initializers.zeros)(x)
        value = jnp.tanh(nn.Dense(1, kernel_init=nn.initializers.zeros)(x)[:, 0])
        return policy_logits, value


def legal_logits(logits: jax.Array, legal: jax.Array) -> jax.Array:
    """The logits with every illegal action's at the lowest float (Pgx's example): a
    finished game, where none is legal, gets a uniform prior and no NaN."""
    return jnp.where(legal, logits, jnp.finfo(logits.dtype).min)


def outcome_targets(
    rewards: jax.Array,
    terminations: jax.Array,
    truncations: jax.Array,
    turn_passes: jax.Array,
    next_values: jax.Array,
    last_value: jax.Array,
) -> jax.Array:
    """z [T, B], each move's outcome for its mover (see the module docstring).

    Args:
      rewards, terminations, truncations: [T, B] the rollout's.
      turn_passes: [T, B] bool, the player to move at t + 1 is not the one at t.
      next_values: [T, B] the value of obs[t + 1] for its player to move, read where a
        game was cut (truncated) after move t.
      last_value: [B] the value of obs[T] for its player to move, where a game goes on.
    """
    sign = jnp.where(turn_passes, -1.0, 1.0)

    def backward(later, step):
        reward, terminated, truncated, sign, next_value = step
        after = jnp.where(truncated, next_value, later)
        outcome = reward + jnp.where(terminated, 0.0, sign * after)
        return outcome, outcome

    _, outcomes = jax.lax.scan(
        backward,
        last_value,
        (rewards, terminations, truncations, sign, next_values),
        reverse=True,
    )
    return outcomes


@flax.struct.dataclass
class AlphaZeroState:
    """The learner state: the network's parameters, Adam's state, updates done."""

    params: Any
    opt_state: optax.OptState
    update_count: jax.Array


def env_major(x: jax.Array) -> jax.Array:
    # [t, B, ...] -> [B t, ...] keeping the sharded env axis leading (no data moves).
    return jnp.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:])


def make(config: ml_collections.ConfigDict, env_spec: EnvSpec, sizes: Sizes) -> Agent:
    """Builds AlphaZero's pure functions for this run.

    Raises:
      ConfigError: naming the field, for an env that is not a two-player game, a network
        that does not read its board, or invalid sizes and search settings.
    """
    hp = config.agent
    check_ranges(hp, "agent", HYPERPARAMETER_RANGES)
    rules = env_spec.game
    if rules is None:
        raise ConfigError(
            f"agent.name 'alphazero' plays two-player games against itself, searching the "
            f"game's own rules; env.id {env_spec.env_id!r} has none: use a pgx board game "
            "(env.id 'pgx:tic_tac_toe', 'pgx:connect_four', ...)"
        )
    check_choice(hp.search, "agent.search", SEARCHES)
    check_choice(hp.minibatch_loop, "agent.minibatch_loop", MINIBATCH_LOOPS)
    mask_entry = env_spec.action_mask
    planes_spec = rules.network_observation(env_spec.observation, mask_entry)
    check_network_fits(
        hp.network, EnvSpec(env_spec.env_id, planes_spec, env_spec.action), among=BOARD_NETWORKS
    )
    if not all(isinstance(w, int) and w > 0 for w in tuple(hp.hidden_sizes)):
        raise ConfigError(f"agent.hidden_sizes {hp.hidden_sizes!r} must be positive integers")
    size_rules.alphazero(hp, sizes)
    num_actions = env_spec.action.num_actions
    torso_width, *tower = tuple(hp.hidden_sizes)
    torso = make_network(
        hp.network,
        Discrete(torso_width),
        hp.conv_init,
        planes_spec,
        q_head=True,
        hidden=tuple(tower),
        max_pool=hp.max_pool,
    )
    network = PolicyValue(torso, num_actions)
    unroll = learner.unrolls_minibatch_loop(
        hp.minibatch_loop, slow_convolutions=has_convolutions_slow_in_a_loop(torso, planes_spec)
    )
    optimizer = optax.chain(
        optax.clip_by_global_norm(hp.max_grad_norm), optax.adam(hp.learning_rate)
    )
    key = random_streams.learner_key(config.seed)

    def predict(params, obs):
        """Observations [N, ...] -> (legal policy logits [N, A], values [N])."""
        logits, value = network.apply(params, rules.network_observation(obs, mask_entry))
        return legal_logits(logits, obs[mask_entry]), value

    def recurrent_fn(params, unused_key, action, obs):
        """One move of the real game from each node's position (mctx's batch of nodes)."""
        moved = jax.vmap(rules.step)(obs, action)
        logits, value = predict(params, moved.obs)
        over = moved.terminated
        output = mctx.RecurrentFnOutput(
            reward=moved.reward,
            discount=jnp.where(over, 0.0, jnp.where(moved.turn_passes, -1.0, 1.0)),
            prior_logits=logits,
            value=jnp.where(over, 0.0, value),
        )
        return output, moved.obs

    def search(params, obs, keys: jax.Array, exploring: bool):
        """Each env's search: (actions [B], improved policies [B, A], root values [B])."""
        logits, value = predict(params, obs)
        return search_each_env(
            hp,
            params,
            keys,
            logits,
            value,
            obs,
            recurrent_fn,
            exploring,
            invalid_actions=jnp.logical_not(obs[mask_entry]),
        )

    def init(init_key: jax.Array) -> AlphaZeroState:
        planes = rules.network_observation(zero_observation(env_spec.observation, 1), mask_entry)
        params = network.init(init_key, planes)
        return AlphaZeroState(params, optimizer.init(params), jnp.zeros((), jnp.int32))

    def policy_params(state: AlphaZeroState):
        return state.params

    act, greedy_search = acting_functions(search)

    def act_greedy(params, obs):
        return greedy_search(params, obs)[0]

    def loss_fn(params, batch):
        """Policy cross-entropy + value_loss_coef x 0.5 (v - z)^2 over the valid moves."""
        flat = jax.tree.map(env_major, batch)
        logits, value = network.apply(params, flat["planes"])
        cross_entropy = -jnp.sum(flat["policy"] * jax.nn.log_softmax(logits), axis=-1)
        weight = flat["valid"].astype(jnp.float32)
        policy_loss = learner.masked_mean(cross_entropy, weight)
        value_loss = learner.masked_mean(0.5 * (value - flat["outcome"]) ** 2, weight)
        loss = policy_loss + hp.value_loss_coef * value_loss
        return loss, {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss}

    def plan_update(state: AlphaZeroState, rollout: Rollout) -> UpdatePlan:
        outputs = rollout.policy_outputs
        players = jax.vmap(jax.vmap(rules.player))(rollout.obs)  # [T + 1, B]
        searched = outputs["search_value"]  # [T + 1, B]
        outcome = outcome_targets(
            rollout.rewards,
            rollout.terminations,
            rollout.truncations,
            players[1:] != players[:-1],
            searched[1:],
            searched[-1],
        )
        samples = {
            "planes": rules.network_observation(
                jax.tree.map(lambda x: x[:-1], rollout.obs), mask_entry
            ),
            "policy": outputs["search_policy"][:-1],
            "outcome": outcome,
            "valid": rollout.valid,
        }
        update_key = jax.random.fold_in(key, state.update_count)
        # As PPO's: each env column shuffles its own T moves, so a minibatch holds the
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
            new_state = AlphaZeroState(params, opt_state, state.update_count + 1)
            weight = rollout.valid.astype(jnp.float32)
            metrics["outcome_mean"] = learner.masked_mean(outcome, weight)
            metrics["search_value"] = learner.masked_mean(searched[:-1], weight)
            policy = outputs["search_policy"][:-1]
            entropy = -jnp.sum(policy * jnp.log(jnp.maximum(policy, 1e-12)), axis=-1)
            metrics["search_entropy"] = learner.masked_mean(entropy, weight)
            return new_state, metrics

        return pieces.plan(finish)

    return Agent(
        init=init,
        act=act,
        update=Agent.update_from_plan(plan_update),
        policy_params=policy_params,
        act_greedy=act_greedy,
        plan_update=plan_update,
        simulations_per_step=hp.num_simulations,
    )
