"""General spaces: specs from envpool's spaces, env families, and rollouts of any space."""

import dataclasses

import gymnasium
import jax
import numpy as np
import pytest

import sebulba
from sebulba import train
from sebulba.agents import impala, ppo
from sebulba.agents.api import ArraySpec, Box, Discrete, MultiDiscrete
from sebulba.environments import envpool_pools, envpool_registry, spaces, task_checks
from sebulba.errors import ConfigError
from sebulba.evaluate import evaluate
from tests.helpers import agent_config, make_pipeline


def _env_spec(env_id):
    config = agent_config(ppo, env__id=env_id)
    pool = envpool_pools.make_envs(config.env, 2, seed=0)
    try:
        return envpool_pools.env_spec_of(config.env, pool), pool.reset()[0]
    finally:
        pool.close()


def test_specs_describe_each_kind_of_envpool_space():
    cartpole, _ = _env_spec("CartPole-v1")
    assert cartpole.observation == ArraySpec((4,), "float32") and cartpole.action == Discrete(2)
    pendulum, _ = _env_spec("Pendulum-v1")
    assert pendulum.action == Box((1,), (-2.0,), (2.0,))
    # MuJoCo's float64 observations are float32 on the host; its float64 Box actions too.
    hopper, obs = _env_spec("Hopper-v4")
    assert hopper.observation == ArraySpec((11,), "float32") and obs.dtype == np.float64
    assert hopper.action.shape == (3,) and hopper.action.dtype == "float32"
    assert spaces.host_observation(hopper.observation, obs).dtype == np.float32
    cheetah, obs = _env_spec("CheetahRun-v1")
    assert cheetah.observation == {
        "position": ArraySpec((8,), "float32"),
        "velocity": ArraySpec((9,), "float32"),
    }
    converted = spaces.host_observation(cheetah.observation, obs)
    assert {k: (v.dtype, v.shape) for k, v in converted.items()} == {
        "position": (np.float32, (2, 8)),
        "velocity": (np.float32, (2, 9)),
    }
    minigrid, _ = _env_spec("MiniGrid-Empty-5x5-v0")
    assert minigrid.observation == {
        "direction": ArraySpec((), "int32", num_values=4),
        "image": ArraySpec((7, 7, 3), "uint8"),
        "mission": ArraySpec((96,), "uint8"),
    }
    assert minigrid.action == Discrete(7)
    # Helpers of single-array agents say plainly when the spec is not what they assume.
    with pytest.raises(ConfigError, match="observes a dict"):
        _ = minigrid.obs_shape
    with pytest.raises(ConfigError, match="not a Discrete action"):
        _ = pendulum.num_actions


@pytest.mark.parametrize(
    "env_id",
    [
        "MountainCar-v0",
        "MountainCarContinuous-v0",
        "LunarLanderContinuous-v2",
        "BipedalWalker-v3",
        "HalfCheetah-v4",
        "WalkerWalk-v1",
        "MiniGrid-DoorKey-5x5-v0",
        "BabyAI-GoToRedBall-v0",
        "Breakout-v5",
        "phys2d/CartPole-v1",
        "CarRacing-v2",
        "Taxi-v3",
        "FetchReach-v4",
        "AdroitHandDoor-v1",
        "MetaWorld/Reach-v3",
        "myoElbowPose1D6MRandom-v0",
        "MyoSuite/myoElbowPose1D6MRandom-v0",
        "Go1Getup-v1",
        "Jumanji/Maze-v0",
        "Play2048-v1",
        "Highway-v0",
        "D1Basic-v1",
        "gfootball/academy_empty_goal-v1",
    ],
)
def test_every_supported_family_is_accepted(env_id):
    task_checks.check_env_id(env_id)
    assert env_id in envpool_registry.supported_env_ids()


def test_unknown_and_untrainable_env_ids_fail_in_one_line(monkeypatch):
    with pytest.raises(ConfigError, match=r"^env\.id 'HalfCheetah-v9' .*'HalfCheetah-v4'") as e:
        task_checks.check_env_id("HalfCheetah-v9")
    assert "\n" not in str(e.value)
    refused = {
        "Chess-v1": "is a two-player game: needs self-play, which sebulba runs on Pgx's JAX",
        "SparrowMahjong-v1": "is a three-player game: needs self-play",
        "intersection-multi-agent-v1": "drives 2 vehicles per env.*multi-agent training",
        "MultiDuel-v1": "is a multiplayer ViZDoom scenario: needs other players",
    }
    for env_id, reason in refused.items():
        with pytest.raises(ConfigError, match=rf"^env\.ids\[1\] '{env_id}' {reason}"):
            task_checks.check_env_id(env_id, "env.ids[1]")
    # A family envpool may add later is refused naming the ones sebulba knows.
    families = {k: v for k, v in envpool_registry.SUPPORTED_FAMILIES.items() if k != "envpool.pgx"}
    monkeypatch.setattr(task_checks, "SUPPORTED_FAMILIES", families)
    with pytest.raises(ConfigError, match=r"^env\.id 'Go9x9-v1' .*envpool\.pgx.* not supported"):
        task_checks.check_env_id("Go9x9-v1")


class _FakePool:
    """A pool with envpool's gymnasium interface and any spaces (envpool has no
    MultiDiscrete task): float64 observations, rewards 1, episodes of 5 steps."""

    def __init__(self, num_envs, observation_space, action_space):
        self.num_envs = num_envs
        self.observation_space, self.action_space = observation_space, action_space
        self.stepped_with = []
        self._steps = np.zeros(num_envs, np.int64)

    def _obs(self):
        return np.tile(self._steps[:, None], (1, 3)).astype(np.float64)

    def reset(self):
        self._steps[:] = 0
        return self._obs(), {}

    def step(self, actions):
        self.stepped_with.append(np.array(actions))
        self._steps += 1
        terminated = self._steps % 5 == 0
        return self._obs(), np.ones(self.num_envs), terminated, terminated & False, {}

    def close(self):
        pass


def test_unsupported_spaces_fail_in_one_line_naming_env_id_and_space():
    box = gymnasium.spaces.Box(-1, 1, (3,), np.float64)
    text = gymnasium.spaces.Text(5)
    with pytest.raises(
        ConfigError, match=r"^env\.id 'Fake-v0' has an unsupported action space Text"
    ):
        spaces.env_spec_of("Fake-v0", _FakePool(1, box, text))
    nested = gymnasium.spaces.Dict({"pair": gymnasium.spaces.Tuple((box, box))})
    with pytest.raises(ConfigError, match=r"^env\.id 'Fake-v0' .*observation space 'pair': Tuple"):
        spaces.env_spec_of("Fake-v0", _FakePool(1, nested, gymnasium.spaces.Discrete(2)))
    with pytest.raises(ConfigError, match="unsupported action space Box.*int"):
        spaces.action_spec_of(gymnasium.spaces.Box(0, 3, (2, 2), np.int64), "Fake-v0")


def test_nested_dicts_multibinary_and_integer_boxes_map_onto_the_spec():
    Box_, Discrete_ = gymnasium.spaces.Box, gymnasium.spaces.Discrete
    observation = gymnasium.spaces.Dict(
        {
            "agent": gymnasium.spaces.Dict({"row": Discrete_(10), "col": Discrete_(10)}),
            "walls": gymnasium.spaces.MultiBinary((3, 3)),
            "position": Discrete_(21, start=-1),
            "weights": Box_(0, 1, (5,), np.float64),
        }
    )
    spec = spaces.observation_spec_of(observation, "Fake-v0")
    # Nested names joined by "_"; 0/1 planes as float32; a Discrete not from 0 a number.
    assert spec == {
        "agent_row": ArraySpec((), "int32", num_values=10),
        "agent_col": ArraySpec((), "int32", num_values=10),
        "walls": ArraySpec((3, 3), "float32"),
        "position": ArraySpec((), "int32"),
        "weights": ArraySpec((5,), "float32"),
    }
    obs = {
        "agent": {"row": np.array([1, 2]), "col": np.array([3, 4])},
        "walls": np.ones((2, 3, 3), np.int8),
        "position": np.array([-1, 20]),
        "weights": np.zeros((2, 5)),
    }
    converted = spaces.host_observation(spec, obs)
    assert sorted(converted) == sorted(spec)
    np.testing.assert_array_equal(converted["agent_col"], [3, 4])
    assert converted["walls"].dtype == np.float32 and converted["position"].tolist() == [-1, 20]
    clash = gymnasium.spaces.Dict(
        {"a_b": Discrete_(2), "a": gymnasium.spaces.Dict({"b": Discrete_(2)})}
    )
    with pytest.raises(ConfigError, match="two entries named 'a_b'"):
        spaces.observation_spec_of(clash, "Fake-v0")
    # An integer Box from 0 (Jumanji's BinPack) is the MultiDiscrete of its bounds + 1.
    binpack = Box_(0, np.array([39, 19]), (2,), np.int32)
    assert spaces.action_spec_of(binpack, "Fake-v0") == MultiDiscrete((40, 20))
    with pytest.raises(ConfigError, match="unsupported action space"):
        spaces.action_spec_of(Box_(-1, 3, (2,), np.int32), "Fake-v0")


def test_box_actions_are_clipped_for_the_env_only():
    action = Box((2,), (-1.0, 0.0), (1.0, 2.0))
    sampled = np.array([[-3.0, 1.0], [0.5, 7.0]], np.float32)
    np.testing.assert_array_equal(action.to_env(sampled), [[-1.0, 1.0], [0.5, 2.0]])
    assert sampled[0, 0] == -3.0  # The sample itself is kept for learning.


def _record_rollouts(setup, envs_per_thread=None, env_spec=None, agent=None):
    """Runs the pipeline; returns the env spec, the rollout struct and every global rollout."""
    setup = dataclasses.replace(
        setup,
        envs_per_thread=envs_per_thread or setup.envs_per_thread,
        env_spec=env_spec or setup.env_spec,
        agent=agent or setup.agent,
    )
    state = train.init_learner_state(setup)
    pipeline = make_pipeline(setup, seed=0, policy_lag=1, clip_rewards=False)
    rollouts = []
    assemble = pipeline._assemble

    def assemble_and_record(actor_rollouts):
        rollout = assemble(actor_rollouts)
        rollouts.append(rollout)
        return rollout

    pipeline._assemble = assemble_and_record
    pipeline.run(state)
    return setup.env_spec, pipeline.rollout_struct(state), rollouts


def _assert_rollout_follows_the_spec(spec, struct, rollout, T, B):
    expected_obs = spaces.observation_struct(spec.observation, T + 1, B)
    obs_shapes = jax.tree.map(lambda x: (x.shape, x.dtype), rollout.obs)
    assert obs_shapes == jax.tree.map(lambda x: (x.shape, x.dtype), expected_obs)
    assert rollout.actions.shape == (T, B, *spec.action.shape)
    assert rollout.actions.dtype == np.dtype(spec.action.dtype)
    for leaf, described in zip(jax.tree.leaves(rollout), jax.tree.leaves(struct), strict=True):
        assert (leaf.shape, leaf.dtype) == (described.shape, described.dtype)
        assert leaf.sharding == described.sharding
        axis = 0 if leaf.ndim == 1 else 1  # env_ids [B]; every other leaf [T (+ 1), B, ...].
        assert leaf.sharding.spec[axis] == "batch"


@pytest.mark.parametrize(
    "agent_module, env_id, network",
    [
        (ppo, "CartPole-v1", "mlp"),
        (ppo, "MountainCarContinuous-v0", "mlp"),
        (impala, "Pendulum-v1", "mlp"),
        (ppo, "CheetahRun-v1", "multi_input"),
        (impala, "MiniGrid-Empty-5x5-v0", "multi_input"),
        # Nested dicts, MultiBinary masks and Discrete entries (Jumanji's Maze); an
        # integer-Box action as a MultiDiscrete (BinPack); one Discrete state (Taxi).
        (ppo, "Maze-v0", "multi_input"),
        (impala, "BinPack-v2", "multi_input"),
        (ppo, "Taxi-v3", "multi_input"),
    ],
)
def test_rollouts_of_every_space_reach_the_learner_as_the_spec_says(agent_module, env_id, network):
    T, B = 4, 8
    config = agent_config(
        agent_module,
        env__id=env_id,
        agent__network=network,
        agent__num_steps=T,
        agent__num_minibatches=2,
        mesh__learner_device_ids=[1, 2],
        total_timesteps=T * B * 2,
    )
    spec, struct, rollouts = _record_rollouts(train.prepare(config))
    assert len(rollouts) == 2
    for rollout in rollouts:
        _assert_rollout_follows_the_spec(spec, struct, rollout, T, B)
    if isinstance(spec.action, Box):
        # The Gaussian's samples (std 1 at init) leave MountainCarContinuous' [-1, 1] and
        # Pendulum's [-2, 2] now and then; they are stored as sampled.
        actions = np.concatenate([np.asarray(r.actions) for r in rollouts])
        assert np.abs(actions).max() > spec.action.high[0]


def test_multi_discrete_actions_round_trip_and_the_env_steps_with_them():
    T, B = 4, 8
    config = agent_config(
        ppo, agent__num_steps=T, agent__num_minibatches=2, total_timesteps=T * B * 2
    )
    setup = train.prepare(config)
    observation = gymnasium.spaces.Box(-np.inf, np.inf, (3,), np.float64)
    action = gymnasium.spaces.MultiDiscrete([3, 5])
    pool = _FakePool(B, observation, action)
    env_spec = spaces.env_spec_of("FakeMultiDiscrete-v0", pool)
    assert env_spec.action == MultiDiscrete((3, 5))
    agent = ppo.make(config, env_spec, setup.sizes)
    spec, struct, rollouts = _record_rollouts(setup, [pool], env_spec, agent)
    for rollout in rollouts:
        _assert_rollout_follows_the_spec(spec, struct, rollout, T, B)
    # The env stepped with exactly the stored actions, every component in its range.
    stepped = np.stack(pool.stepped_with)  # [2 T, B, 2]
    stored = np.concatenate([np.asarray(r.actions) for r in rollouts])
    np.testing.assert_array_equal(stepped, stored)
    assert stepped.min() >= 0 and (stepped.max(axis=(0, 1)) < [3, 5]).all()
    assert len(np.unique(stepped[..., 1])) > 3  # Samples, not a constant.


@pytest.mark.parametrize("env_id", ["CheetahRun-v1", "MiniGrid-Empty-5x5-v0", "Maze-v0"])
def test_dict_observation_tasks_train_evaluate_and_load(tmp_path, env_id):
    config = agent_config(
        ppo,
        env__id=env_id,
        env__num_envs=4,
        agent__network="multi_input",
        agent__num_steps=8,
        agent__num_minibatches=2,
        total_timesteps=4 * 8 * 2,
    )
    workdir = str(tmp_path / "run")
    train.train(config, workdir)
    policy = sebulba.load_policy(workdir)
    pool = envpool_pools.make_envs(config.env, 3, seed=1)
    actions = policy(pool.reset()[0])
    pool.close()
    assert actions.shape == (3, *policy.env_spec.action.shape)
    if env_id != "CheetahRun-v1":  # Maze: envpool's nested dicts, flattened alike.
        result = evaluate(workdir, episodes=2, num_envs=2)
        assert result["episodes"] == 2 and np.isfinite(result["mean_return"])
    with pytest.raises(sebulba.PolicyError, match="is not a batch"):
        policy(np.zeros((3, 4), np.float32))
