"""Evaluation: deterministic episodes from a checkpoint, eval.json, clear refusals."""

import json
import os

import envpool
import numpy as np
import pytest
from PIL import Image

from sebulba import evaluate, train
from sebulba.environments import envpool_pools, envpool_registry, system_libraries
from sebulba.experiments import atari_scores
from tests import minimal_agent
from tests.helpers import ROOT, agent_config, load_config, run_evaluate_cli, run_python


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
    assert older["greedy"] is False and older["animation"] == str(tmp_path / "a.gif")
    # CartPole as envpool draws it (600x400, shrunk to half), one frame per state.
    with Image.open(tmp_path / "a.gif") as gif:  # Pillow merges identical frames.
        assert gif.size == (300, 200)
        assert 1 < gif.n_frames <= older["lengths"][0] + 1
        # One frame per state at CartPole's 0.02 s time step (real time).
        assert total_duration_ms(gif) == 20 * (older["lengths"][0] + 1)
        assert is_colour(gif)


def frame_durations_ms(gif) -> list[int]:
    durations = []
    for index in range(gif.n_frames):
        gif.seek(index)
        durations.append(gif.info["duration"])
    return durations


def test_a_still_screen_longer_than_gifs_longest_delay_is_cut_short(tmp_path):
    # A policy that never presses FIRE after losing a life stares at one screen for up to
    # 27,000 steps; one GIF frame holds at most 655.35 s.
    still = Image.new("RGB", (8, 8), (0, 0, 0)).quantize()
    moved = Image.new("RGB", (8, 8), (255, 255, 255)).quantize()
    path = str(tmp_path / "still.gif")
    evaluate.save_animation([still] * 10_000 + [moved], path, frame_s=4 / 60)
    with Image.open(path) as animation:
        assert frame_durations_ms(animation) == [655_340, 70]


def total_duration_ms(gif) -> int:
    """A GIF's playing time (Pillow merges identical frames and adds their durations)."""
    total = 0
    for index in range(gif.n_frames):
        gif.seek(index)
        total += gif.info["duration"]
    return total


def is_colour(gif) -> bool:
    """Whether a GIF's first frame has pixels that are not grey."""
    gif.seek(0)
    rgb = np.asarray(gif.convert("RGB")).astype(int)
    return bool((np.abs(rgb[..., 0] - rgb[..., 1]) > 30).any())


def test_evaluate_cli_prints_a_summary(trained):
    result = run_evaluate_cli(f"--workdir={trained}", "--episodes=2")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "checkpoint 6 (step 768) on CartPole-v1: 2 episodes, return" in result.stdout


def test_evaluate_cli_greedy_records_the_policy_and_checkpoint(trained, tmp_path):
    gif = tmp_path / "greedy.gif"
    result = run_evaluate_cli(
        f"--workdir={trained}", "--episodes=3", "--greedy", "--checkpoint=3", f"--animation={gif}"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    with open(os.path.join(trained, "eval.json"), encoding="utf-8") as f:
        written = json.load(f)
    assert written["greedy"] is True and written["checkpoint"] == 3
    assert "greedy policy of checkpoint 3 (step 384)" in result.stdout
    assert f"animation of episode 0 ({written['lengths'][0]} steps): {gif}" in result.stdout
    assert gif.exists()
    # The same greedy evaluation in Python: the same episodes.
    again = evaluate.evaluate(trained, checkpoint=3, episodes=3, greedy=True)
    assert again["returns"] == written["returns"]


def test_animation_into_a_missing_folder_fails_before_any_work(trained, tmp_path):
    before = os.path.getmtime(os.path.join(trained, "eval.json"))
    with pytest.raises(evaluate.EvaluationError, match="is not a writable directory"):
        evaluate.evaluate(trained, animation=str(tmp_path / "missing" / "a.gif"))
    assert os.path.getmtime(os.path.join(trained, "eval.json")) == before


def test_evaluate_refuses_a_workdir_without_checkpoints(tmp_path):
    workdir = tmp_path / "fresh"
    workdir.mkdir()
    config = agent_config(minimal_agent)
    (workdir / "config.json").write_text(json.dumps(config.to_dict()))
    result = run_evaluate_cli(f"--workdir={workdir}")
    assert result.returncode == 2  # Bad input, as sebulba.main reports it.
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
    gif = tmp_path / "breakout.gif"
    result = evaluate.evaluate(str(tmp_path), episodes=1, seed=0, greedy=True, animation=str(gif))
    random_score, human_score = atari_scores.RANDOM_AND_HUMAN_SCORES["Breakout-v5"]
    expected = (result["mean_return"] - random_score) / (human_score - random_score)
    assert result["human_normalized_score"] == pytest.approx(expected)
    assert result["lengths"][0] > 0 and result["greedy"] is True
    # The RGB game screen, not the 84x84 grey model input, at the game's speed.
    with Image.open(gif) as animation:
        assert animation.size == (160, 210)
        assert 1 < animation.n_frames <= result["lengths"][0] + 1
        # One frame per state, 4 game frames at 60 Hz each (in GIF's 1/100 s); a still
        # screen held past GIF's longest delay is cut short (see the test below).
        played_ms = 70 * (result["lengths"][0] + 1)
        if max(frame_durations_ms(animation)) < 655_340:
            assert total_duration_ms(animation) == played_ms
        else:
            assert total_duration_ms(animation) < played_ms
        assert is_colour(animation)


def test_rendered_atari_screens_are_the_played_episode():
    # Rendering changes nothing the agent sees (same seed, same actions: same steps), and
    # each screen is the newest frame of the observation's stack: shrunk to 84x84 grey, it
    # agrees with it up to envpool's max-pooling of the last two frames.
    config = load_config("ppo_atari", "smoke")
    plain = envpool_pools.make_envs(config.env, 2, seed=7)
    rendered = envpool_pools.make_envs(config.env, 2, seed=7, render=True)
    assert np.array_equal(plain.reset()[0], rendered.reset()[0])
    actions = np.random.default_rng(0).integers(0, rendered.action_space.n, (300, 2))
    distances = np.zeros(4)  # Summed distance of the screens to each stacked frame.
    for step, action in enumerate(actions):
        expected, got = plain.step(action), rendered.step(action)
        for a, b in zip(expected[:4], got[:4], strict=True):
            assert np.array_equal(a, b), step
        if step % 10 == 0:
            screen = rendered.render(env_ids=[1])[0]
            assert screen.shape == (210, 160, 3)
            grey = Image.fromarray(screen).convert("L").resize((84, 84), Image.BILINEAR)
            grey = np.asarray(grey, float)
            stack = got[0][1].astype(float)  # [4, 84, 84], oldest first.
            distances += np.abs(grey[None] - stack).mean(axis=(1, 2))
            assert np.corrcoef(grey.ravel(), stack[-1].ravel())[0, 1] > 0.95, step
    assert np.argmin(distances) == 3, distances
    plain.close()
    rendered.close()


@pytest.fixture(scope="module")
def trained_joint(tmp_path_factory):
    """A joint run of configs/ppo_joint.py:smoke (two MiniGrid tasks), `env.id` unused."""
    workdir = str(tmp_path_factory.mktemp("eval_joint") / "run")
    config = load_config("ppo_joint", "smoke")
    config.env.id = "CartPole-v1"  # Ignored when env.ids names the tasks.
    config.log.tensorboard = False
    train.train(config, workdir)
    return workdir


def test_a_joint_run_is_evaluated_on_every_task(trained_joint, tmp_path):
    result = evaluate.evaluate(
        trained_joint, episodes=3, seed=1, animation=str(tmp_path / "clip.gif")
    )
    ids = list(load_config("ppo_joint", "smoke").env.ids)
    assert result["env_ids"] == ids and list(result["tasks"]) == ids
    assert result["env_id"] == ids[0] and result["episodes"] == 3 * len(ids)
    with open(os.path.join(trained_joint, "eval.json"), encoding="utf-8") as f:
        assert json.load(f) == json.loads(json.dumps(result))
    limits = {task_id: envpool.make_spec(task_id).config.max_episode_steps for task_id in ids}
    for task_id, task in result["tasks"].items():
        assert task["episodes"] == len(task["returns"]) == 3
        assert task["min_return"] <= task["mean_return"] <= task["max_return"]
        # Each task's episodes ran in that task's envs: within its own step limit.
        assert all(0 < length <= limits[task_id] for length in task["lengths"]), task
        assert "human_normalized_score" not in task  # MiniGrid is not Atari.
        assert task["animation"] == str(tmp_path / f"clip-{task_id}.gif")
        with Image.open(task["animation"]) as gif:
            assert 1 < gif.n_frames <= task["lengths"][0] + 1
    # Two tasks with different step limits: the longer one's episodes are not cut short.
    assert max(max(t["lengths"]) for t in result["tasks"].values()) > min(limits.values())
    assert result["mean_return"] == pytest.approx(
        np.mean([t["mean_return"] for t in result["tasks"].values()])
    )
    assert "atari_median_hns" not in result
    # A task's episodes are those of the single-task evaluation with the same seed.
    single = evaluate.evaluate(trained_joint, episodes=3, seed=1)
    assert single["tasks"] == {
        k: {f: v for f, v in t.items() if f != "animation"} for k, t in result["tasks"].items()
    }


def test_evaluate_cli_prints_one_line_per_task(trained_joint):
    result = run_evaluate_cli(f"--workdir={trained_joint}", "--episodes=2")
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    ids = load_config("ppo_joint", "smoke").env.ids
    assert lines[0].endswith(f"on {len(ids)} tasks:"), lines
    for line, task_id in zip(lines[1:], ids, strict=False):
        assert line.startswith(f"  {task_id}: 2 episodes, return "), lines
    assert lines[-1].startswith("mean return over tasks ") and "wrote" in lines[-1], lines


def test_a_joint_atari_run_reports_human_normalized_scores_per_game(tmp_path):
    config = load_config("impala_atari_multitask", "smoke")
    config.agent.network = "nature_cnn"  # The cheaper network: this tests plumbing.
    config.log.tensorboard = False
    # An untrained greedy policy may play a game until the frame cap: keep episodes short.
    config.env.max_episode_frames = 400
    train.train(config, str(tmp_path))
    result = evaluate.evaluate(str(tmp_path), episodes=1, seed=0, greedy=True)
    scores = []
    for game in config.env.ids:
        task = result["tasks"][game]
        random_score, human_score = atari_scores.RANDOM_AND_HUMAN_SCORES[game]
        expected = (task["mean_return"] - random_score) / (human_score - random_score)
        assert task["human_normalized_score"] == pytest.approx(expected)
        assert (task["random_score"], task["human_score"]) == (random_score, human_score)
        scores.append(expected)
    assert result["atari_median_hns"] == pytest.approx(np.median(scores))
    assert result["atari_mean_hns"] == pytest.approx(np.mean(scores))
    assert "human_normalized_score" not in result  # Per game only.


def run_evaluate_cli_in(cwd, *flags, **environ):
    """`python -m sebulba.evaluate` run from `cwd`, headless (no DISPLAY, no MUJOCO_GL)."""
    unset = ("DISPLAY", "MUJOCO_GL")
    return run_evaluate_cli(*flags, cwd=cwd, timeout=300, unset=unset, **environ)


@pytest.fixture(scope="module")
def trained_mujoco(tmp_path_factory):
    """configs/ppo_mujoco.py:smoke (Hopper-v4) and ppo_dmc.py:smoke (CheetahRun-v1) runs."""
    workdirs = {}
    for name in ("ppo_mujoco", "ppo_dmc"):
        config = load_config(name, "smoke")
        config.log.tensorboard = False
        workdirs[name] = str(tmp_path_factory.mktemp(name) / "run")
        train.train(config, workdirs[name])
    return workdirs


# Both runs animate in one fresh process: the rendering backend is chosen there, once, at
# the first MuJoCo import (what a headless `python -m sebulba.evaluate` meets), and a second
# process would only repeat its 5 s of imports. The command line's flags, summary and
# animation line are tested on CartPole above; its headless refusal below.
_ANIMATE_HEADLESS = """
import sys
from sebulba import evaluate
for workdir, gif in zip(sys.argv[1::2], sys.argv[2::2], strict=True):
    evaluate.evaluate(workdir, episodes=1, max_steps=6, animation=gif)
"""


def test_mujoco_and_dm_control_runs_animate_headless(trained_mujoco, tmp_path):
    # No display and no MUJOCO_GL set: the frames are drawn through EGL. Mesa's software
    # renderer takes about 0.2 s a frame on 2 CPU cores, so the episode stops at 6 steps.
    gifs = {name: tmp_path / f"{name}.gif" for name in trained_mujoco}
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "MUJOCO_GL")}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""))
    workdirs_and_gifs = [
        str(x) for name in trained_mujoco for x in (trained_mujoco[name], gifs[name])
    ]
    result = run_python(
        "-c", _ANIMATE_HEADLESS, *workdirs_and_gifs, env=env, cwd=tmp_path, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    # No MUJOCO_LOG.TXT.
    assert sorted(os.listdir(tmp_path)) == sorted(gif.name for gif in gifs.values())
    for name, gif in gifs.items():
        written = json.loads(open(os.path.join(trained_mujoco[name], "eval.json")).read())
        assert written["lengths"] == [6] and written["animation"] == str(gif), name
        with Image.open(gif) as animation:
            assert animation.size == (240, 240), name  # envpool's 480x480 scene, halved.
            assert 2 <= animation.n_frames <= 7, name
            screens = []
            for i in range(animation.n_frames):
                animation.seek(i)
                screens.append(np.asarray(animation.convert("RGB")))
        # Real drawings: many colours on every frame, and the body moves between frames.
        assert all(len(np.unique(s.reshape(-1, 3), axis=0)) > 20 for s in screens), name
        assert not np.array_equal(screens[0], screens[-1]), name


def test_a_machine_that_cannot_render_fails_in_one_line_before_any_work(trained_mujoco, tmp_path):
    # EGL without a driver (as on a machine without Mesa's EGL): one line, status 1, and
    # nothing written: no GIF, no eval.json, no MUJOCO_LOG.TXT in the current directory.
    workdir = trained_mujoco["ppo_mujoco"]
    eval_json = os.path.join(workdir, "eval.json")
    if os.path.exists(eval_json):
        os.remove(eval_json)
    result = run_evaluate_cli_in(
        tmp_path,
        f"--workdir={workdir}",
        "--episodes=1",
        "--max_steps=3",
        f"--animation={tmp_path / 'clip.gif'}",
        __EGL_VENDOR_LIBRARY_FILENAMES=str(tmp_path / "no_such_vendor.json"),
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("sebulba.evaluate: cannot render Hopper-v4 on this machine")
    assert "apt-get install -y libegl1 libegl-mesa0 libgl1-mesa-dri" in lines[0]
    assert os.listdir(tmp_path) == [] and not os.path.exists(eval_json)


def test_max_steps_caps_every_episode(trained, tmp_path):
    capped = evaluate.evaluate(trained, episodes=3, seed=2, max_steps=5)
    assert capped["lengths"] == [5, 5, 5]
    with pytest.raises(evaluate.EvaluationError, match=r"--max_steps \(-1\) must be >= 0"):
        evaluate.evaluate(trained, max_steps=-1)


_RENDER_EVERY_FAMILY = """
import json, sys
import ml_collections
from sebulba.environments import envpool_pools
from sebulba.config import base_config
from sebulba.agents import ppo
sizes = {}
for env_id in sys.argv[1:]:
    config = base_config(ppo.get_config()).env
    config.id = env_id
    pool = envpool_pools.make_envs(config, 1, seed=0, render=True)
    pool.reset()
    screen = pool.render(env_ids=[0])[0]
    sizes[env_id] = [list(screen.shape), len({tuple(p) for p in screen.reshape(-1, 3)})]
print(json.dumps(sizes))
"""


def test_every_supported_family_can_be_animated(tmp_path):
    # One task of each family draws an RGB screen of many colours, in a fresh process
    # (as `python -m sebulba.evaluate` runs), leaving nothing in the current directory.
    ids = [
        "CartPole-v1",
        "BipedalWalker-v3",
        "Hopper-v4",
        "CheetahRun-v1",
        "MiniGrid-Empty-5x5-v0",
        "Pong-v5",
        "FetchReach-v4",
        "MetaWorld/Reach-v3",
        "myoElbowPose1D6MRandom-v0",
        "PandaPickCube-v1",
        "Maze-v0",
        "Play2048-v1",
        "Highway-v0",
        "D1Basic-v1",
        "BigfishEasy-v0",
    ]
    families = {envpool_registry.envpool_families()[i] for i in ids}
    # envpool draws no toy-text or football task: evaluate refuses those in one line.
    drawn = set(envpool_registry.SUPPORTED_FAMILIES) - {"envpool.toy_text", "envpool.gfootball"}
    assert families == drawn
    for undrawn in ("Taxi-v3", "gfootball/academy_empty_goal-v1"):
        with pytest.raises(
            system_libraries.RenderingError, match=f"^cannot render {undrawn}: envpool"
        ):
            system_libraries.check_rendering(undrawn)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": ROOT}
    result = run_python("-c", _RENDER_EVERY_FAMILY, *ids, env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    sizes = json.loads(result.stdout.strip().splitlines()[-1])
    assert sizes["Hopper-v4"][0] == sizes["CheetahRun-v1"][0] == [480, 480, 3]
    assert sizes["Pong-v5"][0] == [210, 160, 3]
    assert all(colours >= 3 for _, colours in sizes.values()), sizes  # Drawings, not blanks.
    # ViZDoom's engine keeps its settings in the working directory, as it always does.
    assert set(os.listdir(tmp_path)) == {"_vizdoom.ini", "_vizdoom"}


class _ScriptedSuccessEnvs:
    """Two envs whose episodes last 3 and 5 steps; env 0 flags success at its step 2
    only, env 1 after its episode ended (which must not count)."""

    def __init__(self, key):
        self.key, self.t = key, 0

    def reset(self):
        self.t = 0
        return np.zeros((2, 4), np.float32), {}

    def step(self, actions):
        del actions
        self.t += 1
        flags = np.array([self.t == 2, self.t == 4], np.float64)
        ended = np.array([self.t >= 3, self.t >= 3])
        info = {self.key: flags} if self.key else {}
        return np.zeros((2, 4), np.float32), np.ones(2), ended, np.zeros(2, bool), info

    def close(self):
        pass


@pytest.mark.parametrize("key", ["success", "is_success", "solved", None])
def test_success_counts_a_flag_at_any_step_of_the_episode_and_only_where_the_task_has_one(
    monkeypatch, key
):
    from tests.test_random_streams import cartpole_policy

    monkeypatch.setattr(
        envpool_pools, "make_envs", lambda *args, **kwargs: _ScriptedSuccessEnvs(key)
    )
    returns, lengths, _, successes = evaluate.run_episodes(
        cartpole_policy(), episodes=2, seed=0, num_envs=2
    )
    assert returns.tolist() == [3.0, 3.0] and lengths.tolist() == [3, 3]
    if key is None:
        assert successes is None
    else:
        assert successes.tolist() == [True, False]


class RandomBreakoutPolicy:
    """What `evaluate.run_episodes` needs of a policy: random actions, restarts counted."""

    jax_env = None

    def __init__(self, config):
        self.config = config
        pool = envpool_pools.make_envs(config.env, 1, seed=0)
        self.env_spec = envpool_pools.env_spec_of(config.env, pool)
        pool.close()
        self.rng = np.random.default_rng(0)
        self.restarted_rows = []

    def reset(self):
        pass

    def actions(self, obs, *, step, row_ids, episode_starts=None):
        self.restarted_rows.extend(np.flatnonzero(episode_starts).tolist())
        return self.rng.integers(0, 4, len(row_ids)).astype(np.int32)


def test_evaluation_plays_whole_games_when_lives_terminate():
    config = load_config("ppo_atari", "smoke")
    config.env.kwargs = {"episodic_life": True, "noop_max": 30}  # CleanRL's protocol.
    config.env.full_action_space = False
    policy = RandomBreakoutPolicy(config)
    returns, lengths, _, _ = evaluate.run_episodes(policy, episodes=2, seed=0, num_envs=2)
    # Breakout's 5 lives: each game went on after 4 lost lives, whose next step restarted
    # a recurrent policy's carry, as in training.
    assert all(policy.restarted_rows.count(row) >= 4 for row in (0, 1))
    assert np.all(lengths > 0) and np.all(returns >= 0)
