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


def _fake_joint_run(path, ids, seed, task_returns):
    """A multi-task run dir: metrics lines with `episodic_return/<task id>` per task.

    `task_returns` maps each task id to its return at steps 1000, 2000, 3000 (None: no
    episode of that task ended in that window).
    """
    os.makedirs(path)
    config = {
        "seed": seed,
        "env": {"id": ids[0], "ids": list(ids)},
        "agent": {"name": "ppo"},
        "pipeline": {"policy_lag": 1},
    }
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for index, step in enumerate((1000, 2000, 3000)):
            line = {"global_step": step, "wall_time_s": step / 100}
            values = [task_returns[t][index] for t in ids if task_returns[t][index] is not None]
            line["episodic_return"] = float(np.mean(values)) if values else None
            for task_id in ids:
                line[f"episodic_return/{task_id}"] = task_returns[task_id][index]
            f.write(json.dumps(line) + "\n")


def test_a_joint_run_gets_a_panel_per_task_and_the_mean_over_tasks(tmp_path):
    from PIL import Image

    ids = ("CartPole-v0", "CartPole-v1")
    paths = [str(tmp_path / f"joint{seed}") for seed in (1, 2)]
    _fake_joint_run(
        paths[0], ids, 1, {"CartPole-v0": [10, None, 30], "CartPole-v1": [None, 200, 400]}
    )
    _fake_joint_run(paths[1], ids, 2, {"CartPole-v0": [20, 20, 20], "CartPole-v1": [100, 100, 100]})
    # A one-task run beside them is drawn in the panel of its task.
    _fake_atari_run(str(tmp_path / "single"), "CartPole-v1", 1, 50.0)
    run = plot.load_run(paths[0])
    np.testing.assert_array_equal(run.task_returns["CartPole-v0"][0], [1000, 3000])
    np.testing.assert_array_equal(run.task_returns["CartPole-v1"][1], [200, 400])
    # Each task at its newest return; none yet for CartPole-v1 at step 1000.
    steps, values, kind = plot.task_aggregate(run)
    np.testing.assert_array_equal(steps, [2000, 3000])
    np.testing.assert_allclose(values, [(10 + 200) / 2, (30 + 400) / 2])
    assert kind == "mean return over tasks"
    out = tmp_path / "joint.png"
    result = plot.plot([*paths, str(tmp_path / "single")], str(out))
    joint, single = "ppo CartPole-v0+CartPole-v1 lag=1", "ppo CartPole-v1 lag=1"
    assert result["curves"] == {joint: 2, single: 1}
    assert result["tasks"] == {"CartPole-v0": {joint: 2}, "CartPole-v1": {joint: 2, single: 1}}
    assert result["task_aggregates"] == {joint: "mean return over tasks"}
    with Image.open(out) as image:  # Three panels side by side: two tasks and the aggregate.
        assert image.size == (1500, 400)


def test_a_joint_atari_run_aggregates_the_median_human_normalized_score(tmp_path):
    # Random and human scores: Pong -20.7, 14.6; Breakout 1.7, 30.5; Boxing 0.1, 12.1;
    # Freeway 0.0, 29.6.
    ids = ("Pong-v5", "Breakout-v5", "Boxing-v5", "Freeway-v5")
    scores = {"Pong-v5": [-20.7, 14.6, -3.05], "Breakout-v5": [30.5, 1.7, 30.5]}
    scores["Boxing-v5"] = [0.1, 0.1, 12.1]
    scores["Freeway-v5"] = [0.0, 29.6, 29.6]
    _fake_joint_run(str(tmp_path / "run"), ids, 1, scores)
    steps, values, kind = plot.task_aggregate(plot.load_run(str(tmp_path / "run")))
    assert kind == "median human-normalized score"
    # Normalized: (0, 1, 0, 0), (1, 0, 0, 1), (0.5, 1, 1, 1): medians 0, 0.5 and 1.
    np.testing.assert_allclose(values, [0.0, 0.5, 1.0], atol=1e-9)
    result = plot.plot([str(tmp_path / "run")], str(tmp_path / "atari.png"))
    assert list(result["tasks"]) == list(ids)
    assert result["task_aggregates"] == {"ppo 4 tasks lag=1": "median human-normalized score"}


def _fake_cartpole_run(path, seed, wall_offset):
    os.makedirs(path)
    config = {"seed": seed, "env": {"id": "Acrobot-v1"}, "agent": {"name": "impala"}}
    config["pipeline"] = {"policy_lag": 1}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for step in (1000, 2000, 3000):
            line = {"global_step": step, "wall_time_s": wall_offset + step / 1000}
            f.write(json.dumps({**line, "episodic_return": -500.0 + step / 10}) + "\n")
    with open(os.path.join(path, "summary.json"), "w") as f:
        json.dump({"mean_return": -200.0}, f)


def test_seeds_whose_times_do_not_overlap_are_drawn_alone_with_a_note(tmp_path, capsys):
    # Seed 1 trained from 1 s to 3 s, seed 2 from 11 s to 13 s (a slower machine): no
    # wall-clock range is shared, so there is no mean to draw; each seed is drawn, and
    # the figure says why. Against env steps they share everything: no note.
    for seed, offset in ((1, 0.0), (2, 10.0)):
        _fake_cartpole_run(str(tmp_path / f"s{seed}"), seed, offset)
    result = plot.plot([str(tmp_path / "s1"), str(tmp_path / "s2")], str(tmp_path / "c.png"))
    (note,) = result["notes"]
    assert "share no time (s) range; each drawn alone" in note
    # Partly overlapping times: the mean is cut to the shared range, and the figure says so.
    _fake_cartpole_run(str(tmp_path / "s3"), 3, 1.5)
    result = plot.plot([str(tmp_path / "s1"), str(tmp_path / "s3")], str(tmp_path / "d.png"))
    (note,) = result["notes"]
    assert "mean over the time (s) range all runs share, 2-3 (runs span 1-4)" in note


def test_without_out_the_figure_goes_into_the_first_directory(tmp_path, capsys):
    _fake_cartpole_run(str(tmp_path / "run"), 1, 0.0)
    assert plot.main([str(tmp_path / "run")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["out"] == str(tmp_path / "run" / "curves.png")
    assert (tmp_path / "run" / "curves.png").read_bytes()[:4] == b"\x89PNG"
