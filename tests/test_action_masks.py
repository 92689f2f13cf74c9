"""Invalid action masking: which entries are masks, and that the policy obeys them.

A task's action mask (`EnvSpec.action_mask`) gives the actions it marks illegal exactly
zero probability in the actors and in the learner: they are never sampled, their logits
get exactly zero gradient, and PPO's first ratio stays 1 at policy lag 0.
"""

import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from sebulba import train
from sebulba.agents import defaults, distributions, ppo
from sebulba.agents.api import Rollout
from sebulba.config.sizes import derive_sizes
from sebulba.environments import spaces
from sebulba.environments.spaces import ArraySpec, Box, Discrete, EnvSpec, MultiDiscrete
from sebulba.errors import ConfigError
from tests.helpers import load_config, read_metrics, small_update_config

NUM_SAMPLES = 4096


@pytest.mark.parametrize(
    "shape, action, layout",
    [
        ((4,), Discrete(4), "per_action"),
        ((5,), Discrete(4), None),
        ((10, 21), MultiDiscrete((21,) * 10), "per_action"),  # JobShop: a row per machine.
        ((42,), MultiDiscrete((21, 21)), "per_action"),  # Concatenated like the logits.
        ((4, 10), MultiDiscrete((4, 10)), "joint"),  # Tetris: (rotation, column) together.
        ((9, 9, 9), MultiDiscrete((9, 9, 9)), "joint"),  # Sudoku.
        ((3, 4), MultiDiscrete((4, 5, 4)), None),  # Rows of unequal components.
        ((2,), Box((2,), (-1.0, -1.0), (1.0, 1.0)), None),  # Continuous actions: no mask.
    ],
)
def test_a_mask_layout_is_read_from_its_shape(shape, action, layout):
    assert spaces.action_mask_layout(shape, action) == layout


def test_the_mask_entry_becomes_bool_and_is_named_by_the_spec():
    observation = {
        "walls": ArraySpec((3, 3), "float32"),
        "action_mask": ArraySpec((4,), "float32"),
    }
    spec = spaces.with_action_mask(EnvSpec("Maze-v0", observation, Discrete(4)))
    assert spec.action_mask == "action_mask" and spec.action_mask_layout == "per_action"
    assert spec.observation["action_mask"] == ArraySpec((4,), "bool")
    assert spec.observation["walls"] == observation["walls"]
    # A mask of a shape that lays out no actions stays an ordinary observation entry.
    unfit = {"action_mask": ArraySpec((7,), "float32")}
    spec = spaces.with_action_mask(EnvSpec("Other-v0", unfit, Discrete(4)))
    assert spec.action_mask is None and spec.observation == unfit
    # The envpool tasks' specs (read from the registry) carry their masks.
    config = load_config("ppo_minigrid", "Tetris-v0,smoke")
    from sebulba.environments import envpool_pools

    tetris = envpool_pools.registry_env_spec(config.env)
    assert (tetris.action_mask, tetris.action_mask_layout) == ("action_mask", "joint")
    assert isinstance(distributions.for_env_spec(tetris), distributions.JointCategorical)
    assert isinstance(
        distributions.for_env_spec(tetris, mask_actions=False), distributions.ProductCategorical
    )


def _random_legal(rng, shape, per_row_axes):
    """Random bool masks [NUM_SAMPLES, *shape] with at least one legal action in every
    row of the last `per_row_axes` axes (a row is one choice)."""
    legal = rng.random((NUM_SAMPLES, *shape)) < 0.4
    rows = legal.reshape(-1, math.prod(shape[len(shape) - per_row_axes :]))
    rows[np.arange(len(rows)), rng.integers(0, rows.shape[1], len(rows))] = True
    return rows.reshape(legal.shape)


# (distribution, mask shape per sample, axes of the mask that one choice spans)
DISTRIBUTIONS = {
    "categorical": (distributions.Categorical(6), (6,), 1),
    "per_component": (distributions.ProductCategorical((5, 5, 5)), (3, 5), 1),
    "joint": (distributions.JointCategorical((4, 10)), (4, 10), 2),
}


def _is_legal(name, legal, actions):
    rows = np.arange(len(actions))
    if name == "categorical":
        return legal[rows, actions]
    if name == "per_component":
        return np.all([legal[rows, k, actions[:, k]] for k in range(3)], axis=0)
    return legal[rows, actions[:, 0], actions[:, 1]]


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_masked_actions_are_never_sampled_nor_the_mode(name):
    policy, mask_shape, per_row_axes = DISTRIBUTIONS[name]
    rng = np.random.default_rng(0)
    legal = _random_legal(rng, mask_shape, per_row_axes)
    num_logits = math.prod(mask_shape)
    # Logits that favour the illegal actions strongly: only the mask keeps them out.
    logits = jnp.asarray(np.where(legal.reshape(NUM_SAMPLES, -1), -5.0, 5.0), jnp.float32)
    logits += jnp.asarray(rng.normal(size=(NUM_SAMPLES, num_logits)), jnp.float32)
    masked = distributions.mask_logits(logits, jnp.asarray(legal))
    keys = jax.random.split(jax.random.key(0), NUM_SAMPLES)
    actions = np.asarray(policy.sample(masked, keys))
    assert _is_legal(name, legal, actions).all()
    assert _is_legal(name, legal, np.asarray(policy.mode(masked))).all()
    # Unmasked, the same logits pick illegal actions almost always.
    assert not _is_legal(name, legal, np.asarray(policy.sample(logits, keys))).all()
    logprob = policy.logprob(masked, jnp.asarray(actions))
    assert np.all(np.isfinite(logprob)) and np.all(np.isfinite(policy.entropy(masked)))


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_a_masked_logit_gets_exactly_zero_gradient(name):
    policy, mask_shape, per_row_axes = DISTRIBUTIONS[name]
    rng = np.random.default_rng(1)
    legal = jnp.asarray(_random_legal(rng, mask_shape, per_row_axes)[:64])
    logits = jnp.asarray(rng.normal(size=(64, math.prod(mask_shape))), jnp.float32)
    actions = policy.mode(distributions.mask_logits(logits, legal))

    def objective(logits):
        masked = distributions.mask_logits(logits, legal)
        return jnp.sum(policy.logprob(masked, actions) + 0.01 * policy.entropy(masked))

    gradient = np.asarray(jax.grad(objective)(logits)).reshape(legal.shape)
    legal = np.asarray(legal)
    assert np.all(gradient[~legal] == 0.0)
    assert np.all(np.isfinite(gradient)) and np.count_nonzero(gradient[legal]) > 0


def test_entropy_counts_only_the_legal_actions_and_no_legal_action_is_no_nan():
    policy = distributions.Categorical(4)
    logits = jnp.zeros((2, 4))
    legal = jnp.asarray([[True, True, False, False], [False, False, False, False]])
    masked = distributions.mask_logits(logits, legal)
    np.testing.assert_allclose(policy.entropy(masked), [math.log(2), math.log(4)], rtol=1e-6)
    np.testing.assert_allclose(jnp.exp(policy.logprob(masked, jnp.asarray([2, 2]))), [0.0, 0.25])


# An env whose last action is illegal everywhere, and one of the others at random.
MASKED_SPEC = spaces.with_action_mask(
    EnvSpec(
        "Masked-v0",
        {"x": ArraySpec((3,), "float32"), "action_mask": ArraySpec((4,), "float32")},
        Discrete(4),
    )
)
T, B = 8, 8


def _masked_agent(**agent):
    config = small_update_config(ppo, T, B, network="multi_input", **agent)
    return ppo.make(config, MASKED_SPEC, derive_sizes(config))


def _masked_observations(rng, *leading):
    legal = rng.random((*leading, 4)) < 0.6
    legal[..., 3] = False
    legal[..., 0] |= ~legal[..., :3].any(axis=-1)
    return {"x": rng.normal(size=(*leading, 3)).astype(np.float32), "action_mask": legal}


def test_ppo_acts_only_legally_and_never_trains_an_always_illegal_action():
    agent = _masked_agent()
    state = agent.init(jax.random.key(0))
    rng = np.random.default_rng(0)
    obs = _masked_observations(rng, T + 1, B)
    act = jax.jit(agent.act)
    actions, policy_outputs = [], []
    for t in range(T + 1):
        keys = jax.random.split(jax.random.key(t), B)
        step_obs = {name: entry[t] for name, entry in obs.items()}
        step_actions, outputs = act(agent.policy_params(state), step_obs, keys)
        actions.append(np.asarray(step_actions))
        policy_outputs.append(outputs)
    actions = np.stack(actions)
    assert np.take_along_axis(obs["action_mask"], actions[..., None], -1).all()
    rollout = Rollout(
        obs=obs,
        actions=actions[:-1].astype(np.int32),
        rewards=rng.normal(size=(T, B)).astype(np.float32),
        terminations=rng.random((T, B)) < 0.1,
        truncations=np.zeros((T, B), bool),
        valid=np.ones((T, B), bool),
        policy_outputs=jax.tree.map(lambda *x: np.stack(x), *policy_outputs),
        env_ids=np.arange(B, dtype=np.int32),
    )
    updated, metrics = jax.jit(agent.update)(state, rollout)
    # The policy head's weights and bias of action 3 (illegal everywhere) get zero
    # gradient, so Adam leaves them exactly as they were; the legal actions' move.
    heads = [
        (before, after)
        for path, before, after in _leaves_with_paths(state.params, updated.params)
        if "policy_head" in path
    ]
    assert heads
    for before, after in heads:
        np.testing.assert_array_equal(before[..., 3], after[..., 3])
        assert np.any(before[..., :3] != after[..., :3])
    assert np.isfinite(metrics["entropy"]) and metrics["entropy"] < math.log(3)


def _leaves_with_paths(before, after):
    flat_before = jax.tree_util.tree_flatten_with_path(before)[0]
    flat_after = jax.tree.leaves(after)
    return [
        (jax.tree_util.keystr(path), np.asarray(b), np.asarray(a))
        for (path, b), a in zip(flat_before, flat_after, strict=True)
    ]


def test_mask_actions_false_treats_the_mask_as_an_observation_and_a_bad_value_names_it():
    agent = _masked_agent(mask_actions=False)
    state = agent.init(jax.random.key(0))
    obs = _masked_observations(np.random.default_rng(0), 256)
    keys = jax.random.split(jax.random.key(0), 256)
    actions, _ = jax.jit(agent.act)(agent.policy_params(state), obs, keys)
    assert np.any(np.asarray(actions) == 3)  # Unmasked: the illegal action is sampled.
    # Built from a dict, as from a stored config.json: no field types to convert values.
    stored = small_update_config(ppo, T, B, network="multi_input").to_dict()
    stored["agent"]["mask_actions"] = 1
    config = ml_collections.ConfigDict(stored)
    message = "agent.mask_actions must be a bool (True or False), got 1"
    for check in (
        lambda: defaults.check_builtin_ranges(config.agent),  # sebulba.main, before JAX.
        lambda: ppo.make(config, MASKED_SPEC, derive_sizes(config)),
    ):
        with pytest.raises(ConfigError) as raised:
            check()
        assert str(raised.value) == message


@pytest.mark.parametrize("env_id", ["Maze-v0", "jumanji:Maze-v0"], ids=["sebulba", "anakin"])
def test_ppo_first_ratio_is_one_with_masks_at_lag_0(env_id, tmp_path):
    # One epoch of one minibatch at policy lag 0: the learner recomputes, from the same
    # parameters and masks, exactly the policy the actors sampled from.
    config = load_config("ppo_minigrid", "Maze-v0,smoke")
    config.env.id = env_id
    config.pipeline.policy_lag = 0
    config.agent.update_epochs = 1
    config.agent.num_minibatches = 1
    config.log.tensorboard = False
    config.log.every_updates = 1
    config.total_timesteps = config.env.num_envs * config.agent.num_steps * 3
    train.train(config, str(tmp_path))
    lines = read_metrics(str(tmp_path))
    assert len(lines) == 3
    for line in lines:
        assert line["clipfrac"] == 0.0 and abs(line["approx_kl"]) < 1e-6
    # Walls leave fewer than the 4 moves legal in many cells: the entropy is over the
    # legal ones only, well below a near-uniform policy's log 4.
    assert lines[0]["entropy"] < math.log(4) - 0.1
