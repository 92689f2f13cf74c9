"""The hyperparameter defaults and ranges of the built-in agents (the `agent` section).

`sebulba.agents.ppo.get_config`, `sebulba.agents.impala.get_config`,
`sebulba.agents.pqn.get_config` (and DQN's and SAC's) are these functions, and their
`HYPERPARAMETER_RANGES` these ranges. They live apart from the agents' JAX code so that a
config file loads, and a bad value fails, before JAX is imported (seconds of start-up).
"""

from __future__ import annotations

import math

import ml_collections
from ml_collections import config_dict

from sebulba.config.validation import (
    NON_NEGATIVE,
    POSITIVE,
    POSITIVE_INT,
    UNIT_INTERVAL,
    Range,
    check_ranges,
)


class _NoneOrRange(Range):
    """A Range that also accepts None, for a feature that None switches off."""

    def __contains__(self, value) -> bool:
        return value is None or super().__contains__(value)

    def __str__(self) -> str:
        return f"None or {super().__str__()}"


class _Boolean(Range):
    """True or False only (not 0 or 1), checked with the ranges so that the CLI refuses
    a bad value before JAX is imported."""

    def __contains__(self, value) -> bool:
        return isinstance(value, bool)

    def __str__(self) -> str:
        return "a bool (True or False)"


class _NoneOrFinite(Range):
    """None or any finite number (negative too)."""

    def __contains__(self, value) -> bool:
        return value is None or (super().__contains__(value) and math.isfinite(value))

    def __str__(self) -> str:
        return "None or a finite number"


NONE_OR_POSITIVE = _NoneOrRange(0, low_open=True)
NONE_OR_POSITIVE_INT = _NoneOrRange(1, integer=True)
NONE_OR_FINITE = _NoneOrFinite()
BOOLEAN = _Boolean()

# The interval of every numeric hyperparameter of each agent (and PPO's checked options).
PPO_RANGES = {
    "mask_actions": BOOLEAN,
    "learning_rate": POSITIVE,
    "gamma": UNIT_INTERVAL,
    "gae_lambda": UNIT_INTERVAL,
    "num_minibatches": POSITIVE_INT,
    "update_epochs": POSITIVE_INT,
    "clip_coef": POSITIVE,
    "anneal_clip": BOOLEAN,
    "ent_coef": NON_NEGATIVE,
    "vf_coef": NON_NEGATIVE,
    "max_grad_norm": POSITIVE,
    "target_kl": NONE_OR_POSITIVE,
    "lstm_size": POSITIVE_INT,
    "observation_clip": POSITIVE,
    "reward_clip": POSITIVE,
    # A cap below 1 would clip every on-policy sample's weight of 1.
    "importance_ratio_max": Range(1, high_open=True),
}

IMPALA_RANGES = {
    "mask_actions": BOOLEAN,
    "learning_rate": POSITIVE,
    "gamma": UNIT_INTERVAL,
    "vtrace_lambda": UNIT_INTERVAL,
    "clip_rho_threshold": POSITIVE,
    "clip_pg_rho_threshold": POSITIVE,
    "num_minibatches": POSITIVE_INT,
    "ent_coef": NON_NEGATIVE,
    "vf_coef": NON_NEGATIVE,
    "max_grad_norm": POSITIVE,
    # Decay 1 would freeze the squared-gradient average at its initial zero.
    "rmsprop_decay": Range(0, 1, high_open=True),
    # Outside the square root, eps alone keeps the step finite where the average is 0.
    "rmsprop_eps": POSITIVE,
    "lstm_size": POSITIVE_INT,
    "observation_clip": POSITIVE,
    "reward_clip": POSITIVE,
}

PQN_RANGES = {
    "learning_rate": POSITIVE,
    "anneal_lr": BOOLEAN,
    "max_grad_norm": POSITIVE,
    "gamma": UNIT_INTERVAL,
    "q_lambda": UNIT_INTERVAL,
    "num_minibatches": POSITIVE_INT,
    "update_epochs": POSITIVE_INT,
    "epsilon_start": UNIT_INTERVAL,
    "epsilon_finish": UNIT_INTERVAL,
    # A decay over no update at all would leave epsilon at its start for the whole run.
    "exploration_fraction": Range(0, 1, low_open=True),
    "reward_scale": POSITIVE,
}

DQN_RANGES = {
    "learning_rate": POSITIVE,
    "gamma": UNIT_INTERVAL,
    "buffer_size": POSITIVE_INT,
    "batch_size": POSITIVE_INT,
    "replay_ratio": POSITIVE,
    "learning_starts": Range(0, integer=True),
    "target_network_frequency": POSITIVE_INT,
    "tau": Range(0, 1, low_open=True),
    "start_e": UNIT_INTERVAL,
    "end_e": UNIT_INTERVAL,
    "exploration_fraction": UNIT_INTERVAL,
    "n_step": POSITIVE_INT,
    "double_q": BOOLEAN,
}

SAC_RANGES = {
    "policy_learning_rate": POSITIVE,
    "q_learning_rate": POSITIVE,
    "alpha_learning_rate": POSITIVE,
    "gamma": UNIT_INTERVAL,
    "tau": Range(0, 1, low_open=True),
    "buffer_size": POSITIVE_INT,
    "batch_size": POSITIVE_INT,
    "replay_ratio": POSITIVE,
    "learning_starts": Range(0, integer=True),
    "policy_frequency": POSITIVE_INT,
    "target_network_frequency": POSITIVE_INT,
    "alpha": POSITIVE,
    "autotune": BOOLEAN,
    # Entropies of continuous distributions may be negative.
    "target_entropy": NONE_OR_FINITE,
}

MUZERO_RANGES = {
    "learning_rate": POSITIVE,
    "anneal_lr": BOOLEAN,
    "max_grad_norm": POSITIVE,
    "gamma": UNIT_INTERVAL,
    "latent_size": POSITIVE_INT,
    "support_size": POSITIVE_INT,
    "unroll_steps": POSITIVE_INT,
    "td_steps": POSITIVE_INT,
    "num_simulations": POSITIVE_INT,
    "max_num_considered_actions": POSITIVE_INT,
    "gumbel_scale": NON_NEGATIVE,
    "dirichlet_fraction": UNIT_INTERVAL,
    "dirichlet_alpha": POSITIVE,
    "value_loss_coef": NON_NEGATIVE,
    "reanalyse_fraction": UNIT_INTERVAL,
    "priority_exponent": NON_NEGATIVE,
    "priority_importance": UNIT_INTERVAL,
    "buffer_size": POSITIVE_INT,
    "batch_size": POSITIVE_INT,
    "replay_ratio": POSITIVE,
    "learning_starts": Range(0, integer=True),
    "max_depth": NONE_OR_POSITIVE_INT,
}

ALPHAZERO_RANGES = {
    "learning_rate": POSITIVE,
    "max_grad_norm": POSITIVE,
    "num_minibatches": POSITIVE_INT,
    "update_epochs": POSITIVE_INT,
    "value_loss_coef": NON_NEGATIVE,
    "num_simulations": POSITIVE_INT,
    "max_num_considered_actions": POSITIVE_INT,
    "gumbel_scale": NON_NEGATIVE,
    "dirichlet_fraction": UNIT_INTERVAL,
    "dirichlet_alpha": POSITIVE,
    "max_depth": NONE_OR_POSITIVE_INT,
}

_RANGES = {
    "ppo": PPO_RANGES,
    "impala": IMPALA_RANGES,
    "pqn": PQN_RANGES,
    "dqn": DQN_RANGES,
    "sac": SAC_RANGES,
    "muzero": MUZERO_RANGES,
    "alphazero": ALPHAZERO_RANGES,
}


def check_builtin_ranges(agent: ml_collections.ConfigDict) -> None:
    """Checks a built-in agent's hyperparameter ranges (others: at `make`, by their agent).

    Raises:
      ConfigError: for the first value outside its range, naming the field.
    """
    ranges = _RANGES.get(agent.name)
    # A section built for another agent is refused later, naming what it lacks.
    if ranges is not None and set(ranges) <= set(agent):
        check_ranges(agent, "agent", ranges)


def ppo_config() -> ml_collections.ConfigDict:
    """The `agent` section of a PPO config (baselines ppo2 Atari defaults)."""
    config = ml_collections.ConfigDict()
    config.name = "ppo"  # Agent to train: built-in name or dotted module path.
    config.num_steps = 128  # Steps per env per rollout (T).
    config.network = "mlp"  # mlp | nature_cnn | impala_resnet | multi_input | minatar.
    config.activation = "tanh"  # tanh | relu: actor and critic MLPs (mlp, minatar, multi_input).
    config.hidden_sizes = (64, 64)  # Actor and critic MLP widths (mlp, minatar, multi_input).
    config.core = "none"  # none | lstm: an LSTM between the network's torso and its heads.
    config.lstm_size = 128  # LSTM units (agent.core="lstm"; CleanRL ppo_atari_lstm: 128).
    config.learning_rate = 2.5e-4  # Adam step size at the first update.
    config.anneal_lr = True  # Decay the step size linearly to 0 over the updates.
    config.gamma = 0.99  # Discount factor.
    config.gae_lambda = 0.95  # GAE lambda.
    # Must divide num_steps; with core "lstm" (whole env sequences) the envs per device.
    config.num_minibatches = 4  # Minibatches per epoch.
    config.update_epochs = 4  # Passes over each rollout.
    config.norm_adv = "minibatch"  # minibatch (baselines) | batch (whole rollout) | none.
    config.clip_coef = 0.1  # Surrogate clipping epsilon.
    config.anneal_clip = False  # Decay clip_coef (policy and value clip) linearly to 0 like the LR.
    config.clip_vloss = True  # Clip the value loss around the behaviour values.
    config.proximal_policy = "behaviour"  # behaviour (PPO) | learner (decoupled PPO, lag > 1).
    config.importance_ratio_max = 100.0  # Decoupled PPO: cap on pi/behaviour (PPO-EWMA's).
    config.advantages = "gae"  # gae (behaviour values) | vtrace (toward the learner's policy).
    config.ent_coef = 0.01  # Entropy bonus coefficient.
    config.vf_coef = 0.5  # Value loss coefficient.
    config.max_grad_norm = 0.5  # Global gradient-norm clip.
    # A float placeholder: None by default, and --config.agent.target_kl=0.02 still parses.
    config.target_kl = config_dict.placeholder(float)  # Stop epochs at approx_kl > it (None: off).
    config.conv_init = "orthogonal"  # CNN kernels: orthogonal (baselines) | lecun_normal.
    config.max_pool = "auto"  # auto (slices: CPU, deterministic GPU) | slices | reduce_window.
    config.mask_actions = True  # Illegal actions (the env's action mask) get probability 0.
    # auto: rolled lax.scan, except unrolled on CPU learners for networks with strided
    # convolutions (the Nature CNN's run ~9x slower in a loop on CPUs). Rolled, the stride-1
    # CNNs (MinAtar's, the ResNet) run about as fast and compile in seconds, not minutes
    # (docs/benchmarks.md, "Compiling"). An MLP compiles far longer unrolled.
    config.minibatch_loop = "auto"  # auto | unrolled | scan (CPU, Nature CNN: ~9x slower).
    # Memory falls with it. Advantage normalisation and the means over valid samples are
    # then per micro-batch (exact split only for a plain mean: norm_adv "none", all valid).
    config.gradient_accumulation_steps = 1  # Micro-batches per minibatch (gradients averaged).
    config.normalize_observations = False  # Running mean/std normalisation of float obs.
    config.normalize_rewards = False  # Scale rewards by the running std of discounted returns.
    config.observation_clip = 10.0  # Normalised observations are clipped to +-this.
    config.reward_clip = 10.0  # Scaled rewards are clipped to +-this.
    config.popart = False  # PopArt: value targets normalised per task (docs/agents.md).
    config.popart_step_size = 3e-4  # PopArt beta: step of each target on its task's statistics.
    config.popart_scale_lb = 1e-4  # PopArt: lower bound of each task's value scale.
    config.popart_scale_ub = 1e6  # PopArt: upper bound of each task's value scale.
    return config


def cleanrl_ppo_config() -> ml_collections.ConfigDict:
    """The `agent` section of CleanRL `ppo.py` (its classic-control PPO): the baselines
    defaults of `ppo_config` (128 steps, Adam 2.5e-4 annealed to 0, gamma 0.99, GAE lambda
    0.95, 4 minibatches x 4 epochs, entropy 0.01) with the surrogate clipped at 0.2."""
    config = ppo_config()
    config.clip_coef = 0.2  # baselines' Atari setting: 0.1.
    return config


def impala_config() -> ml_collections.ConfigDict:
    """The `agent` section of an IMPALA config (Cleanba paper defaults)."""
    config = ml_collections.ConfigDict()
    config.name = "impala"  # Agent to train: built-in name or dotted module path.
    config.num_steps = 20  # Steps per env per rollout (T); V-trace runs over all of them.
    config.network = "mlp"  # mlp | nature_cnn | impala_resnet | multi_input | minatar.
    config.activation = "tanh"  # tanh | relu: actor and critic MLPs (mlp, minatar, multi_input).
    config.core = "none"  # none | lstm: an LSTM between the network's torso and its heads.
    config.lstm_size = 256  # LSTM units (agent.core="lstm"; the IMPALA paper's: 256).
    config.learning_rate = 6e-4  # RMSProp step size at the first update.
    config.anneal_lr = True  # Decay the step size linearly to 0 over the updates.
    config.gamma = 0.99  # Discount factor.
    config.vtrace_lambda = 1.0  # V-trace lambda (1: plain V-trace; 0 cuts every trace).
    config.clip_rho_threshold = 1.0  # rho-bar: clips importance ratios in the value targets.
    config.clip_pg_rho_threshold = 1.0  # pg-rho-bar: clips importance ratios in the pg advantage.
    config.num_minibatches = 4  # Minibatches per update, whole sequences split along envs.
    config.ent_coef = 0.01  # Entropy bonus coefficient.
    config.vf_coef = 0.5  # Value loss coefficient.
    config.max_grad_norm = 40.0  # Global gradient-norm clip.
    config.rmsprop_decay = 0.99  # RMSProp decay of the squared-gradient average.
    config.rmsprop_eps = 0.01  # RMSProp epsilon, added outside the square root.
    config.conv_init = "lecun_normal"  # CNN kernels: lecun_normal (Cleanba) | orthogonal.
    config.max_pool = "auto"  # auto (slices: CPU, deterministic GPU) | slices | reduce_window.
    config.mask_actions = True  # Illegal actions (the env's action mask) get probability 0.
    # auto: rolled lax.scan, except unrolled on CPU learners for networks with strided
    # convolutions (the Nature CNN's run ~9x slower in a loop on CPUs). Rolled, the stride-1
    # CNNs (MinAtar's, the ResNet) run about as fast and compile in seconds, not minutes
    # (docs/benchmarks.md, "Compiling"). An MLP compiles far longer unrolled.
    config.minibatch_loop = "auto"  # auto | scan | unrolled.
    # Every k-th env column of a minibatch; the loss is a sum, so the summed gradients equal
    # the unsplit minibatch's. Memory falls with it.
    config.gradient_accumulation_steps = 1  # Micro-batches per minibatch (gradients summed).
    config.normalize_observations = False  # Running mean/std normalisation of float obs.
    config.normalize_rewards = False  # Scale rewards by the running std of discounted returns.
    config.observation_clip = 10.0  # Normalised observations are clipped to +-this.
    config.reward_clip = 10.0  # Scaled rewards are clipped to +-this.
    config.popart = False  # PopArt: value targets normalised per task (docs/agents.md).
    config.popart_step_size = 3e-4  # PopArt beta: step of each target on its task's statistics.
    config.popart_scale_lb = 1e-4  # PopArt: lower bound of each task's value scale.
    config.popart_scale_ub = 1e6  # PopArt: upper bound of each task's value scale.
    return config


def pqn_config() -> ml_collections.ConfigDict:
    """The `agent` section of a PQN config (purejaxql's Atari settings)."""
    config = ml_collections.ConfigDict()
    config.name = "pqn"  # Agent to train: built-in name or dotted module path.
    config.num_steps = 32  # Steps per env per rollout (T).
    config.network = "mlp"  # Q-network torso: mlp | nature_cnn | impala_resnet | minatar.
    config.norm = "layer_norm"  # After every hidden layer: layer_norm (PQN) | none.
    config.hidden_sizes = (128, 128)  # Widths of the ReLU layers before the Q head (mlp, minatar).
    config.conv_init = "orthogonal"  # CNN kernels: orthogonal | lecun_normal.
    config.max_pool = "auto"  # auto (slices: CPU, deterministic GPU) | slices | reduce_window.
    config.learning_rate = 2.5e-4  # RAdam step size at the first gradient step.
    config.anneal_lr = False  # Decay the step size linearly to 0 over every gradient step.
    config.max_grad_norm = 10.0  # Global gradient-norm clip.
    config.gamma = 0.99  # Discount factor.
    config.q_lambda = 0.65  # lambda of the Q(lambda) targets (0: one-step Q-learning).
    config.num_minibatches = 32  # Minibatches per epoch; must divide num_steps.
    config.update_epochs = 2  # Passes over each rollout.
    config.epsilon_start = 1.0  # Exploration epsilon of policy version 1.
    config.epsilon_finish = 0.001  # Epsilon once the decay is over.
    config.exploration_fraction = 0.1  # Fraction of the updates over which epsilon decays.
    config.reward_scale = 1.0  # Rewards are multiplied by this for the targets.
    # learner: its network re-evaluates the rollout at the update's start; behaviour: the
    # actors' Q-values, stored in the rollout as purejaxql stores them (one forward pass
    # fewer; the same values under policy lag 0).
    config.q_targets = "learner"  # Q-values of the targets: learner | behaviour (stored).
    # auto: rolled lax.scan, except unrolled on CPU learners for networks with strided
    # convolutions (the Nature CNN's run ~9x slower in a loop on CPUs). Rolled, the stride-1
    # CNNs (MinAtar's, the ResNet) run about as fast and compile in seconds, not minutes
    # (docs/benchmarks.md, "Compiling"). An MLP compiles far longer unrolled.
    config.minibatch_loop = "auto"  # auto | scan | unrolled.
    return config


def dqn_config() -> ml_collections.ConfigDict:
    """The `agent` section of a DQN config (CleanRL dqn_jax's CartPole settings, with
    double Q)."""
    config = ml_collections.ConfigDict()
    config.name = "dqn"  # Agent to train: built-in name or dotted module path.
    config.num_steps = 10  # Steps per env per rollout (T), added to the replay buffer.
    config.network = "mlp"  # mlp | nature_cnn | impala_resnet | multi_input | minatar.
    config.activation = "tanh"  # tanh | relu: actor and critic MLPs (mlp, minatar, multi_input).
    config.conv_init = "lecun_normal"  # CNN kernels: lecun_normal (flax, CleanRL) | orthogonal.
    config.max_pool = "auto"  # auto (slices: CPU, deterministic GPU) | slices | reduce_window.
    config.learning_rate = 2.5e-4  # Adam step size.
    config.gamma = 0.99  # Discount factor.
    config.buffer_size = 10_000  # Replay capacity in transitions, over all envs.
    config.batch_size = 128  # Transitions per gradient step, over all envs.
    config.replay_ratio = 0.1  # Gradient steps per env step (CleanRL: 1 / train_frequency).
    config.learning_starts = 10_000  # Env steps before the first gradient step.
    config.target_network_frequency = 50  # Gradient steps between target-network updates.
    config.tau = 1.0  # Target update: tau * online + (1 - tau) * target (1: a copy).
    config.start_e = 1.0  # Epsilon of the first version.
    config.end_e = 0.05  # Epsilon after the decay.
    config.exploration_fraction = 0.5  # Fraction of total_timesteps over which epsilon decays.
    config.n_step = 1  # Steps of discounted rewards before bootstrapping (n-step returns).
    config.double_q = True  # The online network picks the bootstrap action (van Hasselt 2016).
    config.loss = "mse"  # mse (CleanRL's squared error) | huber (Mnih et al. 2015's clipping).
    return config


def sac_config() -> ml_collections.ConfigDict:
    """The `agent` section of a SAC config (CleanRL sac_continuous_action's settings)."""
    config = ml_collections.ConfigDict()
    config.name = "sac"  # Agent to train: built-in name or dotted module path.
    config.num_steps = 8  # Steps per env per rollout (T), added to the replay buffer.
    config.network = "mlp"  # mlp: vector observations (the actor's and critics' torso).
    config.hidden_sizes = (256, 256)  # Widths of the ReLU layers of the actor and each critic.
    config.policy_learning_rate = 3e-4  # Adam step size of the actor.
    config.q_learning_rate = 1e-3  # Adam step size of the twin critics.
    config.alpha_learning_rate = 1e-3  # Adam step size of log(alpha) (CleanRL: q_lr).
    config.gamma = 0.99  # Discount factor.
    config.tau = 0.005  # Target critics: tau * online + (1 - tau) * target.
    config.buffer_size = 1_000_000  # Replay capacity in transitions, over all envs.
    config.batch_size = 256  # Transitions per gradient step, over all envs.
    config.replay_ratio = 1.0  # Critic gradient steps per env step (CleanRL: 1).
    config.learning_starts = 5_000  # Env steps of uniform random actions before learning.
    config.policy_frequency = 2  # Every this many critic steps, this many actor steps.
    config.target_network_frequency = 1  # Critic gradient steps between target updates.
    config.alpha = 0.2  # Entropy coefficient when autotune is False.
    config.autotune = True  # Learn alpha (from 1, CleanRL's log alpha 0) towards target_entropy.
    # A float placeholder: None by default, and --config.agent.target_entropy=-3.0 parses.
    config.target_entropy = config_dict.placeholder(float)  # None: -(action dimensions).
    return config


def muzero_config() -> ml_collections.ConfigDict:
    """The `agent` section of a MuZero config (Gumbel MuZero, the paper's loss)."""
    config = ml_collections.ConfigDict()
    config.name = "muzero"  # Agent to train: built-in name or dotted module path.
    config.num_steps = 10  # Steps per env per rollout (T), added to the replay buffer.
    config.network = "mlp"  # Representation torso: mlp | minatar | nature_cnn | impala_resnet.
    config.conv_init = "orthogonal"  # CNN kernels: orthogonal | lecun_normal.
    config.max_pool = "auto"  # auto (slices: CPU, deterministic GPU) | slices | reduce_window.
    config.hidden_sizes = (64, 64)  # Representation: ReLU layers after the torso.
    config.latent_size = 64  # Width of the hidden state s (scaled to [0, 1]).
    config.model_hidden_sizes = (64, 64)  # Dynamics' and prediction's ReLU layers.
    config.support_size = 10  # Values and rewards: 2S + 1 bins over h(x) in [-S, S].
    config.learning_rate = 1e-3  # Adam step size.
    config.anneal_lr = False  # Decay the step size linearly to 0 over the gradient steps.
    config.max_grad_norm = 5.0  # Global gradient-norm clip.
    config.gamma = 0.99  # Discount factor (the search's and the targets').
    config.unroll_steps = 5  # K: dynamics steps unrolled per sample (the paper's 5).
    config.td_steps = 10  # n: steps of rewards before the value target bootstraps.
    config.value_loss_coef = 1.0  # Weight of the value loss (MuZero Reanalyse's: 0.25).
    config.value_bootstrap = "network"  # Value targets bootstrap from: network | search.
    config.reanalyse_fraction = 0.0  # Reanalyse: share of windows given fresh search targets.
    config.priority_exponent = 0.0  # Prioritised replay: P ~ priority**alpha (0: uniform).
    config.priority_importance = 1.0  # Prioritised replay: importance weights (N P)**-beta.
    config.search = "gumbel"  # gumbel (mctx.gumbel_muzero_policy) | muzero (pUCT).
    config.num_simulations = 16  # Simulations per search.
    config.max_depth = config_dict.placeholder(int)  # Search depth limit (None: none).
    config.max_num_considered_actions = 16  # Gumbel: root actions sampled without replacement.
    config.gumbel_scale = 1.0  # Gumbel: noise scale of the root sampling (0: deterministic).
    config.dirichlet_fraction = 0.25  # muzero: prior mixed with Dirichlet noise at the root.
    config.dirichlet_alpha = 0.3  # muzero: the root noise's concentration.
    config.buffer_size = 100_000  # Replay capacity in steps, over all envs.
    config.batch_size = 256  # Windows per gradient step, over all envs.
    config.replay_ratio = 0.1  # Gradient steps per env step.
    config.learning_starts = 1_000  # Env steps before the first gradient step.
    return config


def alphazero_config() -> ml_collections.ConfigDict:
    """The `agent` section of an AlphaZero config (Pgx's AlphaZero example's search and loss)."""
    config = ml_collections.ConfigDict()
    config.name = "alphazero"  # Agent to train: built-in name or dotted module path.
    config.num_steps = 32  # Moves per env per rollout (T); learned from once, then dropped.
    config.network = "mlp"  # Torso on the board planes: mlp | minatar.
    config.conv_init = "orthogonal"  # CNN kernels: orthogonal | lecun_normal.
    config.max_pool = "auto"  # auto (slices: CPU, deterministic GPU) | slices | reduce_window.
    config.hidden_sizes = (128, 128)  # ReLU layers after the torso, before both heads.
    config.learning_rate = 1e-3  # Adam step size (Pgx's example).
    config.max_grad_norm = 5.0  # Global gradient-norm clip.
    config.num_minibatches = 4  # Minibatches per epoch; must divide num_steps.
    config.update_epochs = 1  # Passes over each rollout (Pgx's example: one).
    config.value_loss_coef = 1.0  # Weight of the value loss, 0.5 (v - z)^2.
    config.search = "gumbel"  # gumbel (mctx.gumbel_muzero_policy) | muzero (pUCT).
    config.num_simulations = 32  # Simulations per search (Pgx's example: 32).
    config.max_depth = config_dict.placeholder(int)  # Search depth limit (None: none).
    config.max_num_considered_actions = 16  # Gumbel: root actions sampled without replacement.
    config.gumbel_scale = 1.0  # Gumbel: noise scale of the root sampling (0: deterministic).
    config.dirichlet_fraction = 0.25  # muzero: prior mixed with Dirichlet noise at the root.
    config.dirichlet_alpha = 0.3  # muzero: the root noise's concentration.
    # auto: rolled lax.scan, except unrolled on CPU learners for strided convolutions.
    config.minibatch_loop = "auto"  # auto | scan | unrolled.
    return config


_CONFIGS = {
    "ppo": ppo_config,
    "impala": impala_config,
    "pqn": pqn_config,
    "dqn": dqn_config,
    "sac": sac_config,
    "muzero": muzero_config,
    "alphazero": alphazero_config,
}


def builtin_section(agent: ml_collections.ConfigDict) -> bool:
    """Whether `agent` is a whole section of the built-in agent it names: one built for
    another agent (or a plugin) is left to `make`, which names what it lacks."""
    defaults = _CONFIGS.get(agent.name)
    return defaults is not None and set(defaults()) <= set(agent)


def declared_range(agent_name: str, key: str) -> Range | None:
    """The interval a built-in agent declares for `key` (None: a custom agent, or a key
    without one); PBT keeps a mutated hyperparameter inside it."""
    return _RANGES.get(agent_name, {}).get(key)
