"""IMPALA with V-trace (Espeholt et al. 2018), with the hyperparameters of Cleanba.

The actors store the parameters of the behaviour policy's distribution (logits for
Discrete actions, mean and log-std for Box; `distributions.py`); the learner recomputes
the policy and values of whole T-step sequences with its current parameters, and
V-trace (rlax) corrects, with the log-ratio of the two distributions' log-probabilities
of the actions taken, for the gap between the two: the pipeline's one-step lag, and the earlier
minibatch steps of the same update. Defaults are the IMPALA hyperparameters of Huang et
al. (2023, "Cleanba"): 20-step rollouts cut into 4 minibatches along envs,
lambda 1, rho-bar = pg-rho-bar = 1, value coefficient 0.5, entropy coefficient 0.01,
RMSProp (decay 0.99, eps 0.01 added outside the square root, as torchbeast and Cleanba
do), step size 6e-4 annealed linearly to 0, global-norm clip 40, convolutions with
flax's default lecun_normal init. As in IMPALA and Cleanba the loss terms are sums over a
minibatch's valid samples, not means; with RMSProp's large eps this is what makes those
step sizes work. The sum runs over the whole global minibatch, so the update does not
depend on the number of learner devices D; Cleanba averages per-device sums, so its
gradient is 1/D of ours (docs/agents.md lists every difference from Cleanba).

Observation normalisation and reward scaling (`agent.normalize_observations`,
`agent.normalize_rewards`; off by default) work as in PPO (`normalization.py`).

With `agent.popart` V-trace runs on the unnormalised values of each column's task, and
the value loss and policy gradient on normalised targets and advantages (Hessel et al.
2019, "Multi-task deep RL with PopArt"; `popart.py`).

With `agent.core="lstm"` an LSTM follows the torso, as in the IMPALA paper's agent
(`recurrent.py`); the learner replays every sequence's LSTM states from the stored
initial state, reset where episodes start.

Reads top to bottom: config -> state -> V-trace -> act -> loss -> update -> make.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import ml_collections
import optax
import rlax

from sebulba import random_streams
from sebulba.agents import (
    defaults,
    distributions,
    learner,
    minibatches,
    normalization,
    popart,
    recurrent,
    size_rules,
    update_pieces,
)
from sebulba.agents.api import (
    Agent,
    EnvSpec,
    Rollout,
    UpdatePlan,
    check_ranges,
    episode_starts,
)
from sebulba.agents.networks import (
    check_network_fits,
    has_convolutions_slow_in_a_loop,
    make_network,
)
from sebulba.config.sizes import Sizes
from sebulba.environments import tasks

# The interval of every numeric hyperparameter (`defaults.py`); `make` refuses values
# outside them.
HYPERPARAMETER_RANGES = defaults.IMPALA_RANGES


# The agent's defaults, kept free of JAX imports (`defaults.py`).
get_config = defaults.impala_config


# The learner state: parameters, RMSProp state, update count (and the normalisation
# statistics when `agent.normalize_*` is on, PopArt's when `agent.popart` is), shared with
# the other built-in agent.
IMPALAState = learner.TrainState


def vtrace(
    values: jax.Array,
    rhos: jax.Array,
    rewards: jax.Array,
    terminations: jax.Array,
    truncations: jax.Array,
    *,
    gamma: float,
    vtrace_lambda: float,
    clip_rho_threshold: float,
    clip_pg_rho_threshold: float,
) -> rlax.VTraceOutput:
    """V-trace targets and policy-gradient advantages of T-step sequences, via rlax.

    Args:
      values: [T + 1, B] values of obs[0 .. T] under the learner's parameters.
      rhos: [T, B] importance ratios pi(a_t | x_t) / mu(a_t | x_t).
      rewards, terminations, truncations: [T, B], as in `Rollout`.

    Returns:
      [T, B] arrays: `errors` = v_t - V(x_t) (the targets v_t carry no gradient),
      `pg_advantage` = min(pg-rho-bar, rho_t) (r_t + gamma q_{t+1} - V(x_t)) and
      `q_estimate`. A termination stops bootstrapping; a truncation bootstraps from the
      value of the real observation that follows it; both cut the trace, so nothing of
      the next episode (nor envpool's reset step) reaches an earlier step.
    """
    discount_t, lambda_t = learner.episode_discounts(
        terminations, truncations, gamma, vtrace_lambda
    )
    per_env = functools.partial(
        rlax.vtrace_td_error_and_advantage,
        clip_rho_threshold=clip_rho_threshold,
        clip_pg_rho_threshold=clip_pg_rho_threshold,
    )
    return jax.vmap(per_env, in_axes=1, out_axes=1)(
        values[:-1], values[1:], rewards, discount_t, rhos, lambda_t
    )


def make(config: ml_collections.ConfigDict, env_spec: EnvSpec, sizes: Sizes) -> Agent:
    """Builds IMPALA's pure functions for this run.

    Raises:
      ConfigError: naming the field, for IMPALA-specific invalid values.
    """
    hp = config.agent
    check_ranges(hp, "agent", HYPERPARAMETER_RANGES)
    # Minibatches take whole env columns (see `minibatches.env_groups`).
    accumulation_steps = size_rules.impala(hp, sizes)
    check_network_fits(hp.network, env_spec)
    value_normalization = popart.popart_of(config, tasks.task_layout(config, sizes.num_envs))
    # With an action mask (`agent.mask_actions`) the policy never picks an illegal action.
    policy = distributions.for_env_spec(env_spec, hp.mask_actions)
    network = make_network(
        hp.network,
        env_spec.action,
        hp.conv_init,
        env_spec.observation,
        core=recurrent.make_core(hp.core, hp.lstm_size),
        value_heads=value_normalization.value_heads,
        policy=policy,
        activation=hp.activation,
        max_pool=hp.max_pool,
    )
    action_mask = env_spec.action_mask if hp.mask_actions else None
    model = recurrent.ActorCritic(network, env_spec.observation, hp.lstm_size, action_mask)
    # The core adds no convolutions: the feed-forward network tells.
    torso_only = make_network(hp.network, env_spec.action, hp.conv_init, env_spec.observation)
    unroll = learner.unrolls_minibatch_loop(
        hp.minibatch_loop,
        slow_convolutions=has_convolutions_slow_in_a_loop(torso_only, env_spec.observation),
    )
    normalizer = normalization.normalizer_of(hp, env_spec.observation, sizes.num_envs)
    learning_rate = learner.annealed_learning_rate(
        hp.learning_rate, hp.anneal_lr, sizes.num_updates, hp.num_minibatches
    )
    optimizer = optax.chain(
        optax.clip_by_global_norm(hp.max_grad_norm),
        optax.rmsprop(learning_rate, decay=hp.rmsprop_decay, eps=hp.rmsprop_eps, eps_in_sqrt=False),
    )
    key = random_streams.learner_key(config.seed)

    def init(init_key: jax.Array) -> IMPALAState:
        params = model.init(init_key)
        count = jnp.zeros((), jnp.int32)
        return learner.train_state(
            params, optimizer.init(params), count, normalizer.init(), value_normalization.init()
        )

    def statistics(state: IMPALAState):
        return state.normalization if normalizer.enabled else None

    def act(params, carry, obs, keys: jax.Array):
        """carry, obs [B, ...], keys [B] -> carry, actions [B, ...], {"policy": behaviour}."""
        params, obs = normalizer.network_inputs(params, obs)
        carry, policy_params, _ = model.step(params, carry, obs)
        return carry, policy.sample(policy_params, keys), {"policy": policy_params}

    def act_greedy(params, carry, obs):
        """carry, obs [B, ...] -> carry, the most likely actions [B, ...] (evaluation)."""
        params, obs = normalizer.network_inputs(params, obs)
        carry, policy_params, _ = model.step(params, carry, obs)
        return carry, policy.mode(policy_params)

    def forward(params, batch, popart_state):
        """Network and V-trace on whole sequences: a dict of [T (+ 1), b, ...] arrays.

        Returns (policy parameters [T, b, ...], values [T + 1, b], PopArt's normalised
        values of each column's task [T + 1, b] or None, V-trace returns, tasks [T, b] or
        None). With PopArt V-trace runs on the unnormalised values sigma n(s) + mu.
        """
        initial_carry = jax.tree.map(lambda x: x[0], batch["initial_carry"])
        policy_params, values = model.sequence(params, initial_carry, batch["obs"], batch["starts"])
        policy_params = jax.tree.map(lambda x: x[:-1], policy_params)
        normalized_values, step_tasks = None, None
        if value_normalization.enabled:
            sample_tasks = jnp.broadcast_to(batch["tasks"], values.shape[:-1])
            normalized_values, values = rlax.unnormalize_linear(popart_state, values, sample_tasks)
            step_tasks = sample_tasks[:-1]
        log_pi = policy.logprob(policy_params, batch["actions"])
        log_mu = policy.logprob(batch["behaviour_policy"], batch["actions"])
        # Ratios weight the targets; they are not a path for the policy gradient.
        rhos = jnp.exp(jax.lax.stop_gradient(log_pi - log_mu))
        returns = vtrace(
            values,
            rhos,
            batch["rewards"],
            batch["terminations"],
            batch["truncations"],
            gamma=hp.gamma,
            vtrace_lambda=hp.vtrace_lambda,
            clip_rho_threshold=hp.clip_rho_threshold,
            clip_pg_rho_threshold=hp.clip_pg_rho_threshold,
        )
        return (policy_params, log_pi, rhos), values, normalized_values, returns, step_tasks

    def popart_statistics_first(params, batch, popart_state):
        """Hessel et al. (2019), Algorithm 1: the minibatch's V-trace targets update the
        statistics, and the value head is rescaled to preserve every output, before the
        gradient step; the loss then normalises the targets with statistics that have
        seen them. The unnormalised values, and so the targets, are the same either side
        of the rescaling."""
        _, values, _, returns, step_tasks = forward(params, batch, popart_state)
        targets = jax.lax.stop_gradient(returns.errors + values[:-1])
        moments = value_normalization.moments(targets, batch["valid"], step_tasks)
        return value_normalization.update(params, popart_state, moments)

    def loss_fn(params, batch, popart_state=None):
        """IMPALA loss on whole sequences: a dict of [T (+ 1), b, ...] arrays, sharded on b.

        With PopArt, `popart_state` holds the statistics (already updated with this
        minibatch's targets: `popart_statistics_first`).
        """
        (policy_params, log_pi, rhos), values, normalized_values, returns, step_tasks = forward(
            params, batch, popart_state
        )
        weight = batch["valid"].astype(jnp.float32)
        # IMPALA's sums over the valid samples (rlax.policy_gradient_loss, for any
        # distribution): the advantages carry no gradient.
        pg_advantage = jax.lax.stop_gradient(returns.pg_advantage)
        value_errors = returns.errors
        targets = jax.lax.stop_gradient(returns.errors + values[:-1])  # v_s [T, b]
        if value_normalization.enabled:
            # Hessel et al. (2019): the value loss on normalised targets (v_s - mu) / sigma,
            # the policy gradient on the normalised advantage (r + gamma v_{s+1} - mu) /
            # sigma - n(s) = rho-clipped advantage / sigma (rlax's pg_advantage is
            # min(pg-rho-bar, rho) times the unnormalised one).
            value_errors = (
                rlax.normalize(popart_state, targets, step_tasks) - (normalized_values[:-1])
            )
            pg_advantage = pg_advantage / popart_state.scale[step_tasks]
        pg_loss = -jnp.sum(weight * log_pi * pg_advantage)
        entropy = jnp.sum(weight * policy.entropy(policy_params))
        v_loss = 0.5 * jnp.sum(weight * value_errors**2)
        loss = pg_loss + hp.vf_coef * v_loss - hp.ent_coef * entropy
        num_valid = jnp.maximum(jnp.sum(weight), 1.0)
        stats = {  # Per valid sample, comparable across batch sizes and with PPO.
            "policy_loss": pg_loss / num_valid,
            "value_loss": v_loss / num_valid,
            "entropy": entropy / num_valid,
            "importance_ratio": learner.masked_mean(rhos, weight),
            "explained_variance": learner.explained_variance(targets, values[:-1], weight),
        }
        return loss, stats

    def plan_update(state: IMPALAState, rollout: Rollout) -> UpdatePlan:
        stats = statistics(state)
        # As in PPO: rewards scaled before V-trace, observations normalised with this
        # version's statistics, which take in the rollout's moments after the steps.
        rewards, stats = normalizer.rewards(stats, rollout)
        sequences = {
            "obs": normalizer.observations(stats, rollout.obs),
            "actions": rollout.actions,
            "rewards": rewards,
            "terminations": rollout.terminations,
            "truncations": rollout.truncations,
            "valid": rollout.valid,
            "behaviour_policy": jax.tree.map(lambda x: x[:-1], rollout.policy_outputs["policy"]),
            "starts": episode_starts(rollout.valid),
            # [1, B, ...]: env_groups splits every leaf along axis 1.
            "initial_carry": jax.tree.map(lambda x: x[None], rollout.initial_carry),
        }
        if value_normalization.enabled:
            sequences["tasks"] = value_normalization.tasks(rollout.env_ids)[None]  # [1, B]
        update_key = jax.random.fold_in(key, state.update_count)
        # [M, T (+ 1), B / M, ...]: one leading axis to loop over.
        batches = minibatches.env_groups(sequences, update_key, rollout.env_ids, hp.num_minibatches)
        steps = dict(
            accumulation_steps=accumulation_steps,
            split=minibatches.env_micro_batches,
            combine="sum",
        )
        if value_normalization.enabled:
            # The targets depend on the learner's values, so each minibatch's targets
            # update the statistics (POP, then ART's rescaling) before its gradient step.
            pieces = update_pieces.minibatch_pieces(
                loss_fn,
                optimizer,
                state.params,
                state.opt_state,
                state.popart,
                batches,
                unroll,
                before_step=popart_statistics_first,
                **steps,
            )
        else:
            pieces = update_pieces.stateless_minibatch_pieces(
                loss_fn, optimizer, state.params, state.opt_state, batches, unroll, **steps
            )

        def finish(params, opt_state, metrics, popart_state):
            popart_state = popart_state if value_normalization.enabled else None
            if value_normalization.enabled:
                metrics.update(value_normalization.metrics(popart_state))
            metrics["learning_rate"] = learning_rate(state.update_count * hp.num_minibatches)
            observed = normalizer.observed(stats, jax.tree.map(lambda x: x[:-1], rollout.obs))
            new_state = learner.train_state(
                params, opt_state, state.update_count + 1, observed, popart_state
            )
            return new_state, metrics

        return pieces.plan(finish)

    return Agent.with_carry(
        init=init,
        act=act,
        update=Agent.update_from_plan(plan_update),
        policy_params=lambda s: normalizer.policy_params(s.params, statistics(s)),
        act_greedy=act_greedy,
        initial_carry=model.initial_carry,
        restart_envs=learner.restart_envs,
        plan_update=plan_update,
    )
