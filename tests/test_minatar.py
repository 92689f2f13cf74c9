"""MinAtar: the "minatar" network, the "mlp" on MinAtar's grids, and configs/ppo_minatar.py
(PPO on gymnax's MinAtar, with pgx's settings or, `:purejaxrl`, PureJaxRL's, or, `:cpu`,
gymnax-blines')."""

import math

import jax
import jax.numpy as jnp
import pytest

from sebulba import train
from sebulba.agents import dqn, impala, ppo
from sebulba.agents.api import ArraySpec, Discrete, EnvSpec
from sebulba.agents.networks import check_network_fits, make_network
from sebulba.config import base_config
from sebulba.config.sizes import derive_sizes
from sebulba.errors import ConfigError
from tests.helpers import load_config, read_metrics, read_summary

GAMES = ("Breakout", "Asterix", "Freeway", "SpaceInvaders", "Seaquest")


def test_the_minatar_network_refuses_a_vector_in_one_line_and_takes_any_channel_count():
    vector = EnvSpec("gymnax:CartPole-v1", ArraySpec((4,), "float32"), Discrete(2))
    with pytest.raises(ConfigError) as refused:
        check_network_fits("minatar", vector)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("agent.network 'minatar' takes channels-last grids [H, W, C]")
    assert message.endswith("observes float32 [4]: use agent.network=mlp or multi_input")
    # Atari's frame stacks are channels first: the one rank-3 layout a shape tells apart.
    frames = EnvSpec("Breakout-v5", ArraySpec((4, 84, 84), "uint8"), Discrete(18))
    with pytest.raises(ConfigError, match="agent.network 'minatar' takes"):
        check_network_fits("minatar", frames)
    for channels in (4, 7, 10):  # Breakout's, Freeway's and Seaquest's grids.
        spec = ArraySpec((10, 10, channels), "float32")
        check_network_fits("minatar", EnvSpec("gymnax:MinAtar", spec, Discrete(3)))
        network = make_network("minatar", Discrete(3), observation=spec)
        # Shapes only (nothing runs): the test stays seconds long under a busy CPU.
        params = jax.eval_shape(network.init, jax.random.key(0), jnp.zeros((1, 10, 10, channels)))
        shapes = [leaf.shape for leaf in jax.tree.leaves(params)]
        # One 2x2 convolution over every channel; pooled to 5 x 5 x 32 before the dense.
        assert [shape for shape in shapes if len(shape) == 4] == [(2, 2, channels, 32)]
        assert (5 * 5 * 32, 64) in shapes


def test_every_game_variant_names_its_gymnax_id():
    for game in GAMES:
        assert load_config("ppo_minatar", game).env.id == f"gymnax:{game}-MinAtar"
    assert load_config("ppo_minatar").env.id == "gymnax:Breakout-MinAtar"
    with pytest.raises(ValueError, match="unknown variant 'Pong' of ppo_minatar .*Breakout"):
        load_config("ppo_minatar", "Pong")


def test_the_breakout_smoke_run_trains_with_finite_losses(tmp_path):
    config = load_config("ppo_minatar", "Breakout,smoke")
    config.log.tensorboard = False
    train.train(config, str(tmp_path))
    summary = read_summary(str(tmp_path))
    assert summary["env_id"] == "gymnax:Breakout-MinAtar" and summary["policy_lag"] == 0
    assert summary["updates"] == 4 and summary["global_step"] == 8 * 16 * 4
    losses = [v for m in read_metrics(str(tmp_path)) for k, v in m.items() if "loss" in k]
    assert losses and all(math.isfinite(v) for v in losses)


BREAKOUT_GRID = ArraySpec((10, 10, 4), "bool")
BREAKOUT_MINATAR = EnvSpec("gymnax:Breakout-MinAtar", BREAKOUT_GRID, Discrete(3))


def test_the_mlp_flattens_a_minatar_grid_and_relu_changes_its_output():
    check_network_fits("mlp", BREAKOUT_MINATAR)
    obs = jax.random.bernoulli(jax.random.key(1), 0.3, (2, 10, 10, 4))
    tanh = make_network("mlp", Discrete(3), observation=BREAKOUT_GRID)
    relu = make_network("mlp", Discrete(3), observation=BREAKOUT_GRID, activation="relu")
    params = tanh.init(jax.random.key(0), obs)
    # The activation has no parameters: one tree serves both networks.
    assert jax.tree.structure(params) == jax.tree.structure(relu.init(jax.random.key(0), obs))
    shapes = [leaf.shape for leaf in jax.tree.leaves(params)]
    assert shapes.count((10 * 10 * 4, 64)) == 2  # The actor's and the critic's first layer.
    tanh_logits, tanh_value = tanh.apply(params, obs)
    relu_logits, relu_value = relu.apply(params, obs)
    assert relu_logits.shape == (2, 3) and relu_value.shape == (2,)
    assert not jnp.allclose(tanh_logits, relu_logits)
    assert not jnp.allclose(tanh_value, relu_value)


@pytest.mark.parametrize("agent_module", [ppo, impala, dqn])
def test_an_unknown_activation_is_refused_in_one_line_naming_the_field(agent_module):
    config = base_config(agent_module.get_config())
    config.agent.activation = "gelu"
    with pytest.raises(ConfigError) as refused:
        agent_module.make(config, BREAKOUT_MINATAR, derive_sizes(config))
    assert str(refused.value) == "agent.activation 'gelu' must be one of tanh, relu"


def test_relu_is_refused_for_a_network_without_actor_and_critic_mlps():
    with pytest.raises(ConfigError) as refused:
        make_network("nature_cnn", Discrete(3), activation="relu")
    assert str(refused.value) == (
        "agent.activation 'relu' needs actor and critic MLPs, which agent.network "
        "'nature_cnn' lacks: use one of minatar, mlp, multi_input"
    )


def _smoke_run_trains_breakout(variant: str, tmp_path) -> None:
    config = load_config("ppo_minatar", variant)
    config.log.tensorboard = False
    train.train(config, str(tmp_path))
    summary = read_summary(str(tmp_path))
    assert summary["env_id"] == "gymnax:Breakout-MinAtar" and summary["updates"] == 4
    losses = [v for m in read_metrics(str(tmp_path)) for k, v in m.items() if "loss" in k]
    assert losses and all(math.isfinite(v) for v in losses)


def test_the_purejaxrl_variant_has_purejaxrls_settings_and_its_smoke_run_trains(tmp_path):
    config = load_config("ppo_minatar", "SpaceInvaders,purejaxrl")
    agent = config.agent
    assert config.env.id == "gymnax:SpaceInvaders-MinAtar" and config.env.num_envs == 64
    assert (agent.network, agent.activation, agent.learning_rate) == ("mlp", "relu", 5e-3)
    assert (agent.num_steps, agent.num_minibatches, agent.update_epochs) == (128, 8, 4)
    assert agent.anneal_lr and config.total_timesteps == 10_000_000
    # The pgx settings keep their network.
    assert load_config("ppo_minatar", "Breakout").agent.activation == "tanh"

    _smoke_run_trains_breakout("Breakout,purejaxrl,smoke", tmp_path)


def test_the_default_takes_4x_pgxs_gradient_steps_and_the_pgx_variant_its_minibatches():
    # The default's 16 minibatches of 1,024 learn Breakout at 5M steps on 128 envs, where
    # pgx's 4 of 4,096 stall it; `:pgx` differs from the default in that one key.
    default, pgx = load_config("ppo_minatar", "Freeway"), load_config("ppo_minatar", "Freeway,pgx")
    assert (default.agent.num_minibatches, pgx.agent.num_minibatches) == (16, 4)
    pgx.agent.num_minibatches = 16
    assert pgx.to_dict() == default.to_dict()
    with pytest.raises(ValueError, match="one of the variants purejaxrl, cpu and pgx"):
        load_config("ppo_minatar", "cpu,pgx")


def test_the_cpu_variant_has_gymnax_blines_settings_and_its_smoke_run_trains(tmp_path):
    config = load_config("ppo_minatar", "Asterix,cpu")
    agent = config.agent
    assert config.env.id == "gymnax:Asterix-MinAtar" and config.env.num_envs == 64
    network = (agent.network, agent.activation, tuple(agent.hidden_sizes))
    assert network == ("mlp", "relu", (256, 256))
    assert (agent.num_steps, agent.num_minibatches, agent.update_epochs) == (128, 8, 4)
    assert (agent.learning_rate, agent.anneal_lr, agent.gamma) == (5e-4, False, 0.999)
    assert (agent.gae_lambda, agent.clip_coef, agent.ent_coef) == (0.95, 0.2, 0.01)
    assert (agent.vf_coef, agent.max_grad_norm, agent.norm_adv) == (0.5, 0.5, "minibatch")
    assert config.total_timesteps == 5_000_000 and config.pipeline.policy_lag == 0
    assert load_config("ppo_minatar", "cpu").env.id == "gymnax:Breakout-MinAtar"
    # The other variants keep their 64-wide MLPs.
    assert tuple(load_config("ppo_minatar", "Breakout,purejaxrl").agent.hidden_sizes) == (64, 64)
    with pytest.raises(ValueError, match="one of the variants purejaxrl, cpu and pgx"):
        load_config("ppo_minatar", "purejaxrl,cpu")

    # agent.hidden_sizes reaches PPO's network: 256-wide actor and critic layers.
    learner_state = ppo.make(config, BREAKOUT_MINATAR, derive_sizes(config)).init(jax.random.key(0))
    shapes = [leaf.shape for leaf in jax.tree.leaves(learner_state.params)]
    assert shapes.count((10 * 10 * 4, 256)) == 2 and shapes.count((256, 256)) == 2
    assert (10 * 10 * 4, 64) not in shapes

    _smoke_run_trains_breakout("Breakout,cpu,smoke", tmp_path)


@pytest.mark.parametrize("widths", [(), (64, 0)])
def test_ppo_refuses_hidden_sizes_that_are_not_positive_widths(widths):
    config = base_config(ppo.get_config())
    config.agent.hidden_sizes = widths
    with pytest.raises(ConfigError, match=r"agent.hidden_sizes .* must be positive integers"):
        ppo.make(config, BREAKOUT_MINATAR, derive_sizes(config))


def test_a_network_without_hidden_layers_refuses_hidden_sizes_it_would_ignore():
    config = base_config(ppo.get_config())
    config.agent.network = "minatar"
    config.agent.hidden_sizes = (32,)  # The MinAtar CNN's heads have hidden layers: taken.
    ppo.make(config, BREAKOUT_MINATAR, derive_sizes(config))
    with pytest.raises(ConfigError, match=r"agent.hidden_sizes \(32,\) would be ignored"):
        make_network("nature_cnn", Discrete(4), hidden=(32,), hidden_default=(64, 64))
    # The agent's default passes (pqn_atari's Nature CNN leaves it as it is).
    make_network("nature_cnn", Discrete(4), hidden=(64, 64), hidden_default=(64, 64))


def test_gymnax_breakout_steps_as_pgx_breakout_without_sticky_actions():
    """gymnax's Breakout-MinAtar and pgx's minatar-breakout (sticky actions off) from the
    same start under the same actions: the same observations, rewards and terminations at
    every step, through a brick respawn (a return above 30, the bricks of one wall)."""
    pytest.importorskip("gymnax")
    pytest.importorskip("pgx")
    steps, best = compare_breakout_with_pgx(episodes=20)
    assert best > 30, (steps, best)


def compare_breakout_with_pgx(episodes: int) -> tuple[int, float]:
    """Steps both Breakouts `episodes` times (asserting each step agrees); returns the
    steps compared and the best episode's return."""
    import gymnax
    import numpy as np
    from pgx.minatar.breakout import MinAtarBreakout

    env, params = gymnax.make("Breakout-MinAtar")
    pgx_env = MinAtarBreakout(sticky_action_prob=0.0)
    gymnax_reset = jax.jit(lambda key: env.reset_env(key, params))
    gymnax_step = jax.jit(
        lambda state, action: env.step_env(jax.random.key(0), state, action, params)
    )
    pgx_step = jax.jit(lambda state, action: pgx_env.step(state, action, jax.random.key(0)))
    rng = np.random.default_rng(0)
    steps, best = 0, 0.0
    for episode in range(episodes):
        pgx_state = pgx_env.init(jax.random.key(episode))
        # The ball starts on one of two sides: gymnax's start with pgx's side.
        for attempt in range(64):
            obs, state = gymnax_reset(jax.random.key(64 * episode + attempt))
            if np.array_equal(obs, pgx_state.observation):
                break
        assert np.array_equal(obs, pgx_state.observation)
        episode_return = 0.0
        for _ in range(int(params.max_steps_in_episode) - 1):
            # Mostly follow the ball (long episodes), sometimes a random action.
            towards = int(jnp.sign(state.ball_x - state.pos))  # -1 left, 0 stay, 1 right.
            action = [0, 2, 1][towards] if rng.random() < 0.99 else int(rng.integers(3))
            obs, state, reward, done, _ = gymnax_step(state, action)
            pgx_state = pgx_step(pgx_state, jnp.int32(action))
            assert np.array_equal(obs, pgx_state.observation), steps
            assert float(reward) == float(pgx_state.rewards[0]), steps
            assert bool(done) == bool(pgx_state.terminated), steps
            steps, episode_return = steps + 1, episode_return + float(reward)
            if done:
                break
        best = max(best, episode_return)
    return steps, best
