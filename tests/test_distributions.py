"""Action distributions: hand-checked log-probabilities, entropies, modes and samples."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sebulba.agents import distributions
from sebulba.agents.api import ArraySpec, Box, Discrete, EnvSpec, MultiDiscrete
from sebulba.agents.networks import check_network_fits, make_network
from sebulba.errors import ConfigError


def test_categorical_is_the_softmax():
    policy = distributions.for_action_spec(Discrete(3))
    logits = jnp.log(jnp.array([[0.2, 0.3, 0.5]]))
    np.testing.assert_allclose(policy.logprob(logits, jnp.array([2])), [np.log(0.5)], rtol=1e-6)
    expected_entropy = -sum(p * np.log(p) for p in (0.2, 0.3, 0.5))
    np.testing.assert_allclose(policy.entropy(logits), [expected_entropy], rtol=1e-6)
    assert policy.mode(logits).tolist() == [2]


def test_gaussian_components_are_independent_and_the_log_std_is_shared():
    policy = distributions.for_action_spec(Box((2,), (-1.0, -1.0), (1.0, 1.0)))
    params = {"mean": jnp.array([[0.0, 1.0]]), "log_std": jnp.log(jnp.array([[1.0, 2.0]]))}
    action = jnp.array([[0.5, -1.0]])
    # Sum over components of log N(a; mu, sigma).
    expected = sum(
        -0.5 * ((a - m) / s) ** 2 - np.log(s) - 0.5 * np.log(2 * np.pi)
        for a, m, s in [(0.5, 0.0, 1.0), (-1.0, 1.0, 2.0)]
    )
    np.testing.assert_allclose(policy.logprob(params, action), [expected], rtol=1e-5)
    expected_entropy = sum(0.5 * np.log(2 * np.pi * np.e * s**2) for s in (1.0, 2.0))
    np.testing.assert_allclose(policy.entropy(params), [expected_entropy], rtol=1e-5)
    np.testing.assert_array_equal(policy.mode(params), params["mean"])
    # The head: a mean per state, one log-std parameter for all states (zero at init).
    network = make_network("mlp", Box((2,), (-1.0, -1.0), (1.0, 1.0)))
    variables = network.init(jax.random.key(0), jnp.zeros((3, 4)))
    (head_params, value) = network.apply(variables, jax.random.normal(jax.random.key(1), (3, 4)))
    assert head_params["mean"].shape == (3, 2) and value.shape == (3,)
    np.testing.assert_array_equal(head_params["log_std"], np.zeros((3, 2)))
    samples = policy.sample(head_params, jax.random.split(jax.random.key(2), 3))
    assert samples.shape == (3, 2) and samples.dtype == jnp.float32


def test_multi_discrete_is_a_product_of_softmaxes():
    policy = distributions.for_action_spec(MultiDiscrete((2, 3)))
    first, second = jnp.log(jnp.array([0.25, 0.75])), jnp.log(jnp.array([0.1, 0.6, 0.3]))
    logits = jnp.concatenate([first, second])[None]
    np.testing.assert_allclose(
        policy.logprob(logits, jnp.array([[1, 2]])), [np.log(0.75 * 0.3)], rtol=1e-6
    )
    entropy = -sum(p * np.log(p) for p in (0.25, 0.75, 0.1, 0.6, 0.3))
    np.testing.assert_allclose(policy.entropy(logits), [entropy], rtol=1e-6)
    assert policy.mode(logits).tolist() == [[1, 1]]
    samples = policy.sample(jnp.tile(logits, (2000, 1)), jax.random.split(jax.random.key(0), 2000))
    assert samples.shape == (2000, 2) and samples.dtype == jnp.int32
    np.testing.assert_allclose(np.mean(samples[:, 0] == 1), 0.75, atol=0.04)
    np.testing.assert_allclose(np.mean(samples[:, 1] == 1), 0.6, atol=0.04)


MINIGRID = {
    "direction": ArraySpec((), "int32", num_values=4),
    "image": ArraySpec((7, 7, 3), "uint8"),
    "mission": ArraySpec((96,), "uint8"),
}


def test_multi_input_encodes_dict_observations_and_other_networks_refuse_them():
    spec = EnvSpec("MiniGrid-Empty-5x5-v0", MINIGRID, Discrete(7))
    check_network_fits("multi_input", spec)
    with pytest.raises(ConfigError, match=r"'mlp' takes .* observes a dict \(direction: int32 "):
        check_network_fits("mlp", spec)
    network = make_network("multi_input", Discrete(7), observation=MINIGRID)
    obs = {
        "direction": jnp.array([0, 3]),
        "image": jnp.full((2, 7, 7, 3), 5, jnp.uint8),
        "mission": jnp.zeros((2, 96), jnp.uint8),
    }
    variables = network.init(jax.random.key(0), obs)
    logits, value = network.apply(variables, obs)
    assert logits.shape == (2, 7) and value.shape == (2,)
    # The direction reaches the output through its embedding.
    assert not np.allclose(logits[0], logits[1])
    assert variables["params"]["Embed_0"]["embedding"].shape == (4, 16)
