"""The networks' convolution: JAX's values, gradients XLA:CPU runs fast inside a loop."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax import lax

from sebulba.agents import convolution, networks, ppo
from sebulba.agents.api import ArraySpec, Discrete, EnvSpec, Rollout
from sebulba.config.sizes import derive_sizes
from tests.helpers import small_update_config

# What flax.linen.Conv passes for NHWC inputs and HWIO kernels.
FLAX_NHWC = lax.ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))
MINATAR = EnvSpec("gymnax:Breakout-MinAtar", ArraySpec((10, 10, 4), "bool"), Discrete(3))


def _value_and_gradients(conv, inputs, kernel, strides, padding):
    def loss(x, w):
        return jnp.sum(jnp.sin(conv(x, w, strides, padding, dimension_numbers=FLAX_NHWC)))

    return jax.jit(jax.value_and_grad(loss, (0, 1)))(inputs, kernel)


@pytest.mark.parametrize(
    "input_shape, kernel_shape, padding",
    [
        ((3, 10, 10, 4), (2, 2, 4, 32), "SAME"),  # The MinAtar network's: padding (0, 1).
        ((2, 16, 16, 3), (3, 3, 3, 16), "SAME"),  # The ResNet's.
        ((2, 9, 7, 64), (3, 3, 64, 8), "VALID"),
        ((2, 10, 13, 5), (3, 4, 5, 7), ((2, 0), (1, 3))),
    ],
)
def test_values_and_gradients_are_jaxs_bitwise(input_shape, kernel_shape, padding):
    inputs = jax.random.normal(jax.random.key(0), input_shape)
    kernel = jax.random.normal(jax.random.key(1), kernel_shape)
    expected = _value_and_gradients(lax.conv_general_dilated, inputs, kernel, (1, 1), padding)
    ours = _value_and_gradients(convolution.conv_general_dilated, inputs, kernel, (1, 1), padding)
    for a, b in zip(jax.tree.leaves(expected), jax.tree.leaves(ours), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "input_shape, kernel_shape, strides, padding",
    [
        ((2, 84, 84, 4), (8, 8, 4, 32), (4, 4), "VALID"),  # The Nature CNN's.
        ((2, 20, 20, 32), (4, 4, 32, 64), (2, 2), "VALID"),
        ((2, 11, 10, 5), (3, 3, 5, 7), (2, 2), "SAME"),
        ((2, 10, 13, 5), (3, 4, 5, 7), (2, 3), "VALID"),  # Input rows no window reaches.
    ],
)
def test_the_written_gradients_hold_for_strides_too(input_shape, kernel_shape, strides, padding):
    # Strided convolutions go to JAX's own gradient (the module docstring says why); the
    # gradient written out covers them all the same.
    inputs = jax.random.normal(jax.random.key(0), input_shape)
    kernel = jax.random.normal(jax.random.key(1), kernel_shape)
    pads = lax.padtype_to_pads(input_shape[1:3], kernel_shape[:2], strides, padding)

    def written(x, w, strides, padding, dimension_numbers):
        del padding, dimension_numbers
        return convolution._nhwc_conv(x, w, strides, tuple(map(tuple, pads)), None)

    expected = _value_and_gradients(lax.conv_general_dilated, inputs, kernel, strides, padding)
    ours = _value_and_gradients(written, inputs, kernel, strides, padding)
    for a, b in zip(jax.tree.leaves(expected), jax.tree.leaves(ours), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def _is_written_out(conv, strides):
    x, w = jnp.zeros((1, 8, 8, 2)), jnp.zeros((3, 3, 2, 4))
    jaxpr = jax.make_jaxpr(lambda x, w: conv(x, w, strides, "SAME", dimension_numbers=FLAX_NHWC))
    return "custom_vjp_call" in str(jaxpr(x, w))


def test_only_stride_1_convolutions_are_written_out():
    assert _is_written_out(convolution.conv_general_dilated, (1, 1))
    assert not _is_written_out(convolution.conv_general_dilated, (2, 2))
    assert networks.conv_general_dilated() is convolution.conv_general_dilated  # On CPUs.


def _rolled_gradient_steps_hlo(network):
    """The compiled HLO of 4 SGD steps of `network` on MinAtar grids, in a rolled scan."""
    params = network.init(jax.random.key(0), jnp.zeros((1, 10, 10, 4)))
    optimizer = optax.sgd(0.1)
    batches = jnp.ones((4, 32, 10, 10, 4))

    def step(carry, obs):
        params, opt_state = carry
        grads = jax.grad(lambda p: jnp.sum(network.apply(p, obs)[1] ** 2))(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), None

    def steps(params, batches):
        return lax.scan(step, (params, optimizer.init(params)), batches)[0]

    return jax.jit(steps).lower(params, batches).compile().as_text()


def test_a_rolled_loop_of_gradient_steps_runs_only_eigen_layout_convolutions(monkeypatch):
    # XLA:CPU runs a convolution through Eigen only in the NHWC / HWIO layout; inside a
    # loop's body it does not rewrite JAX's kernel gradient into it (7x to 23x slower).
    def layouts(hlo):
        return set(re.findall(r"convolution\(.*dim_labels=([\w>-]+)", hlo))

    ours = layouts(_rolled_gradient_steps_hlo(networks.make_network("minatar", Discrete(3))))
    assert ours == {"b01f_01io->b01f"}
    monkeypatch.setattr(networks, "conv_general_dilated", lambda: lax.conv_general_dilated)
    jaxs = layouts(_rolled_gradient_steps_hlo(networks.make_network("minatar", Discrete(3))))
    assert jaxs - {"b01f_01io->b01f"}, "JAX's own gradient was expected in another layout"


def _minatar_rollout(num_steps, num_envs):
    rng = np.random.default_rng(0)
    T, B = num_steps, num_envs
    return Rollout(
        obs=rng.random((T + 1, B, 10, 10, 4)) < 0.2,
        actions=rng.integers(0, 3, (T, B)).astype(np.int32),
        rewards=rng.normal(size=(T, B)).astype(np.float32),
        terminations=rng.random((T, B)) < 0.1,
        truncations=np.zeros((T, B), bool),
        valid=np.ones((T, B), bool),
        policy_outputs={
            "logprob": np.full((T + 1, B), -np.log(3), np.float32),
            "value": rng.normal(size=(T + 1, B)).astype(np.float32),
        },
        env_ids=np.arange(B, dtype=np.int32),
    )


def test_an_unrolled_update_gives_the_parameters_jaxs_gradients_gave(monkeypatch):
    # Runs with the unrolled loop keep their results bitwise (so do the records of CPU runs
    # that "auto" unrolled before it rolled the stride-1 CNNs' loop).
    config = small_update_config(ppo, num_steps=8, num_envs=4, network="minatar")
    config.agent.minibatch_loop = "unrolled"
    config.agent.update_epochs = 1

    def updated_params():
        agent = ppo.make(config, MINATAR, derive_sizes(config))
        state = agent.init(jax.random.key(0))
        rollout = _minatar_rollout(num_steps=8, num_envs=4)
        for _ in range(2):
            state, _ = jax.jit(agent.update)(state, rollout)
        return jax.tree.leaves(agent.policy_params(state))

    ours = updated_params()
    monkeypatch.setattr(networks, "conv_general_dilated", lambda: lax.conv_general_dilated)
    for a, b in zip(ours, updated_params(), strict=True):
        np.testing.assert_array_equal(a, b)
