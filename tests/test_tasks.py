"""Joint multi-task runs: the fixed env-to-task mapping, per-task attribution and metrics.

Attribution is checked against tasks whose every episode has a known, different length:
the probe agent always turns left, so it never reaches a MiniGrid goal and each episode
lasts its task's step limit (envpool's `max_episode_steps`).
"""

import json
import os
import signal

import numpy as np
import pytest

from sebulba import train
from sebulba.config.sizes import derive_sizes
from sebulba.environments import tasks
from sebulba.environments.task_metrics import RECENT_EPISODES, TaskEpisodes
from sebulba.errors import ConfigError
from sebulba.experiments.atari_scores import human_normalized_score
from sebulba.runtime.metrics import MetricsLogger, scalar_tag
from sebulba.update_report import UpdateReport
from tests import minimal_agent, probe_agent
from tests.helpers import agent_config, read_metrics, read_summary, tensorboard_scalars
from tests.test_cli import run_cli

# Episode length (agent steps) of each task under a policy that only turns left.
KNOWN_LENGTHS = {
    "MiniGrid-PutNear-6x6-N2-v0": 30,
    "MiniGrid-MultiRoom-N2-S4-v0": 40,
    "MiniGrid-Empty-5x5-v0": 100,
}
IDS = tuple(KNOWN_LENGTHS)
TURN_LEFT = 0
NUM_STEPS = 16  # Per rollout.
UPDATES = 7  # 112 steps per env: 3, 2 and 1 episodes per env of the three tasks.
GLOBAL_ENVS = 8  # Task blocks [0, 3), [3, 6), [6, 8).


def end_steps(length: int, first_step: int, last_step: int) -> list[int]:
    """Steps (0-based) at which an env's episodes of `length` end, from a reset at
    `first_step`; envpool spends one step resetting after each episode."""
    return list(range(first_step + length - 1, last_step + 1, length + 1))


def known_length_config(**overrides):
    """The probe agent turning left in the three `KNOWN_LENGTHS` tasks for `UPDATES`."""
    known = dict(
        env__ids=IDS,
        env__num_envs=GLOBAL_ENVS,
        agent__num_steps=NUM_STEPS,
        agent__constant_action=TURN_LEFT,
        total_timesteps=GLOBAL_ENVS * NUM_STEPS * UPDATES,
    )
    return agent_config(probe_agent, **{**known, **overrides})


# ----- the mapping ----------------------------------------------------------------


@pytest.mark.parametrize("num_envs, num_tasks", [(1, 1), (8, 3), (7, 2), (57, 57), (100, 7)])
def test_blocks_are_contiguous_balanced_and_cover_every_env_once(num_envs, num_tasks):
    layout = tasks.TaskLayout(tuple(f"task{k}" for k in range(num_tasks)), num_envs)
    owner = layout.env_task_ids()
    assert owner.shape == (num_envs,) and owner.dtype == np.int32
    assert np.all(np.diff(owner) >= 0)  # Contiguous blocks in env.ids order.
    sizes = [len(layout.block(k)) for k in range(num_tasks)]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
    covered = [env for k in range(num_tasks) for env in layout.block(k)]
    assert covered == list(range(num_envs))  # Every env in exactly one block, in order.
    for k in range(num_tasks):
        assert all(layout.task_of_env(env) == k for env in layout.block(k))
    np.testing.assert_array_equal(layout.task_of_env(np.arange(num_envs)), owner)


@pytest.mark.parametrize("num_envs, num_tasks", [(8, 3), (12, 5), (16, 3), (30, 4)])
def test_segments_of_any_thread_split_give_the_same_assignment(num_envs, num_tasks):
    layout = tasks.TaskLayout(tuple(f"task{k}" for k in range(num_tasks)), num_envs)
    reference = layout.env_task_ids()
    rng = np.random.default_rng(num_envs)
    splits = [[num_envs // parts] * parts for parts in (1, 2) if num_envs % parts == 0]
    for _ in range(20):  # Arbitrary cuts too: threads x processes x overlap halves.
        cuts = np.sort(rng.choice(np.arange(1, num_envs), rng.integers(1, 5), replace=False))
        splits.append(list(np.diff([0, *cuts, num_envs])))
    for split in splits:
        assigned, first = [], 0
        for count in split:
            for task, start, stop in layout.segments(first, count):
                assert stop > start
                assigned += [task] * (stop - start)
            first += count
        np.testing.assert_array_equal(assigned, reference, err_msg=f"split {split}")


def test_fewer_envs_than_tasks_are_refused_naming_env_ids(tmp_path):
    with pytest.raises(ConfigError, match=r"env.ids names 3 tasks but the run has 2 envs"):
        tasks.TaskLayout(IDS, 2)
    config = known_length_config(env__num_envs=2)
    with pytest.raises(ConfigError, match=r"env.ids names 3 tasks but the run has 2 envs"):
        train.train(config, str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "ids, message",
    [
        (("CartPole-v1", "CartPol-v1"), "env.ids[1] 'CartPol-v1' is not an envpool task"),
        (("CartPole-v1", "CartPole-v1"), "env.ids names 'CartPole-v1' twice"),
        (("CartPole-v1", 5), "env.ids[1] must be an envpool task id, got 5"),
        ("CartPole-v1", "env.ids must be a tuple of envpool task ids, got 'CartPole-v1'"),
        (
            ("CartPole-v1", "Acrobot-v1"),
            "env.ids: tasks 'CartPole-v1' and 'Acrobot-v1' have different action spaces",
        ),
    ],
    ids=["unknown", "duplicate", "not-a-string", "not-a-tuple", "other-spaces"],
)
def test_bad_task_ids_fail_in_one_line_naming_the_field(tmp_path, ids, message):
    config = agent_config(minimal_agent)
    with config.ignore_type():
        config.env.ids = ids
    with pytest.raises(ConfigError) as error:
        train.train(config, str(tmp_path / "run"))
    assert message in str(error.value) and "\n" not in str(error.value)
    assert "env.id " not in str(error.value)  # env.id is ignored when env.ids is set.
    assert not (tmp_path / "run").exists()


def test_mismatched_spaces_are_refused_by_the_command_line(tmp_path):
    result = run_cli(tmp_path / "run", "--config.env.ids=('MiniGrid-Empty-5x5-v0','CartPole-v1')")
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith(
        "sebulba: config error: env.ids: tasks 'MiniGrid-Empty-5x5-v0' and 'CartPole-v1' "
        "have different action spaces"
    )
    assert not (tmp_path / "run").exists()


# ----- per-task statistics --------------------------------------------------------


def test_task_statistics_are_per_task_bounded_and_survive_a_round_trip():
    layout = tasks.TaskLayout(("A", "B", "C"), 6)  # Blocks [0, 2), [2, 4), [4, 6).
    stats = TaskEpisodes(layout)
    stats.record([1.0, 2.0, 5.0], [10, 20, 50], [0, 1, 5])
    assert stats.window_metrics() == {
        "episodic_return/A": 1.5,
        "episodic_return/B": None,
        "episodic_return/C": 5.0,
        "episodic_length/A": 15.0,
        "episodic_length/B": None,
        "episodic_length/C": 50.0,
    }
    # The window restarts; the recent episodes and counts go on.
    assert set(stats.window_metrics().values()) == {None}
    stats.record([3.0] * 250, [7] * 250, [3] * 250)
    assert len(stats.recent_returns["B"]) == RECENT_EPISODES  # Bounded per task.
    summary = stats.summary()
    assert summary["env_ids"] == ["A", "B", "C"]
    assert summary["tasks"] == {
        "A": {"mean_return": 1.5, "mean_length": 15.0, "episodes": 2},
        "B": {"mean_return": 3.0, "mean_length": 7.0, "episodes": 250},
        "C": {"mean_return": 5.0, "mean_length": 50.0, "episodes": 1},
    }
    assert "atari_median_hns" not in summary
    # summary.json's overall mean weighs each task the same: B's 250 short episodes,
    # which would fill a window of the last 100 episodes overall, count once.
    assert stats.mean_recent_return() == pytest.approx((1.5 + 3.0 + 5.0) / 3)
    assert TaskEpisodes(layout).mean_recent_return() is None  # No episode yet.
    restored = TaskEpisodes(layout, json.loads(json.dumps(stats.state())))
    assert restored.summary() == summary
    one_task = TaskEpisodes(tasks.TaskLayout(("A",), 4))
    one_task.record([1.0], [3], [2])
    assert one_task.window_metrics() == {}  # One-task metrics lines are unchanged.
    assert one_task.summary()["tasks"] == {
        "A": {"mean_return": 1.0, "mean_length": 3.0, "episodes": 1}
    }
    one_task.record(list(range(150)), [1] * 150, [0] * 150)
    # One task: the mean of the run's last 100 episodes.
    assert one_task.mean_recent_return() == pytest.approx(np.mean(range(50, 150)))


def test_atari_task_sets_report_human_normalized_scores_in_lines_tags_and_summary(tmp_path):
    ids = ("Pong-v5", "Breakout-v5", "Boxing-v5")
    config = agent_config(minimal_agent, env__num_envs=6, total_timesteps=6 * 16 * 2)
    sizes = derive_sizes(config)
    layout = tasks.TaskLayout(ids, sizes.num_envs)  # Blocks [0, 2), [2, 4), [4, 6).
    logger = MetricsLogger(
        str(tmp_path),
        sizes,
        task_layout=layout,
        every_updates=1,
        tensorboard=True,
        is_main_process=True,
        console="lines",
    )

    def report(update, returns, env_ids):
        lengths = [100] * len(returns)
        return UpdateReport(
            update, update * 96, 1, update + 1, 0.0, 0.0, returns, lengths, env_ids, {}
        )

    logger.record(report(1, [-20.0, -18.0, 10.0], [0, 1, 3]))
    logger.record(report(2, [30.5], [2]))
    logger.close()
    first, second = read_metrics(str(tmp_path))
    pong, breakout = (-20.0 - 18.0) / 2, (10.0 + 30.5) / 2
    scores = [human_normalized_score("Pong-v5", pong), human_normalized_score("Breakout-v5", 10.0)]
    assert first["episodic_return/Pong-v5"] == pong
    assert first["episodic_return/Boxing-v5"] is None  # No Boxing episode yet.
    assert first["atari_median_hns"] == pytest.approx(np.median(scores))
    assert first["atari_mean_hns"] == pytest.approx(np.mean(scores))
    assert second["episodic_return/Pong-v5"] is None
    assert second["episodic_return/Breakout-v5"] == 30.5
    # Over each task's recent returns, not the window's.
    scores[1] = human_normalized_score("Breakout-v5", breakout)
    assert second["atari_mean_hns"] == pytest.approx(np.mean(scores))
    tags = {tag: values[-1][1] for tag, values in tensorboard_scalars(str(tmp_path)).items()}
    assert tags["charts/episodic_return/Breakout-v5"] == 30.5
    assert tags["charts/atari_median_hns"] == pytest.approx(second["atari_median_hns"])
    assert "charts/episodic_return/Boxing-v5" not in tags  # None is not a scalar.
    assert scalar_tag("episodic_length/Pong-v5") == "charts/episodic_length/Pong-v5"
    # A JAX env's id holds a colon, which a TensorBoard tag may not.
    tag = scalar_tag("episodic_return/xminigrid:MiniGrid-Empty-5x5")
    assert tag == "charts/episodic_return/xminigrid_MiniGrid-Empty-5x5"
    summary = logger.summary(2 * 96, 2, "x", {})
    assert summary["tasks"]["Breakout-v5"] == {
        "mean_return": breakout,
        "mean_length": 100.0,
        "episodes": 2,
    }
    assert summary["tasks"]["Boxing-v5"] == {
        "mean_return": None,
        "mean_length": None,
        "episodes": 0,
    }
    assert summary["atari_median_hns"] == pytest.approx(np.median(scores))


# ----- attribution end to end -----------------------------------------------------

ATTRIBUTION_LAYOUTS = {
    "1-thread": {},
    # Thread 0 holds envs [0, 4) of tasks 0 and 1, thread 1 envs [4, 8) of tasks 1 and 2.
    "2-threads": {"pipeline__num_actor_threads": 2, "env__num_envs": GLOBAL_ENVS // 2},
    # Halves [0, 2), [2, 4), [4, 6), [6, 8): the second spans tasks 0 and 1.
    "2-threads-halves": {
        "pipeline__num_actor_threads": 2,
        "env__num_envs": GLOBAL_ENVS // 2,
        "pipeline__overlap_env_steps": True,
    },
}


@pytest.mark.parametrize("layout", list(ATTRIBUTION_LAYOUTS))
def test_episodes_are_attributed_to_their_task(tmp_path, layout):
    workdir = str(tmp_path / "run")
    reports = []
    train.train(
        known_length_config(**ATTRIBUTION_LAYOUTS[layout]),
        workdir,
        lambda report, state: reports.append(report),
    )
    task_layout = tasks.TaskLayout(IDS, GLOBAL_ENVS)
    last_step = NUM_STEPS * UPDATES - 1
    # The pipeline reports each episode with its global env index, in env order.
    for report in reports:
        assert report.episode_env_ids == sorted(report.episode_env_ids)
        for env, length in zip(report.episode_env_ids, report.episode_lengths, strict=True):
            assert length == KNOWN_LENGTHS[IDS[task_layout.task_of_env(env)]], (env, length)
    seen = [env for report in reports for env in report.episode_env_ids]
    for env in range(GLOBAL_ENVS):
        length = KNOWN_LENGTHS[IDS[task_layout.task_of_env(env)]]
        assert seen.count(env) == len(end_steps(length, 0, last_step)), env
    # metrics.jsonl: a task's fields are set exactly in the updates its episodes ended in.
    lines = read_metrics(workdir)
    assert [line["update"] for line in lines] == list(range(1, UPDATES + 1))
    for task_id, length in KNOWN_LENGTHS.items():
        expected = {step // NUM_STEPS + 1 for step in end_steps(length, 0, last_step)}
        logged = {line["update"] for line in lines if line[f"episodic_length/{task_id}"]}
        assert logged == expected, task_id
        for line in lines:
            assert line[f"episodic_length/{task_id}"] in (None, float(length))
            assert line[f"episodic_return/{task_id}"] in (None, 0.0)
        assert "atari_median_hns" not in lines[0]  # Not Atari tasks.
    summary = read_summary(workdir)
    assert summary["env_ids"] == list(IDS) and summary["env_id"] == IDS[0]
    for k, (task_id, length) in enumerate(KNOWN_LENGTHS.items()):
        episodes = len(task_layout.block(k)) * len(end_steps(length, 0, last_step))
        assert summary["tasks"][task_id] == {
            "mean_return": 0.0,
            "mean_length": float(length),
            "episodes": episodes,
        }
    assert summary["episodes"] == sum(t["episodes"] for t in summary["tasks"].values())
    ended = [t["mean_return"] for t in summary["tasks"].values() if t["episodes"]]
    assert summary["mean_return"] == pytest.approx(np.mean(ended))


# ----- resume ---------------------------------------------------------------------


def _stop_after_update_3(report, state):
    del state
    if report.update == 2:
        os.kill(os.getpid(), signal.SIGINT)  # Lands during update 3: saved after it.


def _meta_path(workdir, update):
    return os.path.join(workdir, "checkpoints", str(update), "meta", "metadata")


def test_per_task_statistics_continue_across_a_resume(tmp_path):
    workdir = str(tmp_path / "run")
    config = known_length_config(ckpt__every_updates=0)
    train.train(config, workdir, _stop_after_update_3)
    with open(_meta_path(workdir, 3), encoding="utf-8") as f:
        saved = json.load(f)["task_episodes"]
    task_layout = tasks.TaskLayout(IDS, GLOBAL_ENVS)
    stop_step, last_step = 3 * NUM_STEPS, UPDATES * NUM_STEPS - 1
    for k, (task_id, length) in enumerate(KNOWN_LENGTHS.items()):
        before = len(task_layout.block(k)) * len(end_steps(length, 0, stop_step - 1))
        assert saved[task_id]["episodes"] == before
        assert saved[task_id]["recent_lengths"] == [length] * before
    train.train(config, workdir)
    summary = read_summary(workdir)
    for k, (task_id, length) in enumerate(KNOWN_LENGTHS.items()):
        # A resumed run restarts its envs (envpool cannot restore them) at the stop.
        per_env = len(end_steps(length, 0, stop_step - 1)) + len(
            end_steps(length, stop_step, last_step)
        )
        episodes = len(task_layout.block(k)) * per_env
        assert summary["tasks"][task_id]["episodes"] == episodes, task_id
        assert summary["tasks"][task_id]["mean_length"] == (float(length) if episodes else None)


def test_a_checkpoint_without_task_statistics_still_resumes(tmp_path):
    # One task, as every run before env.ids: its task continues the overall statistics.
    workdir = str(tmp_path / "run")
    config = agent_config(probe_agent, ckpt__every_updates=0)
    train.train(config, workdir, _stop_after_update_3)
    path = _meta_path(workdir, 3)
    with open(path, encoding="utf-8") as f:
        meta = json.load(f)
    del meta["task_episodes"]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(meta, f)
    train.train(config, workdir)
    summary = read_summary(workdir)
    assert summary["updates"] == 6
    assert (
        summary["tasks"]["CartPole-v1"]["episodes"]
        == summary["episodes"]
        > meta["episodes_finished"]
    )
    assert summary["tasks"]["CartPole-v1"]["mean_return"] == summary["mean_return"]
