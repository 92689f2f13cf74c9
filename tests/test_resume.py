"""Resuming with a changed config: documented keys may change, any other stops the run."""

import json
import os
import signal

import jax
import numpy as np
import pytest

from sebulba import train
from sebulba.config import resume as resume_config
from sebulba.errors import ConfigError
from tests import minimal_agent, probe_agent
from tests.helpers import agent_config, read_metrics, read_summary
from tests.test_cli import run_cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _snapshot(workdir):
    """Every file under `workdir` with its size and modification time."""
    found = {}
    for root, _, files in os.walk(workdir):
        for name in files:
            stat = os.stat(os.path.join(root, name))
            found[os.path.relpath(os.path.join(root, name), workdir)] = (
                stat.st_size,
                stat.st_mtime_ns,
            )
    return found


def _stop_after_update_3(report, state):
    del state
    if report.update == 2:
        os.kill(os.getpid(), signal.SIGINT)  # Lands during update 3: saved after it.


@pytest.fixture()
def stopped_run(tmp_path):
    """A probe-agent run of 6 updates stopped (like a preemption) after update 3."""
    workdir = str(tmp_path / "run")
    train.train(agent_config(probe_agent, ckpt__every_updates=0), workdir, _stop_after_update_3)
    assert [line["update"] for line in read_metrics(workdir)] == [1, 2, 3]
    return workdir


def test_differences_name_every_key_with_both_values():
    stored = {"seed": 1, "total_timesteps": 100, "log.every_updates": 1, "gone": 3}
    requested = {"seed": 5, "total_timesteps": 200, "log.every_updates": 7, "agent.new": 4}
    found = resume_config.differences(stored, requested, defaults={"agent.new": 4})
    assert found == [
        "gone (stored 3, requested: no such key)",
        "seed (stored 1, requested 5)",
        "total_timesteps (stored 100, requested 200)",
    ]
    # A key added to sebulba after the run started is accepted at its default only.
    found = resume_config.differences({}, {"agent.new": 8}, defaults={"agent.new": 4})
    assert found == ["agent.new (stored: absent, default 4, requested 8)"]


def test_documented_keys_may_change_and_nothing_else():
    for key in (
        "log.every_updates",
        "log.console",
        "ckpt.every_updates",
        "ckpt.max_to_keep",
        "ckpt.async_save",
        "ckpt.resume_from",
        "debug.learner_delay_s",
        "env.num_threads",
        "mesh.learner_device_ids",
        "pipeline.num_actor_threads",
    ):
        assert resume_config.may_change_on_resume(key), key
    for key in ("seed", "total_timesteps", "env.id", "agent.learning_rate", "pipeline.policy_lag"):
        assert not resume_config.may_change_on_resume(key), key
    with open(os.path.join(ROOT, "docs", "checkpointing.md"), encoding="utf-8") as f:
        docs = f.read()
    for pattern in resume_config.MAY_CHANGE_ON_RESUME:
        assert f"| `{pattern}` | yes |" in docs, pattern


def test_a_changed_seed_or_total_timesteps_stops_the_resume_before_any_work(
    stopped_run, monkeypatch
):
    before = _snapshot(stopped_run)

    def no_work(*args, **kwargs):
        raise AssertionError("the run started working before refusing the config")

    monkeypatch.setattr(train, "prepare", no_work)
    changed = agent_config(probe_agent, ckpt__every_updates=0, seed=5, total_timesteps=32 * 4 * 8)
    with pytest.raises(ConfigError) as error:
        train.train(changed, stopped_run)
    message = str(error.value)
    assert "\n" not in message
    assert "seed (stored 1, requested 5)" in message
    assert "total_timesteps (stored 192, requested 1024)" in message
    assert f"{stopped_run}/config.json" in message
    assert _snapshot(stopped_run) == before  # Nothing written, config.json included.


def test_documented_changes_resume_and_config_json_holds_the_segment_config(stopped_run):
    changed = agent_config(
        probe_agent,
        ckpt__every_updates=2,
        log__every_updates=3,
        mesh__learner_device_ids=[1, 2],
        debug__actor_delay_s=0.01,
    )
    train.train(changed, stopped_run)
    # Logged every 3 updates from update 4 on: only update 6; the schedule is unchanged.
    assert [line["update"] for line in read_metrics(stopped_run)] == [1, 2, 3, 6]
    assert read_metrics(stopped_run)[-1]["behaviour_version_min"] == 5
    with open(os.path.join(stopped_run, "config.json"), encoding="utf-8") as f:
        stored = json.load(f)
    # config.json is the config this segment ran with.
    assert stored["log"]["every_updates"] == 3 and stored["ckpt"]["every_updates"] == 2
    assert stored["mesh"]["learner_device_ids"] == [1, 2]


def test_a_key_missing_from_an_older_config_json_is_accepted_at_its_default(stopped_run):
    path = os.path.join(stopped_run, "config.json")
    with open(path, encoding="utf-8") as f:
        stored = json.load(f)
    del stored["env"]["max_episode_frames"]  # As if the key were added after the run.
    with open(path, "w", encoding="utf-8") as f:
        json.dump(stored, f)
    other = agent_config(probe_agent, ckpt__every_updates=0, env__max_episode_frames=1000)
    with pytest.raises(ConfigError, match=r"env.max_episode_frames \(stored: absent, default"):
        train.train(other, stopped_run)
    train.train(agent_config(probe_agent, ckpt__every_updates=0), stopped_run)
    assert read_summary(stopped_run)["updates"] == 6


def test_changed_tasks_stop_the_resume(stopped_run, tmp_path):
    joint = agent_config(
        probe_agent, ckpt__every_updates=0, env__ids=("CartPole-v1", "CartPole-v0")
    )
    with pytest.raises(ConfigError, match=r"env.ids \(stored \[\], requested \['CartPole-v1', "):
        train.train(joint, stopped_run)
    # A checkpoint without its run's config.json is checked by its metadata: its tasks.
    os.remove(os.path.join(stopped_run, "config.json"))
    joint.ckpt.resume_from = os.path.join(stopped_run, "checkpoints", "3")
    with pytest.raises(ConfigError, match=r"saved with env_ids=None, but this config has env_ids="):
        train.train(joint, str(tmp_path / "joint"))
    assert not os.path.exists(tmp_path / "joint")


def test_resume_from_another_workdir_checks_its_config(tmp_path):
    source = str(tmp_path / "source")
    train.train(agent_config(minimal_agent, ckpt__every_updates=3), source)
    other = agent_config(minimal_agent, ckpt__resume_from=source, agent__learning_rate=0.5)
    with pytest.raises(ConfigError, match=r"agent.learning_rate \(stored 0.01, requested 0.5\)"):
        train.train(other, str(tmp_path / "refused"))
    assert not os.path.exists(tmp_path / "refused")
    # Layout keys may change: 2 threads of 4 envs continue 1 thread of 8 (same global envs).
    checkpoint_3 = os.path.join(source, "checkpoints", "3")
    results = {}
    for name, layout in {
        "one-thread": {},
        "two-threads": {"pipeline__num_actor_threads": 2, "env__num_envs": 4},
    }.items():
        config = agent_config(minimal_agent, ckpt__resume_from=checkpoint_3, **layout)
        results[name] = jax.device_get(train.train(config, str(tmp_path / name)).params)
        assert read_summary(str(tmp_path / name))["updates"] == 6
    for a, b in zip(*(jax.tree.leaves(r) for r in results.values()), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    # A global env count the checkpoint was not saved with is still refused.
    wider = agent_config(minimal_agent, ckpt__resume_from=checkpoint_3, env__num_envs=16)
    with pytest.raises(ConfigError, match="num_envs=8, but this config has num_envs=16"):
        train.train(wider, str(tmp_path / "wider"))


def test_cli_refuses_a_changed_config_in_one_line(tmp_path):
    workdir = tmp_path / "run"
    first = run_cli(workdir, "--config.total_timesteps=256")
    assert first.returncode == 0, first.stderr[-2000:]
    stored = (workdir / "config.json").read_text()
    result = run_cli(workdir, "--config.total_timesteps=512", "--config.seed=5")
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("sebulba: config error: "), lines
    assert "seed (stored 1, requested 5)" in lines[0]
    assert "total_timesteps (stored 256, requested 512)" in lines[0]
    assert (workdir / "config.json").read_text() == stored


def test_stop_after_update_stops_like_a_preemption_and_the_run_resumes_exactly(tmp_path):
    # The Sebulba pipeline (probe agent, lag 1): saved and stopped after update 3, then the
    # same run without the stop ends where a run never stopped ends.
    from sebulba import checkpoint

    whole, stopped = str(tmp_path / "whole"), str(tmp_path / "stopped")
    train.train(agent_config(probe_agent, ckpt__every_updates=0), whole)
    train.train(
        agent_config(probe_agent, ckpt__every_updates=0, ckpt__stop_after_update=3), stopped
    )
    assert [line["update"] for line in read_metrics(stopped)] == [1, 2, 3]
    assert checkpoint.list_steps(checkpoint.checkpoints_dir(stopped)) == [3]
    assert not os.path.exists(os.path.join(stopped, "summary.json"))
    train.train(agent_config(probe_agent, ckpt__every_updates=0), stopped)
    assert read_summary(stopped)["params_checksum"] == read_summary(whole)["params_checksum"]


def test_a_population_member_run_may_change_only_its_mutated_keys_on_resume(stopped_run):
    # A member run of `python -m sebulba.pbt` resumes with new values of the keys the
    # population mutates; any other agent key, or a run that is no member, is refused.
    import ml_collections

    path = os.path.join(stopped_run, "config.json")
    with open(path, encoding="utf-8") as f:
        stored = json.load(f)
    stored["pbt"].update(population=2, member=0, hyperparameters="learning_rate")
    stored["agent"].update(learning_rate=0.25, max_grad_norm=1.0)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(stored, f)

    def requested(member=0, **agent):
        config = ml_collections.ConfigDict(stored)
        config.pbt.member = member
        config.agent.update(agent)
        return config

    resume_config.check(requested(learning_rate=0.5), stopped_run)
    with pytest.raises(ConfigError, match=r"agent.max_grad_norm \(stored 1.0, requested 9.0\)"):
        resume_config.check(requested(learning_rate=0.5, max_grad_norm=9.0), stopped_run)
    with pytest.raises(ConfigError, match=r"agent.learning_rate \(stored 0.25, requested 0.5\)"):
        resume_config.check(requested(member=-1, learning_rate=0.5), stopped_run)
