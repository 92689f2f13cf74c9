"""Evaluation: deterministic episodes from a checkpoint, eval.json, clear refusals."""

import importlib.util
import json
import os
import subprocess
import sys

import envpool
import pytest

from sebulba import atari_scores, evaluate, train
from tests import minimal_agent
from tests.helpers import agent_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_config(name, arg=None):
    path = os.path.join(ROOT, "configs", f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg)


def run_evaluate_cli(*flags):
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "sebulba.evaluate", *flags],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("eval") / "run")
    train.train(agent_config(minimal_agent, ckpt__every_updates=3), workdir)
    return workdir


def test_evaluation_is_deterministic_for_a_seed(trained, tmp_path):
    first = evaluate.evaluate(trained, episodes=6, seed=3)
    with open(os.path.join(trained, "eval.json"), encoding="utf-8") as f:
        assert json.load(f) == json.loads(json.dumps(first))
    assert first["episodes"] == len(first["returns"]) == 6 and first["checkpoint"] == 6
    for key in ("mean_return", "std_return", "min_return", "max_return"):
        assert isinstance(first[key], float)
    assert first["min_return"] <= first["mean_return"] <= first["max_return"]
    assert "human_normalized_score" not in first  # CartPole is not Atari.
    # Same seed, other batching: identical episodes. Another seed: other episodes.
    again = evaluate.evaluate(trained, episodes=6, seed=3, num_envs=4)
    assert again["returns"] == first["returns"]
    assert evaluate.evaluate(trained, episodes=6, seed=4)["returns"] != first["returns"]
    older = evaluate.evaluate(
        trained, checkpoint=3, episodes=1, seed=3, animation=str(tmp_path / "a.gif")
    )
    assert older["checkpoint"] == 3 and older["global_step"] == 3 * 8 * 16
    from PIL import Image

    with Image.open(tmp_path / "a.gif") as gif:  # Pillow merges identical frames.
        assert 1 < gif.n_frames <= older["lengths"][0]


def test_evaluate_cli_prints_a_summary(trained):
    result = run_evaluate_cli(f"--workdir={trained}", "--episodes=2")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "checkpoint 6 (step 768) on CartPole-v1: 2 episodes, return" in result.stdout


def test_evaluate_refuses_a_workdir_without_checkpoints(tmp_path):
    workdir = tmp_path / "fresh"
    workdir.mkdir()
    config = agent_config(minimal_agent)
    (workdir / "config.json").write_text(json.dumps(config.to_dict()))
    result = run_evaluate_cli(f"--workdir={workdir}")
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [
        f"sebulba.evaluate: no checkpoint in {workdir}/checkpoints: nothing to evaluate"
    ]
    assert not (workdir / "eval.json").exists()
    with pytest.raises(evaluate.EvaluationError, match="not a sebulba workdir"):
        evaluate.evaluate(str(tmp_path / "missing"))


def test_atari_reference_scores_cover_atari_57():
    table = atari_scores.RANDOM_AND_HUMAN_SCORES
    assert len(table) == 57
    assert set(table) <= set(envpool.list_all_envs())
    assert atari_scores.human_normalized_score("Pong-v5", -20.7) == 0.0
    assert atari_scores.human_normalized_score("Pong-v5", 14.6) == pytest.approx(1.0)
    assert atari_scores.human_normalized_score("Breakout-v5", 30.5) == pytest.approx(1.0)
    assert atari_scores.human_normalized_score("CartPole-v1", 500.0) is None


def test_atari_evaluation_reports_the_human_normalized_score(tmp_path):
    config = load_config("ppo_atari", "smoke")
    config.agent.network = "nature_cnn"  # The cheaper network: this tests plumbing.
    config.log.tensorboard = False
    train.train(config, str(tmp_path))
    result = evaluate.evaluate(str(tmp_path), episodes=1, seed=0)
    random_score, human_score = atari_scores.RANDOM_AND_HUMAN_SCORES["Breakout-v5"]
    expected = (result["mean_return"] - random_score) / (human_score - random_score)
    assert result["human_normalized_score"] == pytest.approx(expected)
    assert result["lengths"][0] > 0


@pytest.mark.slow
def test_ppo_cartpole_checkpoint_evaluates_to_450(tmp_path):
    # The default 500k steps (~60 s): seeds 1-3 all evaluated to 500.0; at 350k,
    # one of two seeds fell short (305), so no smaller budget is reliable.
    config = load_config("ppo_cartpole")
    config.log.tensorboard = False
    train.train(config, str(tmp_path))
    result = evaluate.evaluate(str(tmp_path), episodes=20, seed=0)
    assert result["mean_return"] >= 450, result
