"""The hyperparameter defaults of the built-in agents: the `agent` section of a config.

`sebulba.agents.ppo.get_config` and `sebulba.agents.impala.get_config` are these
functions. They live apart from the agents' JAX code so that a config file loads, and a
bad config fails, before JAX is imported (a second or more of start-up).
"""

from __future__ import annotations

import ml_collections


def ppo_config() -> ml_collections.ConfigDict:
    """The `agent` section of a PPO config (baselines ppo2 Atari defaults)."""
    config = ml_collections.ConfigDict()
    config.name = "ppo"  # Agent to train: built-in name or dotted module path.
    config.num_steps = 128  # Steps per env per rollout (T).
    config.network = "mlp"  # mlp | nature_cnn | impala_resnet | multi_input.
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
    config.clip_vloss = True  # Clip the value loss around the behaviour values.
    config.ent_coef = 0.01  # Entropy bonus coefficient.
    config.vf_coef = 0.5  # Value loss coefficient.
    config.max_grad_norm = 0.5  # Global gradient-norm clip.
    config.conv_init = "orthogonal"  # CNN kernels: orthogonal (baselines) | lecun_normal.
    # auto: unrolled for convolutional networks on CPU learners, where XLA runs conv
    # gradients inside a rolled scan 20-30x slower; rolled lax.scan elsewhere (an MLP
    # gains little from unrolling and compiles many times longer).
    config.minibatch_loop = "auto"  # auto | scan | unrolled.
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


def impala_config() -> ml_collections.ConfigDict:
    """The `agent` section of an IMPALA config (Cleanba paper defaults)."""
    config = ml_collections.ConfigDict()
    config.name = "impala"  # Agent to train: built-in name or dotted module path.
    config.num_steps = 20  # Steps per env per rollout (T); V-trace runs over all of them.
    config.network = "mlp"  # mlp | nature_cnn | impala_resnet | multi_input.
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
    # auto: unrolled for convolutional networks on CPU learners, where XLA runs conv
    # gradients inside a rolled scan 20-30x slower; rolled lax.scan elsewhere (an MLP
    # gains little from unrolling and compiles many times longer).
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
