"""Evaluation and `load_policy` of Anakin runs (JAX envs): same contracts as envpool's."""

import json
import os

import jax
import numpy as np
import pytest

from sebulba import evaluate, load_policy, train
from sebulba.policy import PolicyError
from tests.helpers import load_config, run_evaluate_cli

pytest.importorskip("gymnax")

FIELDS = ("mean_return", "std_return", "min_return", "max_return", "episodes", "checkpoint")


def anakin_config(arg=None):
    config = load_config("ppo_cartpole_anakin", arg)
    config.log.tensorboard = False
    return config


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("anakin") / "smoke")
    train.train(anakin_config("smoke"), workdir)
    return workdir


def test_cli_writes_eval_json_and_is_deterministic_for_a_seed(smoke):
    result = run_evaluate_cli(f"--workdir={smoke}", "--episodes=6", "--seed=3")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "gymnax:CartPole-v1: 6 episodes" in result.stdout
    with open(os.path.join(smoke, "eval.json"), encoding="utf-8") as f:
        written = json.load(f)
    assert all(field in written for field in FIELDS) and written["greedy"] is False
    assert written["episodes"] == len(written["returns"]) == 6 and written["checkpoint"] == 4
    assert written["min_return"] <= written["mean_return"] <= written["max_return"]
    assert all(1 <= length <= 500 for length in written["lengths"])
    # In process (no second start-up): the same seed replays the episodes, whatever the
    # batching; another seed plays others.
    again = evaluate.evaluate(smoke, episodes=6, seed=3, num_envs=4)
    assert again["returns"] == written["returns"] and again["lengths"] == written["lengths"]
    assert evaluate.evaluate(smoke, episodes=6, seed=4)["returns"] != written["returns"]
    capped = evaluate.evaluate(smoke, episodes=3, seed=3, max_steps=5)
    assert capped["lengths"] == [min(5, n) for n in written["lengths"][:3]]


def test_animation_is_refused_in_one_line(smoke, tmp_path):
    result = run_evaluate_cli(f"--workdir={smoke}", f"--animation={tmp_path / 'a.gif'}")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is a JAX env" in lines[0], result.stderr
    assert not os.path.exists(tmp_path / "a.gif")


def test_load_policy_acts_on_a_batch_of_the_envs_observations(smoke):
    policy = load_policy(smoke)
    assert policy.env_spec.env_id == "gymnax:CartPole-v1" and policy.jax_env is not None
    _, obs = jax.vmap(policy.jax_env.reset)(jax.random.split(jax.random.key(0), 5))
    actions = policy(np.asarray(obs))
    assert actions.shape == (5,) and actions.dtype == np.int32
    assert ((0 <= actions) & (actions < 2)).all()
    greedy = load_policy(smoke, greedy=True)
    assert (greedy(obs) == greedy(obs)).all()  # The most likely action: no keys.
    with pytest.raises(PolicyError, match="render=True draws envpool envs only") as error:
        policy.make_envs(2, render=True)
    assert "\n" not in str(error.value)
    with pytest.raises(PolicyError, match="is not a batch"):
        policy(np.zeros((5, 3), np.float32))


def test_a_trained_policy_balances_the_pole(tmp_path):
    workdir = str(tmp_path / "full")
    train.train(anakin_config(), workdir)  # About 10 s on a CPU.
    result = evaluate.evaluate(workdir, episodes=20, greedy=True)
    assert result["episodes"] == 20 and result["mean_return"] >= 475, result["returns"]


def test_the_readmes_policy_loop_runs_on_an_anakin_workdir(smoke):
    """README, "Use a trained policy": make_envs, reset, then policy actions step the envs."""

    def play(seed):
        policy = load_policy(smoke, greedy=True)
        envs = policy.make_envs(3, seed=seed)
        obs, _ = envs.reset()
        observed, ended, returns = [obs], 0, []
        for _ in range(200):
            actions = policy(obs)
            obs, rewards, terminations, truncations, info = envs.step(
                policy.env_spec.action.to_env(actions)
            )
            assert obs.shape == (3, 4) and rewards.shape == (3,) and rewards.dtype == np.float32
            done = terminations | truncations
            ended += int(done.sum())
            returns += list(info["episode_return"][done])
            observed.append(obs)
        return np.stack(observed), ended, returns

    observed, ended, returns = play(seed=0)
    # An untrained greedy policy drops the pole within 200 steps; each episode's return is
    # its length in CartPole, and the next step is envpool's reset.
    assert ended >= 3 and all(1 <= r <= 200 for r in returns)
    again, _, _ = play(seed=0)
    assert (again == observed).all()  # Same seed, same episodes.
    assert not (play(seed=1)[0] == observed).all()
