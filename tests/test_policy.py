"""`sebulba.load_policy`: a trained checkpoint's policy, usable on a batch of observations."""

import dataclasses
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys

import envpool
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sebulba
from sebulba import policy as policy_lib
from sebulba import train
from sebulba.agents import impala, ppo
from sebulba.agents.api import ArraySpec, Discrete, EnvSpec
from sebulba.agents.networks import make_network
from sebulba.config import base_config
from sebulba.config.sizes import derive_sizes
from sebulba.environments import envpool_pools, tasks
from sebulba.evaluate import evaluate
from tests import minimal_agent
from tests.helpers import agent_config, normalized_continuous_overrides

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A minimal-agent CartPole run with checkpoints after updates 3 and 6."""
    workdir = str(tmp_path_factory.mktemp("policy") / "run")
    train.train(agent_config(minimal_agent, ckpt__every_updates=3), workdir)
    return workdir


@pytest.fixture(scope="module")
def observations(trained):
    """32 CartPole observations [32, 4]: 16 as envpool returns them, and their mirror images.

    The mirrored states (CartPole is left-right symmetric) make both actions greedy somewhere.
    """
    envs = envpool_pools.make_envs(policy_lib.load_run_config(trained).env, 16, seed=123)
    obs, _ = envs.reset()
    for _ in range(3):
        obs, *_ = envs.step(np.zeros(16, np.int32))
    envs.close()
    return np.concatenate([obs, -obs])


def minimal_agent_logits(params, obs):
    """The minimal agent's linear policy, recomputed in numpy."""
    params = jax.device_get(params)
    return obs.reshape(len(obs), -1) @ params["w"] + params["b"]


def test_load_policy_acts_on_a_batch_of_observations(trained, observations):
    policy = sebulba.load_policy(trained)
    actions = policy(observations)
    assert isinstance(actions, np.ndarray) and actions.shape == (32,)
    assert actions.dtype == np.int32
    assert ((0 <= actions) & (actions < policy.env_spec.num_actions)).all()
    assert policy.checkpoint == 6 and policy.global_step == 6 * 8 * 16
    assert policy.config.env.id == "CartPole-v1" and not policy.greedy
    assert policy(observations[:5]).shape == (5,)  # Any batch size.


def test_greedy_actions_are_the_argmax_of_the_logits(trained, observations):
    policy = sebulba.load_policy(trained, greedy=True)
    expected = np.argmax(minimal_agent_logits(policy.params, observations), axis=-1)
    first = policy(observations)
    assert np.array_equal(first, expected)
    assert np.array_equal(policy(observations), first)  # Greedy ignores the call count.
    assert len(set(first.tolist())) == 2  # The checkpoint prefers either action somewhere.


def test_sampling_differs_between_calls_and_repeats_between_loads(trained, observations):
    policy = sebulba.load_policy(trained)
    calls = [policy(observations) for _ in range(3)]
    assert not np.array_equal(calls[0], calls[1]) and not np.array_equal(calls[1], calls[2])
    again = sebulba.load_policy(trained)
    assert all(np.array_equal(call, again(observations)) for call in calls)
    other_seed = sebulba.load_policy(trained, seed=policy.seed + 1)
    assert not np.array_equal(other_seed(observations), calls[0])


def test_sampled_actions_follow_the_policy(trained):
    # Many rows of one observation: the sampled frequency matches softmax(logits).
    policy = sebulba.load_policy(trained)
    envs = envpool_pools.make_envs(policy.config.env, 1, seed=0)
    obs = np.repeat(envs.reset()[0], 4000, axis=0)
    envs.close()
    probability = jax.nn.softmax(minimal_agent_logits(policy.params, obs[:1]))[0, 1]
    assert np.mean(policy(obs) == 1) == pytest.approx(float(probability), abs=0.03)


def test_checkpoint_selects_the_update(trained, observations):
    older = sebulba.load_policy(trained, checkpoint=3, greedy=True)
    newest = sebulba.load_policy(trained, checkpoint=6, greedy=True)
    assert (older.checkpoint, older.global_step) == (3, 3 * 8 * 16)
    assert newest.checkpoint == 6
    assert not np.allclose(older.params["w"], newest.params["w"])
    expected = np.argmax(minimal_agent_logits(older.params, observations), axis=-1)
    assert np.array_equal(older(observations), expected)


def test_a_missing_checkpoint_fails_in_one_line_naming_the_available_ones(trained):
    with pytest.raises(sebulba.PolicyError) as raised:
        sebulba.load_policy(trained, checkpoint=4)
    message = str(raised.value)
    assert "\n" not in message
    assert message == (f"no checkpoint 4 in {trained}/checkpoints: available checkpoints are 3, 6")
    with pytest.raises(sebulba.PolicyError, match="not a sebulba workdir"):
        sebulba.load_policy(os.path.join(trained, "missing"))


def test_observations_of_the_wrong_shape_fail_in_one_line(trained, observations):
    policy = sebulba.load_policy(trained)
    with pytest.raises(sebulba.PolicyError, match=r"obs of shape \(4,\) is not a batch"):
        policy(observations[0])


@pytest.mark.parametrize("agent_module", [ppo, impala], ids=["ppo", "impala"])
def test_builtin_agents_act_greedy_is_the_argmax_of_the_network(agent_module):
    config = base_config(agent_module.get_config())
    config.env.num_envs = 8
    env_spec = EnvSpec("CartPole-v1", ArraySpec((4,), "float32"), Discrete(2))
    agent = agent_module.make(config, env_spec, derive_sizes(config))
    params = agent.policy_params(agent.init(jax.random.key(0)))
    # Larger weights than at init, so the two actions' logits differ clearly.
    params = jax.tree.map(lambda x: 30.0 * x, params)
    obs = jax.random.normal(jax.random.key(1), (64, 4))
    logits, _ = make_network(config.agent.network, Discrete(2)).apply(params, obs)
    greedy = jax.jit(agent.act_greedy)(params, obs)
    assert greedy.dtype == jnp.int32 and greedy.shape == (64,)
    assert np.array_equal(greedy, np.argmax(logits, axis=-1))
    assert 0 < int(greedy.sum()) < 64  # Both actions occur: not a constant.


def test_import_sebulba_is_cheap_and_exports_the_public_api():
    assert sebulba.load_policy is policy_lib.load_policy
    assert {"load_policy", "train", "base_config", "Agent"} <= set(sebulba.__all__)
    assert all(getattr(sebulba, name) is not None for name in sebulba.__all__)
    code = "import sys, sebulba; print('jax' in sys.modules)"
    env = dict(os.environ, PYTHONPATH=ROOT)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert result.stdout.strip() == "False"


def test_greedy_needs_an_agent_with_act_greedy(trained, monkeypatch):
    make = minimal_agent.make

    def make_without_greedy(config, env_spec, sizes):
        return dataclasses.replace(make(config, env_spec, sizes), act_greedy=None)

    monkeypatch.setattr(minimal_agent, "make", make_without_greedy)
    with pytest.raises(sebulba.PolicyError, match="defines no act_greedy"):
        sebulba.load_policy(trained, greedy=True)
    assert sebulba.load_policy(trained)(np.zeros((2, 4), np.float32)).shape == (2,)


def test_the_readme_snippet_runs(trained):
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    section = readme[readme.index("## Use a trained policy") :]
    snippet = re.search(r"```python\n(.*?)```", section, flags=re.DOTALL).group(1)
    assert '"runs/ppo_cartpole"' in snippet
    assert "policy.make_envs(4, seed=0)" in snippet  # The envs that match the policy.
    namespace = {}
    exec(snippet.replace('"runs/ppo_cartpole"', repr(trained)), namespace)  # noqa: S102
    assert namespace["obs"].shape == (4, 4) and namespace["policy"].calls == 100


def test_a_run_written_before_newer_config_keys_still_loads(trained, observations, tmp_path):
    older = tmp_path / "older"
    shutil.copytree(trained, older)
    with open(older / "config.json") as f:
        stored = json.load(f)
    del stored["env"]["use_fire_reset"], stored["log"]["console_every_s"]
    with open(older / "config.json", "w") as f:
        json.dump(stored, f)
    policy = sebulba.load_policy(str(older), greedy=True)
    assert policy.config.env.use_fire_reset is False  # The behaviour that run had.
    assert policy.config.mesh.learner_device_ids == (0,)
    expected = sebulba.load_policy(trained, greedy=True)(observations)
    assert np.array_equal(policy(observations), expected)


@pytest.mark.parametrize("agent_module", [ppo, impala], ids=["ppo", "impala"])
def test_a_normalized_run_acts_with_its_stored_statistics(tmp_path, agent_module):
    # Pendulum (Box actions) with observation normalisation and reward scaling.
    workdir = str(tmp_path / "run")
    config = agent_config(agent_module, **normalized_continuous_overrides())
    state = train.train(config, workdir)
    policy = sebulba.load_policy(workdir, greedy=True)
    stats = jax.device_get(policy.params["observation_stats"])
    learned = jax.device_get(state.normalization.observation)
    for restored, final in zip(jax.tree.leaves(stats), jax.tree.leaves(learned), strict=True):
        np.testing.assert_array_equal(restored, final)
    assert float(stats.count) == pytest.approx(8 * 16 * 6)

    envs = envpool_pools.make_envs(config.env, 8, seed=5)
    obs, _ = envs.reset()
    envs.close()
    network = make_network("mlp", policy.env_spec.action, "orthogonal", policy.env_spec.observation)
    normalized = np.clip((obs - stats.mean) / np.sqrt(stats.var + 1e-8), -10, 10)
    network_params = policy.params["network"]
    expected = network.apply(network_params, normalized.astype(np.float32))[0]["mean"]
    np.testing.assert_allclose(policy(obs), expected, rtol=1e-5, atol=1e-6)
    # Not vacuous: the raw observations would give other actions.
    raw = network.apply(network_params, obs.astype(np.float32))[0]["mean"]
    assert not np.allclose(raw, expected, atol=1e-4)
    result = evaluate(workdir, episodes=2, num_envs=2)
    assert result["episodes"] == 2 and np.isfinite(result["mean_return"])


def test_a_joint_runs_policy_loads_and_acts_in_every_task(tmp_path):
    # configs/ppo_joint.py:smoke trains one policy on several MiniGrid tasks; `env.id` is
    # ignored when `env.ids` names them, so it must not decide the policy's spaces.
    spec = importlib.util.spec_from_file_location(
        "ppo_joint", os.path.join(ROOT, "configs", "ppo_joint.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config("smoke")
    config.env.id = "CartPole-v1"
    config.log.tensorboard = False
    train.train(config, str(tmp_path))
    policy = sebulba.load_policy(str(tmp_path), greedy=True)
    assert policy.env_spec.env_id == config.env.ids[0]
    assert policy.config.env.ids == tuple(config.env.ids)
    for task_id in config.env.ids:
        envs = envpool_pools.make_envs(tasks.task_env_config(config.env, task_id), 4, seed=5)
        obs, _ = envs.reset()
        actions = policy(obs)
        assert actions.shape == (4,) and ((0 <= actions) & (actions < 7)).all()
        envs.step(policy.env_spec.action.to_env(actions))
        envs.close()
    # policy.make_envs plays one named task of a joint run, and refuses to guess which.
    assert policy.task_ids == tuple(config.env.ids)
    with pytest.raises(sebulba.PolicyError, match=r"trained on \d+ tasks: pass task= one of"):
        policy.make_envs(2)
    with pytest.raises(sebulba.PolicyError, match="is not one this run trained on"):
        policy.make_envs(2, task="CartPole-v1")
    for task_id in config.env.ids:
        envs = policy.make_envs(2, seed=5, task=task_id)
        policy.check_env(envs)
        obs, _ = envs.reset()
        reference = envpool_pools.make_envs(tasks.task_env_config(config.env, task_id), 2, seed=5)
        np.testing.assert_array_equal(obs["image"], reference.reset()[0]["image"])
        envs.close()
        reference.close()


def test_policy_make_envs_builds_the_runs_env_settings(trained, tmp_path):
    # A run that hides CartPole's velocities (env.observation_indices): its envs observe all
    # 4 components and the policy keeps 2; check_env compares what the envs return.
    hidden = tmp_path / "hidden"
    train.train(agent_config(minimal_agent, env__observation_indices=(0, 2)), str(hidden))
    policy = sebulba.load_policy(str(hidden))
    envs = policy.make_envs(3, seed=7)
    policy.check_env(envs)
    obs, _ = envs.reset()
    assert obs.shape == (3, 4) and policy(obs).shape == (3,)
    envs.close()
    # Another task with other spaces is refused, naming what differs, in one line.
    acrobot = envpool_pools.make_envs(
        agent_config(minimal_agent, env__id="Acrobot-v1").env, 2, seed=0
    )
    with pytest.raises(sebulba.PolicyError) as refused:
        sebulba.load_policy(trained).check_env(acrobot)
    message = str(refused.value)
    assert "\n" not in message
    assert "observations float32 (6,) differ from the policy's float32 (4,)" in message
    assert "policy.make_envs(num_envs, seed)" in message
    acrobot.close()


@pytest.fixture(scope="module")
def atari_run(tmp_path_factory):
    """A 2-update Breakout-v5 run with the Machado et al. protocol: the full 18 actions."""
    spec = importlib.util.spec_from_file_location(
        "ppo_atari", os.path.join(ROOT, "configs", "ppo_atari.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config("smoke")
    config.agent.network = "nature_cnn"  # The cheaper network: this tests env checks.
    config.log.tensorboard = False
    workdir = str(tmp_path_factory.mktemp("atari") / "run")
    train.train(config, workdir)
    return workdir


def test_an_atari_policy_refuses_envpools_default_action_space(atari_run):
    # The case: an 18-action policy on envpool's default 4-action Breakout-v5
    # returned invalid actions for nearly every row, silently.
    policy = sebulba.load_policy(atari_run)
    assert policy.env_spec.action == Discrete(18)
    default = envpool.make("Breakout-v5", env_type="gymnasium", num_envs=2, batch_size=2)
    with pytest.raises(sebulba.PolicyError) as refused:
        policy.check_env(default)
    message = str(refused.value)
    assert "\n" not in message
    assert "actions Discrete(4) differ from the policy's Discrete(18)" in message
    assert "env.full_action_space=True" in message
    default.close()
    # The envs the policy offers match it, and every action is one of the env's.
    envs = policy.make_envs(2, seed=3)
    policy.check_env(envs)
    assert envs.action_space.n == 18
    obs, _ = envs.reset()
    for _ in range(5):
        actions = policy(obs)
        assert ((0 <= actions) & (actions < envs.action_space.n)).all()
        obs, *_ = envs.step(policy.env_spec.action.to_env(actions))
    envs.close()
    # Screens of another dtype kind (floats for uint8 frames) are refused, in one line.
    with pytest.raises(sebulba.PolicyError, match=r"obs of dtype float32 cannot be Breakout-v5"):
        policy(obs.astype(np.float32) / 255)
