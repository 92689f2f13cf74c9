"""sebulba.plot: curves from real run directories, seeds grouped, Atari aggregates."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from sebulba import plot, train
from tests import minimal_agent
from tests.helpers import agent_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def seed_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    dirs = []
    for seed in (1, 2):
        workdir = str(base / f"seed{seed}")
        train.train(agent_config(minimal_agent, seed=seed, total_timesteps=8 * 16 * 12), workdir)
        dirs.append(workdir)
    return dirs


def test_plot_writes_a_png_from_real_runs(seed_runs, tmp_path):
    out = tmp_path / "curves.png"
    result = subprocess.run(
        [sys.executable, "-m", "sebulba.plot", *seed_runs, f"--out={out}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads(result.stdout)
    # Runs that differ only by seed are one curve with two runs.
    assert summary["curves"] == {"tests.minimal_agent CartPole-v1 lag=1": 2}


def test_plot_rejects_a_directory_that_is_not_a_run(tmp_path):
    assert plot.main([str(tmp_path), f"--out={tmp_path / 'x.png'}"]) == 2
    assert not (tmp_path / "x.png").exists()


def test_bootstrap_band_contains_the_mean():
    xs = [np.arange(10.0), np.arange(10.0)]
    ys = [np.arange(10.0), np.arange(10.0) + 2]
    grid, mean, low, high = plot.mean_and_band(xs, ys)
    np.testing.assert_allclose(mean, np.interp(grid, xs[0], ys[0]) + 1)
    assert np.all(low <= mean + 1e-9) and np.all(mean <= high + 1e-9)
    assert np.all(low >= np.interp(grid, xs[0], ys[0]) - 1e-9)


def _fake_atari_run(path, game, seed, final_return):
    os.makedirs(path)
    config = {
        "seed": seed,
        "env": {"id": game},
        "agent": {"name": "ppo"},
        "pipeline": {"policy_lag": 1},
    }
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for step in (1000, 2000):
            f.write(
                json.dumps(
                    {
                        "global_step": step,
                        "wall_time_s": step / 100,
                        "episodic_return": final_return,
                    }
                )
                + "\n"
            )
    with open(os.path.join(path, "summary.json"), "w") as f:
        json.dump({"mean_return": final_return}, f)


def test_atari_aggregates_use_human_normalized_scores(tmp_path):
    # Pong: random -20.7, human 14.6; Breakout: random 1.7, human 30.5.
    dirs = []
    for seed, (pong, breakout) in enumerate([(14.6, 30.5), (-20.7, 1.7), (-3.05, 16.1)]):
        for game, score in (("Pong-v5", pong), ("Breakout-v5", breakout)):
            path = str(tmp_path / f"{game}-{seed}")
            _fake_atari_run(path, game, seed, score)
            dirs.append(path)
    result = plot.plot(dirs, str(tmp_path / "atari.png"))
    median, low, high = result["atari_aggregates"]["ppo lag=1"]["median"]
    # Normalized scores are 1.0, 0.0 and 0.5 for both games: the median is 0.5.
    assert median == pytest.approx(0.5, abs=1e-6)
    assert low <= median <= high
    assert (tmp_path / "atari.png").exists()


def test_plot_creates_the_missing_folders_of_out(tmp_path):
    _fake_atari_run(str(tmp_path / "run"), "Pong-v5", 1, 0.0)
    out = tmp_path / "figures" / "today" / "curves.png"
    assert plot.main([str(tmp_path / "run"), f"--out={out}"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_out_that_cannot_be_written_fails_in_one_line(tmp_path, capsys):
    _fake_atari_run(str(tmp_path / "run"), "Pong-v5", 1, 0.0)
    (tmp_path / "notes.txt").write_text("")
    out = tmp_path / "notes.txt" / "curves.png"
    assert plot.main([str(tmp_path / "run"), f"--out={out}"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("sebulba.plot: error: the folder of --out") and "is a file" in line
