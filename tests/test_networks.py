"""Networks: convolution initialisation, and refusing a network that does not fit the env."""

import os
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import impala_atari, ppo_atari
from sebulba.agents import impala, ppo
from sebulba.agents.api import ArraySpec, Discrete, EnvSpec
from sebulba.agents.networks import check_network_fits, make_network
from sebulba.config.sizes import derive_sizes
from sebulba.errors import ConfigError
from tests.helpers import CARTPOLE, small_update_config

FRAMES = (4, 84, 84)
BREAKOUT = EnvSpec("Breakout-v5", ArraySpec(FRAMES, "uint8"), Discrete(18), is_atari=True)


def _init(name, conv_init):
    network = make_network(name, Discrete(18), conv_init=conv_init)
    return network.init(jax.random.key(0), jnp.zeros((1, *FRAMES), jnp.uint8))


def _leaves(params):
    return {
        jax.tree_util.keystr(path): leaf
        for path, leaf in jax.tree_util.tree_leaves_with_path(params)
    }


@pytest.mark.parametrize("name", ["nature_cnn", "impala_resnet"])
def test_conv_kernels_follow_the_chosen_init_and_dense_layers_do_not_change(name):
    by_init = {init: _leaves(_init(name, init)) for init in ("orthogonal", "lecun_normal")}
    kernels = [path for path, leaf in by_init["orthogonal"].items() if leaf.ndim == 4]
    assert len(kernels) == (3 if name == "nature_cnn" else 15)
    for path in kernels:
        height, width, channels_in, channels_out = by_init["orthogonal"][path].shape
        fan_in = height * width * channels_in
        # flax's lecun_normal (Cleanba): variance 1 / fan_in.
        np.testing.assert_allclose(
            np.std(by_init["lecun_normal"][path]), 1 / np.sqrt(fan_in), rtol=0.15
        )
        # Orthogonal with gain sqrt(2) (baselines): mean square 2 / max(fan_in, fan_out).
        np.testing.assert_allclose(
            np.std(by_init["orthogonal"][path]),
            np.sqrt(2 / max(fan_in, channels_out)),
            rtol=0.15,
        )
    # Dense layers and heads are orthogonal under both: conv_init changes the convs only.
    for path, leaf in by_init["orthogonal"].items():
        if path not in kernels:
            np.testing.assert_array_equal(leaf, by_init["lecun_normal"][path])


def test_mlp_ignores_conv_init_and_an_unknown_init_is_refused():
    obs = jnp.ones((1, 4))
    a = make_network("mlp", Discrete(2), "orthogonal").init(jax.random.key(0), obs)
    b = make_network("mlp", Discrete(2), "lecun_normal").init(jax.random.key(0), obs)
    jax.tree.map(np.testing.assert_array_equal, a, b)
    with pytest.raises(ConfigError, match=r"agent\.conv_init 'xavier' must be one of"):
        make_network("impala_resnet", Discrete(18), "xavier")


def test_cleanba_configs_select_cleanbas_behaviour():
    for config in (ppo_atari.get_config(), impala_atari.get_config()):
        assert config.agent.conv_init == "lecun_normal"
        assert config.env.use_fire_reset
    ppo_config = ppo_atari.get_config()
    assert ppo_config.agent.norm_adv == "batch"
    assert not ppo_config.agent.clip_vloss
    # The agents' own defaults follow their references: baselines for PPO, Cleanba for IMPALA.
    assert ppo.get_config().conv_init == "orthogonal"
    assert impala.get_config().conv_init == "lecun_normal"


@pytest.mark.parametrize(
    "network, env_spec, expected",
    [
        ("mlp", BREAKOUT, "no uint8 image .* 'Breakout-v5' observes uint8 \\[4, 84, 84\\]"),
        ("nature_cnn", CARTPOLE, "uint8 images .* 'CartPole-v1' observes float32 \\[4\\]"),
        ("impala_resnet", CARTPOLE, "uint8 images .* 'CartPole-v1' observes float32 \\[4\\]"),
    ],
)
def test_a_network_that_does_not_fit_the_observations_is_refused(network, env_spec, expected):
    with pytest.raises(ConfigError, match=f"^agent\\.network '{network}' takes .*{expected}"):
        check_network_fits(network, env_spec)
    # Both agents check it when they are built, before anything is compiled.
    for agent_module in (ppo, impala):
        config = small_update_config(agent_module, 8, 8, network=network)
        with pytest.raises(ConfigError, match="agent.network"):
            agent_module.make(config, env_spec, derive_sizes(config))


def test_networks_that_fit_are_accepted_and_named_in_the_advice():
    check_network_fits("mlp", CARTPOLE)
    check_network_fits("nature_cnn", BREAKOUT)
    check_network_fits("impala_resnet", BREAKOUT)
    with pytest.raises(ConfigError, match="use agent.network=nature_cnn or impala_resnet$"):
        check_network_fits("mlp", BREAKOUT)


@pytest.mark.parametrize(
    "shape, layout",
    [((4, 84, 84), "CHW"), ((1, 84, 84), "CHW"), ((96, 96, 3), "HWC"), ((3, 5, 4), None)],
)
def test_the_image_layout_is_read_from_the_spec(shape, layout):
    from sebulba.agents.networks import image_layout

    assert image_layout(ArraySpec(shape, "uint8")) == layout
    assert image_layout(ArraySpec((84,), "uint8")) is None


@pytest.mark.parametrize("name, first_kernel", [("nature_cnn", 8), ("impala_resnet", 3)])
@pytest.mark.parametrize("shape, channels", [((96, 96, 3), 3), ((4, 84, 84), 4)])
def test_cnns_convolve_over_height_and_width_in_either_layout(name, first_kernel, shape, channels):
    # CarRacing's [96, 96, 3] is channels last, Atari's [4, 84, 84] channels first: the
    # first convolution sees the colour channels or the frame stack, never 96 "channels".
    spec = ArraySpec(shape, "uint8")
    network = make_network(name, Discrete(3), observation=spec)
    params = network.init(jax.random.key(0), jnp.zeros((1, *shape), jnp.uint8))
    kernels = [leaf for leaf in jax.tree.leaves(params) if leaf.ndim == 4]
    assert kernels[0].shape[:3] == (first_kernel, first_kernel, channels)
    assert all(leaf.size for leaf in jax.tree.leaves(params))  # No zero-size layer.


def test_a_cnn_too_big_for_the_image_is_refused_in_one_line():
    tiny = EnvSpec("MiniGrid-tiny", ArraySpec((7, 7, 3), "uint8"), Discrete(7))
    with pytest.raises(ConfigError, match=r"agent.network 'nature_cnn' takes .*H and W >= 36"):
        check_network_fits("nature_cnn", tiny)
    check_network_fits("impala_resnet", tiny)  # SAME padding: any size.


@pytest.mark.slow
# The Nature CNN's strided convolutions train unrolled on a CPU: a long program that
# XLA's default optimisations run 3x as fast (24 s against 79 s, compile included); the
# ResNet's rolled loop compiles faster with the tests' flags (14 s against 32 s).
@pytest.mark.parametrize(
    "network",
    [pytest.param("nature_cnn", marks=pytest.mark.xla_default_compilation), "impala_resnet"],
)
def test_car_racing_trains_with_both_cnns(tmp_path, network):
    from sebulba import train
    from tests.helpers import load_config, read_summary

    config = load_config("ppo_cartpole", "smoke")
    config.env.id = "CarRacing-v2"  # uint8 [96, 96, 3], Box(3) actions.
    config.agent.network = network
    # What is tested is that each CNN takes CarRacing's screens and actions; a rolled
    # minibatch loop compiles in seconds where `auto` unrolls the Nature CNN's on a CPU
    # (tests/test_convolution.py and test_ppo.py compare the two loops).
    config.agent.minibatch_loop = "scan"
    # 2 updates of 2 envs x 8 steps in 1 epoch: the screens and actions pass through every
    # program (rollout, update, checkpoint) as in a longer run, in a quarter of the work.
    config.env.num_envs = 2
    config.agent.num_steps = 8
    config.agent.update_epochs = 1
    config.total_timesteps = 2 * 8 * 2
    config.log.tensorboard = False
    train.train(config, str(tmp_path))
    summary = read_summary(str(tmp_path))
    assert summary["updates"] == 2 and summary["global_step"] == 32
    assert os.listdir(tmp_path / "checkpoints") == ["2"]


def test_multi_input_flattens_arrays_of_any_rank_and_convolves_images():
    # highway-env's racetrack grid [2, 12, 12] and Jumanji FlatPack's mask [25, 4, 9, 9]:
    # arrays of three or more axes whose layout the shape does not tell.
    observation = {
        "grid": ArraySpec((2, 12, 12), "float32"),
        "mask": ArraySpec((5, 4, 3, 3), "bool"),
        "image": ArraySpec((7, 7, 3), "uint8"),
        "steps": ArraySpec((), "int32", num_values=10),
    }
    spec = EnvSpec("Racetrack-v0", observation, Discrete(5))
    check_network_fits("multi_input", spec)
    for other in ("mlp", "nature_cnn", "impala_resnet", "minatar"):
        with pytest.raises(
            ConfigError, match=f"'{other}' takes .*: use agent.network=multi_input$"
        ):
            check_network_fits(other, spec)
    network = make_network("multi_input", Discrete(5), observation=observation)
    obs = {
        "grid": jnp.stack([jnp.zeros((2, 12, 12)), jnp.ones((2, 12, 12))]),
        "mask": jnp.ones((2, 5, 4, 3, 3), bool),
        "image": jnp.zeros((2, 7, 7, 3), jnp.uint8),
        "steps": jnp.array([1, 1]),
    }
    variables = network.init(jax.random.key(0), obs)
    logits, value = network.apply(variables, obs)
    assert logits.shape == (2, 5) and value.shape == (2,)
    assert not np.allclose(logits[0], logits[1])  # The grid reaches the output.
    shapes = [leaf.shape for leaf in jax.tree.leaves(variables)]
    # The image alone goes through the CNN (3 convolutions, 3 channels in first).
    kernels = [shape for shape in shapes if len(shape) == 4]
    assert kernels == [(3, 3, 3, 16), (3, 3, 16, 32), (3, 3, 32, 32)]
    # The rest is flattened into the embedding: grid 288, mask 180, image 7 * 7 * 32,
    # steps 16 (embedded), feeding the actor's and the critic's first 64-unit layers.
    width = 2 * 12 * 12 + 5 * 4 * 3 * 3 + 7 * 7 * 32 + 16
    assert shapes.count((width, 64)) == 2


def test_a_rank_3_array_no_cnn_reads_is_flattened_by_mlp_or_multi_input():
    # Atari's frame stacks: named with the networks made for them.
    with pytest.raises(ConfigError, match="use agent.network=nature_cnn or impala_resnet$"):
        check_network_fits("mlp", BREAKOUT)
    check_network_fits("multi_input", BREAKOUT)  # Flattened, if asked for.
    planes = EnvSpec("Play2048-v1", ArraySpec((4, 4, 31), "float32"), Discrete(4))
    # Both only flatten it; the advice names the plainer network.
    with pytest.raises(ConfigError, match=r"observes float32 \[4, 4, 31\]: use agent.network=mlp$"):
        check_network_fits("minatar", planes)
    check_network_fits("mlp", planes)
    network = make_network("multi_input", Discrete(4), observation=planes.observation)
    variables = network.init(jax.random.key(0), jnp.zeros((3, 4, 4, 31)))
    logits, value = network.apply(variables, jnp.zeros((3, 4, 4, 31)))
    assert logits.shape == (3, 4) and value.shape == (3,)
    assert not [leaf for leaf in jax.tree.leaves(variables) if leaf.ndim == 4]  # No CNN.


@pytest.mark.parametrize(
    "shape, window, strides, padding",
    [
        ((2, 21, 21, 8), (3, 3), (2, 2), "SAME"),  # The ResNet's pools, odd sizes.
        ((2, 10, 11, 3), (3, 3), (2, 2), "VALID"),
        ((2, 7, 8, 3), (3, 2), (1, 2), "SAME"),  # Overlaps of three windows along H.
    ],
)
def test_max_pool_by_slices_is_flax_max_pool_bitwise_ties_included(shape, window, strides, padding):
    import flax.linen as nn

    from sebulba.agents.max_pool import max_pool

    x = jax.random.normal(jax.random.key(0), shape)
    tied = jnp.round(x * 2) / 2  # Many equal maxima: the gradient's choice matters.
    for inputs in (x, tied):
        expected = nn.max_pool(inputs, window, strides, padding=padding)
        np.testing.assert_array_equal(max_pool(inputs, window, strides, padding), expected)
        weights = jax.random.normal(jax.random.key(1), expected.shape)

        def gradient(pool, inputs=inputs, weights=weights):
            return jax.jit(jax.grad(lambda a: (pool(a) * weights).sum()))(inputs)

        np.testing.assert_array_equal(
            gradient(lambda a: max_pool(a, window, strides, padding)),
            gradient(lambda a: nn.max_pool(a, window, strides, padding=padding)),
        )


def test_auto_max_pools_by_slices_on_cpus_and_deterministic_gpus_and_as_flax_elsewhere(
    monkeypatch,
):
    import flax.linen as nn

    from sebulba.agents import networks
    from sebulba.agents.max_pool import max_pool

    assert ppo.get_config().max_pool == impala.get_config().max_pool == "auto"
    assert make_network("impala_resnet", Discrete(6)).max_pool == "slices"  # Tests run on CPU.
    assert make_network("impala_resnet", Discrete(6), max_pool="reduce_window").max_pool == (
        "reduce_window"
    )
    with pytest.raises(ConfigError, match="agent.max_pool 'avg'"):
        make_network("impala_resnet", Discrete(6), max_pool="avg")
    # The run's log says which one "auto" took, once per process.
    networks._log_auto_max_pool.cache_clear()
    with mock.patch.object(networks.logging, "info") as info:
        make_network("impala_resnet", Discrete(6))
        make_network("impala_resnet", Discrete(6))
        make_network("nature_cnn", Discrete(6))  # No max-pool: nothing to say.
    info.assert_called_once_with(
        "ResNet max-pool: %s (agent.max_pool=auto on %s)", "slices", "a CPU"
    )
    # A GPU held to deterministic kernels (debug.deterministic_gpu's flags, or the narrower
    # one a user may export) takes the slices; a GPU free to use atomics and a TPU, flax's.
    monkeypatch.setattr(networks.jax, "default_backend", lambda: "gpu")
    for xla_flags, expected in (
        ("--xla_force_host_platform_device_count=2", "reduce_window"),
        ("--xla_gpu_deterministic_ops=false", "reduce_window"),
        ("--xla_gpu_deterministic_ops=true", "slices"),
        ("--xla_dump_to=/tmp/x --xla_gpu_exclude_nondeterministic_ops", "slices"),
    ):
        monkeypatch.setenv("XLA_FLAGS", xla_flags)
        assert networks.resolve_max_pool("auto") == expected, xla_flags
    assert networks.resolve_max_pool("slices") == "slices"
    monkeypatch.setattr(networks.jax, "default_backend", lambda: "tpu")
    assert networks.resolve_max_pool("auto") == "reduce_window"
    # The slices' gradient has no scatter, which a GPU would run with atomic additions
    # (or, when deterministic, as a sorted scatter).
    x = jnp.zeros((1, 9, 9, 2))
    programs = [
        jax.jit(jax.grad(lambda a, pool=pool: pool(a).sum())).lower(x).as_text()
        for pool in (
            lambda a: max_pool(a, (3, 3), (2, 2), "SAME"),
            lambda a: nn.max_pool(a, (3, 3), (2, 2), padding="SAME"),
        )
    ]
    assert "scatter" not in programs[0] and "select_and_scatter" in programs[1]
