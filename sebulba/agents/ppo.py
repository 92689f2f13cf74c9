"""Proximal Policy Optimization (Schulman et al. 2017) as in openai/baselines ppo2.

Implements the 13 core implementation details catalogued by Huang et al. (2022, "The 37
Implementation Details of Proximal Policy Optimization"): vectorized envs, orthogonal
initialisation with zero biases, Adam with eps 1e-5, learning-rate annealing per
update, GAE, epochs of shuffled minibatches, advantage normalisation (per minibatch;
`agent.norm_adv`), the clipped surrogate, value clipping (`agent.clip_vloss`), entropy
bonus, global gradient clipping, approx_kl and clipfrac, and the separate actor and
critic MLPs (`networks.py`). Two auxiliary details, off by default: early stopping of the
epochs once the approximate KL passes `agent.target_kl` (CleanRL's ppo.py) and the
clipping coefficient annealed to 0 like the step size (`agent.anneal_clip`, baselines
ppo2's cliprange; docs/agents.md). Under the one-step lag the stored log-probabilities
and values come from the behaviour policy, as in Cleanba. The policy is the action space's
distribution (`distributions.py`: softmax, diagonal Gaussian or a product of softmaxes),
so act and loss are the same code for every action space.

Of the 9 Atari details, every Atari run follows the evaluation protocol of Machado et
al. (2018) that `sebulba.environments.envpool_pools` implements, so only these apply:
* always: frame skip 4 with the max of the last two frames, 84x84 grey frames, a stack
  of 4, pixels scaled to [0, 1], one torso shared by the policy and value heads (Nature
  CNN or IMPALA ResNet, `agent.network`);
* reward clipping when `env.clip_rewards` (True in configs/*_atari.py);
* fire on reset when `env.use_fire_reset` (True in configs/*_atari.py, as in Cleanba;
  False in the base config);
* never: no-op starts (sticky actions, `env.repeat_action_probability`, randomise the
  start instead) and episodic life (no life-loss signal).
The 9 continuous-action details: a Gaussian policy with a state-independent log-std,
independent action components whose log-probabilities are summed (`distributions.py`),
separate 64-64 tanh policy and value networks (`agent.network="mlp"`), actions clipped to
the bounds only when stepping the env while the sampled action is stored and learned
from (`spaces.Box.to_env`), observation normalisation by a running mean and variance and
clipping to [-10, 10] (`agent.normalize_observations`, `agent.observation_clip`), and
reward scaling by the running std of the discounted return and clipping to [-10, 10]
(`agent.normalize_rewards`, `agent.reward_clip`; `normalization.py`, whose statistics are
learner state that travels to the actors inside the policy parameters);
configs/ppo_mujoco.py switches them on.

With `agent.popart` the value head has one output per task, trained on targets
normalised per task (PopArt, van Hasselt et al. 2016; Hessel et al. 2019; `popart.py`),
and the policy gradient uses the GAE advantages divided by the task's scale.

Time-limit truncations bootstrap from the next observation, where baselines and Cleanba
treat them as terminal; docs/agents.md lists every difference from both.

With `agent.core="lstm"` an LSTM follows the torso (CleanRL `ppo_atari_lstm`, the 5 LSTM
details of Huang et al. 2022; `recurrent.py`): minibatches are then whole env sequences
(`minibatches.env_groups`, as CleanRL takes whole envs), whose LSTM states are recomputed
from each sequence's stored initial state, reset where episodes start.

Reads top to bottom: config -> state -> act -> loss -> update -> make.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import optax
import rlax
from absl import logging

from sebulba import random_streams
from sebulba.agents import (
    defaults,
    distributions,
    impala,
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
    check_choice,
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
from sebulba.errors import ConfigError

# Where advantages are standardised: within each minibatch (baselines ppo2), once over
# the whole global rollout (Cleanba normalises once per rollout), or not at all.
NORM_ADV_MODES = ("minibatch", "batch", "none")

# Which policy the surrogate's ratio is clipped around: the one that collected the data
# (PPO), or the learner's at the update's start, with the data importance-weighted from
# the behaviour to it (decoupled PPO, Hilton et al. 2021; docs/agents.md).
PROXIMAL_POLICIES = ("behaviour", "learner")

# The advantages and value targets: GAE on the behaviour's values, or V-trace (Espeholt et
# al. 2018) toward the learner's policy at the update's start, with its values.
ADVANTAGE_MODES = ("gae", "vtrace")

# The interval of every numeric hyperparameter (`defaults.py`); `make` refuses values
# outside them.
HYPERPARAMETER_RANGES = defaults.PPO_RANGES


# The agent's defaults, kept free of JAX imports (`defaults.py`).
get_config = defaults.ppo_config


# The learner state: parameters, Adam state, update count (and the normalisation
# statistics when `agent.normalize_*` is on, PopArt's when `agent.popart` is), shared with
# the other built-in agent.
PPOState = learner.TrainState


def advantages_and_returns(
    rollout: Rollout, gamma: float, gae_lambda: float, values: jax.Array | None = None
):
    """GAE (Schulman et al. 2016) with the behaviour values, via rlax.

    Args:
      values: [T + 1, B] behaviour values; None: `rollout.policy_outputs["value"]`.

    Returns:
      advantages [T, B] and returns (advantages + values) [T, B]. Terminations stop
      bootstrapping; truncations bootstrap from the real next observation but end the
      trace; both keep the next episode's values out of this one's advantages.
    """
    if values is None:
        values = rollout.policy_outputs["value"]  # [T + 1, B]
    discount_t, lambda_t = learner.episode_discounts(
        rollout.terminations, rollout.truncations, gamma, gae_lambda
    )
    gae = jax.vmap(rlax.truncated_generalized_advantage_estimation, in_axes=1, out_axes=1)
    advantages = gae(rollout.rewards, discount_t, lambda_t, values)
    return advantages, advantages + values[:-1]


def normalized_advantages(advantages: jax.Array, weight: jax.Array) -> jax.Array:
    """(A - mean) / (std + 1e-8), with the mean and std of the valid samples (weight 1).

    Over a sharded batch the statistics are global reductions (an all-reduce), so the
    result does not depend on how many learner devices hold the batch.
    """
    mean = learner.masked_mean(advantages, weight)
    return (advantages - mean) / (jnp.sqrt(learner.masked_var(advantages, weight)) + 1e-8)


def decoupled_pg_loss(
    logprob: jax.Array,
    behaviour_logprob: jax.Array,
    proximal_logprob: jax.Array,
    advantages: jax.Array,
    weight: jax.Array,
    clip_coef,
    log_ratio_max,
) -> jax.Array:
    """The decoupled clipped surrogate of Hilton et al. (2021), as a loss.

    -mean over valid samples of (prox / mu) min(r A, clip(r, 1 - eps, 1 + eps) A), with
    r = pi / prox: the trust region is around the proximal policy prox, while the data
    are importance-weighted from the behaviour mu that collected them. Computed in log
    space, with pi / mu capped at exp(`log_ratio_max`) (stale data can make it extreme)
    by raising log mu where needed, so the gradient still flows through pi.

    Args:
      logprob, behaviour_logprob, proximal_logprob: [N] log pi, log mu, log prox.
      advantages, weight: [N]; weight 1 for valid samples, 0 for the others.
    """
    behaviour = jnp.maximum(behaviour_logprob, jax.lax.stop_gradient(logprob) - log_ratio_max)
    unclipped = advantages * jnp.exp(logprob - behaviour)
    # log(1 - eps) is -inf for eps >= 1: no lower clip, as the ratio is never negative.
    low, high = jnp.log(jnp.maximum(1.0 - clip_coef, 0.0)), jnp.log1p(clip_coef)
    clipped_log_ratio = jnp.clip(logprob - proximal_logprob, low, high)
    clipped = advantages * jnp.exp(clipped_log_ratio + proximal_logprob - behaviour)
    return -learner.masked_mean(jnp.minimum(unclipped, clipped), weight)


def make(config: ml_collections.ConfigDict, env_spec: EnvSpec, sizes: Sizes) -> Agent:
    """Builds PPO's pure functions for this run.

    Raises:
      ConfigError: naming the field, for PPO-specific invalid values.
    """
    hp = config.agent
    check_ranges(hp, "agent", HYPERPARAMETER_RANGES)
    core = recurrent.make_core(hp.core, hp.lstm_size)
    sequences = core is not None  # Minibatches of whole env sequences, not of time steps.
    accumulation_steps = size_rules.ppo(hp, sizes)
    # config.json of runs from before the modes existed holds a bool.
    norm_adv = ("none", "minibatch")[hp.norm_adv] if isinstance(hp.norm_adv, bool) else hp.norm_adv
    check_choice(norm_adv, "agent.norm_adv", NORM_ADV_MODES)
    # config.json of runs from before the options existed has neither.
    proximal = hp.get("proximal_policy", "behaviour")
    advantage_mode = hp.get("advantages", "gae")
    check_choice(proximal, "agent.proximal_policy", PROXIMAL_POLICIES)
    check_choice(advantage_mode, "agent.advantages", ADVANTAGE_MODES)
    decoupled = proximal == "learner"
    # Both need the learner's policy on the rollout as the update starts.
    replays_rollout = decoupled or advantage_mode == "vtrace"
    policy_lag = config.pipeline.policy_lag
    if policy_lag > 1 and not decoupled:
        logging.warning(
            "PPO at pipeline.policy_lag=%d clips its ratio around the policy that collected "
            "the data, up to %d versions older than the learner's; "
            "agent.proximal_policy='learner' (decoupled PPO) clips around the learner's "
            "(docs/agents.md)",
            policy_lag,
            policy_lag,
        )
    log_ratio_max = jnp.log(hp.get("importance_ratio_max", 100.0))
    check_network_fits(hp.network, env_spec)
    hidden = tuple(hp.hidden_sizes)
    if not hidden or not all(isinstance(w, int) and w > 0 for w in hidden):
        raise ConfigError(f"agent.hidden_sizes {hp.hidden_sizes!r} must be positive integers")
    value_normalization = popart.popart_of(config, tasks.task_layout(config, sizes.num_envs))
    if advantage_mode == "vtrace" and value_normalization.enabled:
        raise ConfigError(
            "agent.advantages='vtrace' does not combine with agent.popart: V-trace's targets "
            "come from the learner's values, PopArt's from each task's normalised ones"
        )
    # With an action mask (`agent.mask_actions`) the policy never picks an illegal action.
    policy = distributions.for_env_spec(env_spec, hp.mask_actions)
    network = make_network(
        hp.network,
        env_spec.action,
        hp.conv_init,
        env_spec.observation,
        core=core,
        value_heads=value_normalization.value_heads,
        policy=policy,
        hidden=hidden,
        activation=hp.activation,
        hidden_default=get_config().hidden_sizes,
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
    steps_per_update = hp.update_epochs * hp.num_minibatches
    # baselines anneals once per update: constant over its epochs and minibatches.
    learning_rate = learner.annealed_learning_rate(
        hp.learning_rate, hp.anneal_lr, sizes.num_updates, steps_per_update
    )
    early_stopping = hp.target_kl is not None

    def optimizer_with(step_size):
        return optax.chain(
            optax.clip_by_global_norm(hp.max_grad_norm), optax.adam(step_size, eps=1e-5)
        )

    # Without early stopping every update takes steps_per_update steps, and the schedule
    # reads the update from optax's step count. Early stopping skips steps (Adam's count
    # and bias correction must not advance on them, as torch's Adam in CleanRL is not
    # stepped), so that count no longer tells the update: the step size is then set once
    # per update from the update count, as CleanRL sets it (`update_optimizer`).
    optimizer = optimizer_with(hp.learning_rate if early_stopping else learning_rate)

    def update_optimizer(update_count):
        if not early_stopping:
            return optimizer
        return optimizer_with(learning_rate(update_count * steps_per_update))

    key = random_streams.learner_key(config.seed)

    def init(init_key: jax.Array) -> PPOState:
        params = model.init(init_key)
        count = jnp.zeros((), jnp.int32)
        return learner.train_state(
            params, optimizer.init(params), count, normalizer.init(), value_normalization.init()
        )

    def statistics(state: PPOState):
        return state.normalization if normalizer.enabled else None

    def policy_params(state: PPOState):
        params = normalizer.policy_params(state.params, statistics(state))
        if not value_normalization.enabled:
            return params
        # The actors report unnormalised values, so they need the statistics too.
        return {"policy": params, "popart": state.popart}

    def act(params, carry, obs, keys: jax.Array):
        """carry, obs [B, ...], keys [B] -> carry, actions [B, ...], {"logprob": [B],
        "value": [B], or with PopArt the unnormalised value of every task [B, K]}."""
        popart_state = None
        if value_normalization.enabled:
            params, popart_state = params["policy"], params["popart"]
        params, obs = normalizer.network_inputs(params, obs)
        carry, policy_params, value = model.step(params, carry, obs)
        if popart_state is not None:
            # The actor cannot know the task of a column; the learner picks it (`update`).
            value = popart.all_unnormalized(popart_state, value)
        actions = policy.sample(policy_params, keys)
        return carry, actions, {"logprob": policy.logprob(policy_params, actions), "value": value}

    def act_greedy(params, carry, obs):
        """carry, obs [B, ...] -> carry, the most likely actions [B, ...] (evaluation)."""
        if value_normalization.enabled:
            params = params["policy"]
        params, obs = normalizer.network_inputs(params, obs)
        carry, policy_params, _ = model.step(params, carry, obs)
        return carry, policy.mode(policy_params)

    def env_major(x):
        # Env-major flattening keeps the sharded env axis leading, so no data moves
        # between devices (a time-major flatten would interleave devices' shards).
        return jnp.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:])

    def replay(params, batch):
        """Policy parameters and values of a minibatch, and its samples, flat env-major."""
        if sequences:
            initial_carry = jax.tree.map(lambda x: x[0], batch.pop("initial_carry"))
            outputs = model.sequence(params, initial_carry, batch["obs"], batch["starts"])
            policy_params, value = jax.tree.map(env_major, outputs)
            return policy_params, value, jax.tree.map(env_major, batch)
        batch = jax.tree.map(env_major, batch)
        _, policy_params, value = model.step(params, (), batch["obs"])
        return policy_params, value, batch

    def loss_fn(params, batch, clip_coef):
        """PPO loss on a minibatch: a dict of [t, B, ...] arrays, sharded along B.

        `clip_coef` is `agent.clip_coef` (a Python float) or, with `agent.anneal_clip`,
        this update's annealed value (a traced scalar).
        """
        policy_params, value, batch = replay(params, dict(batch))
        if value_normalization.enabled:  # Each sample's task's normalised value n_t(s).
            value = popart.select_task(value, batch["tasks"])
        weight = batch["valid"].astype(jnp.float32)
        logprob = policy.logprob(policy_params, batch["actions"])
        # The ratio is clipped around the proximal policy: the behaviour's (PPO) or, when
        # decoupled, the learner's at the update's start.
        logratio = logprob - batch["proximal_logprob" if decoupled else "logprob"]
        ratio = jnp.exp(logratio)

        advantages = batch["advantages"]
        if norm_adv == "minibatch":
            advantages = normalized_advantages(advantages, weight)
        if decoupled:
            pg_loss = decoupled_pg_loss(
                logprob,
                batch["logprob"],
                batch["proximal_logprob"],
                advantages,
                weight,
                clip_coef,
                log_ratio_max,
            )
        else:
            # rlax averages over every sample; zero advantages drop invalid samples from
            # the objective, and the ratio of counts turns the mean into a mean over
            # valid ones.
            num_valid = jnp.maximum(jnp.sum(weight), 1.0)
            valid_scale = weight.size / num_valid
            pg_loss = valid_scale * rlax.clipped_surrogate_pg_loss(
                ratio, advantages * weight, clip_coef
            )
        value_error = (value - batch["returns"]) ** 2
        if hp.clip_vloss:
            # baselines ppo2 clips the value with the policy's cliprange, annealed or not.
            clipped = batch["value"] + jnp.clip(value - batch["value"], -clip_coef, clip_coef)
            value_error = jnp.maximum(value_error, (clipped - batch["returns"]) ** 2)
        v_loss = 0.5 * learner.masked_mean(value_error, weight)
        entropy = learner.masked_mean(policy.entropy(policy_params), weight)
        loss = pg_loss - hp.ent_coef * entropy + hp.vf_coef * v_loss
        stats = {
            "policy_loss": pg_loss,
            "value_loss": v_loss,
            "entropy": entropy,
            "approx_kl": learner.masked_mean((ratio - 1.0) - logratio, weight),
            "clipfrac": learner.masked_mean(
                (jnp.abs(ratio - 1.0) > clip_coef).astype(jnp.float32), weight
            ),
        }
        return loss, stats

    def learner_policy_on(params, rollout: Rollout):
        """The learner's log-probabilities [T, B] of the rollout's actions and its values
        [T + 1, B] of the rollout's observations, as the update starts (no gradient)."""
        starts = episode_starts(rollout.valid)
        params = jax.lax.stop_gradient(params)
        policy_params, values = model.sequence(params, rollout.initial_carry, rollout.obs, starts)
        head = jax.tree.map(lambda x: x[:-1], policy_params)
        return policy.logprob(head, rollout.actions), values

    def plan_update(state: PPOState, rollout: Rollout) -> UpdatePlan:
        stats = statistics(state)
        # Rewards are scaled before GAE; observations are normalised with this version's
        # statistics (the behaviour's at policy_lag 0, so the first ratio is 1) and only
        # merged into them after the gradient steps, for the next version.
        rewards, stats = normalizer.rewards(stats, rollout)
        raw_obs = rollout.obs
        rollout = rollout.replace(obs=normalizer.observations(stats, raw_obs), rewards=rewards)
        behaviour_values = rollout.policy_outputs["value"]  # [T + 1, B] (PopArt: [T + 1, B, K])
        params, popart_state, popart_metrics = state.params, None, {}
        if value_normalization.enabled:
            column_tasks = value_normalization.tasks(rollout.env_ids)  # [B]
            behaviour_values = popart.select_task(behaviour_values, column_tasks[None])
        behaviour_logprob = rollout.policy_outputs["logprob"][:-1]
        if replays_rollout:
            learner_logprob, learner_values = learner_policy_on(state.params, rollout)
        if advantage_mode == "vtrace":
            targets = impala.vtrace(
                learner_values,
                jnp.exp(learner_logprob - behaviour_logprob),
                rollout.rewards,
                rollout.terminations,
                rollout.truncations,
                gamma=hp.gamma,
                vtrace_lambda=hp.gae_lambda,
                clip_rho_threshold=1.0,
                clip_pg_rho_threshold=1.0,
            )
            # The targets start from the learner's values: the value loss clips around them.
            behaviour_values = learner_values
            advantages, returns = targets.pg_advantage, targets.errors + learner_values[:-1]
        else:
            advantages, returns = advantages_and_returns(
                rollout, hp.gamma, hp.gae_lambda, behaviour_values
            )
        # Value targets: unnormalised, or normalised per task with PopArt's statistics.
        value_targets, stored_values = returns, behaviour_values[:-1]
        if value_normalization.enabled:
            # ART then POP before the gradient steps (van Hasselt et al. 2016, Alg. 1):
            # the statistics take in this rollout's returns, the value head is rescaled so
            # no unnormalised value changes, and the loss sees the new normalisation.
            sample_tasks = jnp.broadcast_to(column_tasks[None], rollout.valid.shape)
            moments = value_normalization.moments(returns, rollout.valid, sample_tasks)
            params, popart_state = value_normalization.update(params, state.popart, moments)
            value_targets = rlax.normalize(popart_state, returns, sample_tasks)
            stored_values = rlax.normalize(popart_state, stored_values, sample_tasks)
            # The advantage in the scale of the task's normalised values (Hessel et al.
            # 2019): the same for every task, whatever its rewards.
            advantages = advantages / popart_state.scale[sample_tasks]
            popart_metrics = value_normalization.metrics(popart_state)
        # The returns (value targets) keep the raw advantages.
        policy_advantages = advantages
        if norm_adv == "batch":
            policy_advantages = normalized_advantages(advantages, rollout.valid.astype(jnp.float32))
        samples = {
            "obs": jax.tree.map(lambda x: x[:-1], rollout.obs),
            "actions": rollout.actions,
            "valid": rollout.valid,
            "logprob": behaviour_logprob,
            "value": stored_values,
            "advantages": policy_advantages,
            "returns": value_targets,
        }
        if value_normalization.enabled:
            samples["tasks"] = sample_tasks
        if decoupled:
            samples["proximal_logprob"] = learner_logprob
        update_key = jax.random.fold_in(key, state.update_count)
        clip_coef = hp.clip_coef
        if hp.anneal_clip:  # baselines ppo2: cliprange = cliprange(frac), frac as the LR's.
            clip_coef = learner.annealed_per_update(
                hp.clip_coef, state.update_count, sizes.num_updates
            )
        if sequences:
            samples["starts"] = episode_starts(rollout.valid)[:-1]
            # [1, B, ...]: env_groups splits every leaf along axis 1.
            samples["initial_carry"] = jax.tree.map(lambda x: x[None], rollout.initial_carry)
            # [epochs * minibatches, T, B / M, ...]: whole env sequences, reshuffled per epoch.
            batches = jax.tree.map(
                lambda *xs: jnp.concatenate(xs),
                *[
                    minibatches.env_groups(
                        samples,
                        jax.random.fold_in(update_key, epoch),
                        rollout.env_ids,
                        hp.num_minibatches,
                    )
                    for epoch in range(hp.update_epochs)
                ],
            )

            def gathered_loss(params, batch):
                return loss_fn(params, batch, clip_coef)

            split = minibatches.env_micro_batches
        else:
            # Shuffle time indices, not the samples: each step gathers its own
            # (micro-)batch. [epochs * minibatches, T / M, B]: one leading axis to loop over.
            batches = minibatches.time_shuffled_epochs(
                rollout, update_key, hp.num_minibatches, hp.update_epochs
            )

            def gathered_loss(params, batch_time_index):
                return loss_fn(
                    params, minibatches.take_time_steps(samples, batch_time_index), clip_coef
                )

            split = minibatches.time_micro_batches

        early_stop = {}
        if early_stopping:
            # CleanRL ppo.py: after each epoch, stop if the approx_kl of its last minibatch
            # exceeds the target. That KL is a mean over the global minibatch (an
            # all-reduce), so the decision does not depend on the learner layout.
            early_stop = dict(
                stop_after_epoch=lambda stats: stats["approx_kl"] > hp.target_kl,
                minibatches_per_epoch=hp.num_minibatches,
                # Logged as CleanRL logs it: the last minibatch's, which stopped the epochs.
                last_step_stats=("approx_kl",),
            )
        pieces = update_pieces.stateless_minibatch_pieces(
            gathered_loss,
            update_optimizer(state.update_count),
            params,
            state.opt_state,
            batches,
            unroll,
            accumulation_steps=accumulation_steps,
            split=split,
            combine="mean",
            **early_stop,
        )

        def finish(params, opt_state, metrics, _):
            metrics["learning_rate"] = learning_rate(state.update_count * steps_per_update)
            if hp.anneal_clip:
                metrics["clip_coef"] = clip_coef
            metrics["explained_variance"] = learner.explained_variance(
                returns, behaviour_values[:-1], rollout.valid.astype(jnp.float32)
            )
            metrics.update(popart_metrics)
            observed = normalizer.observed(stats, jax.tree.map(lambda x: x[:-1], raw_obs))
            new_state = learner.train_state(
                params, opt_state, state.update_count + 1, observed, popart_state
            )
            return new_state, metrics

        return pieces.plan(finish)

    return Agent.with_carry(
        init=init,
        act=act,
        update=Agent.update_from_plan(plan_update),
        policy_params=policy_params,
        act_greedy=act_greedy,
        initial_carry=model.initial_carry,
        restart_envs=learner.restart_envs,
        plan_update=plan_update,
    )
