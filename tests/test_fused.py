"""The fused step (`pipeline.fused`): update k and rollout k + 1 as one program, with every
guarantee of the threaded pipeline: the same numbers, the lag schedule, exact resume, the
rollout checks, and one-line refusals where it cannot run."""

import functools
import shutil

import jax
import pytest

from sebulba import fused_step, train
from sebulba.agents import impala, ppo, pqn
from sebulba.errors import ConfigError, InvalidRolloutError
from sebulba.pipeline import Pipeline
from tests import minimal_agent, probe_agent
from tests.helpers import (
    agent_config,
    assert_rollouts_came_from_the_lagged_version,
    read_metrics,
    read_summary,
    sigint_after,
)

ONE_DEVICE = dict(mesh__actor_device_ids=(0,), mesh__learner_device_ids=(0,))


def _one_device(config, fused):
    config.mesh.actor_device_ids = (0,)
    config.mesh.learner_device_ids = (0,)
    config.pipeline.actor_loop = "scan"
    config.pipeline.fused = fused
    config.log.tensorboard = False
    return config


def _checksums(make_config, tmp_path):
    """{fused: (params_checksum, summary)} of the same run threaded and fused."""
    found = {}
    for fused in ("off", "on"):
        workdir = str(tmp_path / fused)
        train.train(_one_device(make_config(), fused), workdir)
        summary = read_summary(workdir)
        found[fused] = summary["params_checksum"]
        assert summary["fused"] is (fused == "on")
    return found


@pytest.mark.xla_default_compilation
def test_impala_and_pqn_fused_train_the_same_parameters(tmp_path):
    # Both agents in one test rather than a parametrization: a test compiling with XLA's
    # defaults runs in a pytest process of its own, whose start-up the agents then share.
    for agent in (impala, pqn):
        found = _checksums(functools.partial(agent_config, agent), tmp_path / agent.__name__)
        assert found["on"] == found["off"], agent.__name__


def test_the_fused_step_keeps_the_lag_schedule(tmp_path):
    # The probe's parameter is its version: rollout k + 1, collected inside update k's
    # program, holds version k in every sample.
    config = _one_device(agent_config(probe_agent), "on")
    train.train(config, str(tmp_path))
    lines = read_metrics(str(tmp_path))
    assert [line["update"] for line in lines] == list(range(1, 7))
    assert_rollouts_came_from_the_lagged_version(lines, policy_lag=1)


def test_the_rollouts_of_the_fused_step_reproduce_from_their_records(tmp_path):
    # debug.consistency_checks recomputes every rollout's policy outputs with the version
    # the schedule names and resamples its actions: a fused rollout passes them.
    config = _one_device(agent_config(ppo, agent__num_steps=8), "on")
    config.debug.consistency_checks = True
    train.train(config, str(tmp_path))
    assert read_summary(str(tmp_path))["fused"] is True


def test_a_fused_run_resumes_as_a_threaded_one_and_keeps_the_lag_schedule(tmp_path):
    # Stopped by Ctrl-C after update 3 (a checkpoint at the boundary), then resumed twice
    # from copies of the workdir: fused and threaded. The envs restart at a resume; the
    # first resumed rollout is collected with version 3, which the checkpoint holds.
    def make(fused):
        return _one_device(agent_config(probe_agent, total_timesteps=8 * 4 * 8), fused)

    stopped = tmp_path / "stopped"
    train.train(make("on"), str(stopped), on_update=sigint_after(3))
    checksums = {}
    for fused in ("on", "off"):
        workdir = tmp_path / fused
        shutil.copytree(stopped, workdir)
        train.train(make(fused), str(workdir))
        checksums[fused] = read_summary(str(workdir))["params_checksum"]
        lines = read_metrics(str(workdir))
        assert [line["update"] for line in lines] == list(range(1, 9))
        assert_rollouts_came_from_the_lagged_version(lines, policy_lag=1)
    assert checksums["on"] == checksums["off"]


@pytest.mark.xla_default_compilation
def test_an_interrupted_fused_ppo_run_resumes_as_a_threaded_one_with_the_same_numbers(tmp_path):
    # Stopped after update 3 and resumed fused and threaded: updates 4-6 are the fused
    # update, cut into pieces between env steps, and the threaded one, whole, so the same
    # checksum shows both that a fused checkpoint resumes threaded and that the pieces do
    # not change the numbers (one XLA-default process and one stopped run for both). The
    # minibatch loop unrolled (as `auto` makes it for the Nature CNN on a CPU), each
    # minibatch in 2 micro-batches: the update is 2 optimizer steps of 2 pieces, each
    # between an env step's send and receive of the next rollout. An MLP on CartPole takes
    # the same path as a CNN in a tenth of the compile time.
    def make(fused):
        config = agent_config(
            ppo,
            agent__minibatch_loop="unrolled",
            agent__gradient_accumulation_steps=2,
            agent__update_epochs=1,
            agent__num_minibatches=2,
            agent__num_steps=32,
            total_timesteps=8 * 32 * 6,
        )
        return _one_device(config, fused)

    stopped = tmp_path / "stopped"
    train.train(make("on"), str(stopped), on_update=sigint_after(3))
    checksums = set()
    for fused in ("on", "off"):
        workdir = tmp_path / fused
        shutil.copytree(stopped, workdir)
        train.train(make(fused), str(workdir))
        summary = read_summary(str(workdir))
        assert summary["fused"] is (fused == "on")
        assert [line["update"] for line in read_metrics(str(workdir))] == list(range(1, 7))
        checksums.add(summary["params_checksum"])
    assert len(checksums) == 1


def test_a_bad_rollout_of_the_fused_step_stops_the_run_before_it_is_learned(tmp_path, monkeypatch):
    original = Pipeline._to_learner_devices
    calls = []

    def corrupted(self, collected):
        pieces = original(self, collected)
        calls.append(None)
        if len(calls) == 3:
            pieces[0] = pieces[0].replace(actions=pieces[0].actions.at[1, 2].set(2**20))
        return pieces

    monkeypatch.setattr(Pipeline, "_to_learner_devices", corrupted)
    config = _one_device(agent_config(ppo, agent__num_steps=8), "on")
    config.debug.transfer_guard = "allow"
    message = (
        r"the fused step \(cpu device 0\) collected a bad rollout 3 with policy version 2: "
        r"actions outside \[0, 2\) \(from step 1, env 2\)"
    )
    with pytest.raises(InvalidRolloutError, match=message):
        train.train(config, str(tmp_path))
    # Updates 1 and 2 ran and were reported; update 3 never saw the rollout.
    assert [line["update"] for line in read_metrics(str(tmp_path))] == [1, 2]


@pytest.mark.parametrize(
    "overrides, reason",
    [
        (dict(pipeline__policy_lag=0), "pipeline.policy_lag=0: only the one-step lag"),
        (dict(mesh__learner_device_ids=(1,)), "actor and learner devices do not coincide"),
        (dict(pipeline__actor_loop="step"), "the actor loop is step"),
    ],
)
def test_on_is_refused_in_one_line_where_the_run_cannot_fuse(overrides, reason):
    config = agent_config(ppo, pipeline__fused="on", **{**ONE_DEVICE, **overrides})
    with pytest.raises(ConfigError, match=rf"^pipeline.fused='on' cannot run here: {reason}"):
        train.prepare(config)


def test_an_agent_without_a_plan_and_an_update_too_fine_for_the_rollout_are_refused():
    config = agent_config(minimal_agent, pipeline__fused="on", **ONE_DEVICE)
    with pytest.raises(ConfigError, match="its Agent has no plan_update"):
        train.prepare(config)
    # 4 epochs x 4 minibatches x 2 micro-batches are 32 pieces for 16 env steps.
    config = agent_config(
        ppo,
        pipeline__fused="on",
        agent__num_steps=16,
        agent__update_epochs=4,
        agent__num_minibatches=4,
        agent__gradient_accumulation_steps=2,
        **ONE_DEVICE,
    )
    with pytest.raises(
        ConfigError, match="16 optimizer steps x 2 micro-batches do not fit the 16-step rollout"
    ):
        train.prepare(config)


def test_auto_fuses_only_where_a_gpu_both_acts_and_learns():
    def never():
        raise AssertionError("the plan is traced only where the choice needs it")

    assert fused_step.choose_fused("auto", lambda: None, "gpu")[0] is True
    fused, why = fused_step.choose_fused("auto", lambda: "several processes", "gpu")
    assert not fused and why == "several processes"
    # Off a GPU, auto keeps the threaded pipeline without tracing the update's plan.
    fused, why = fused_step.choose_fused("auto", never, "cpu")
    assert not fused and "the threaded pipeline measured faster" in why
    assert fused_step.choose_fused("off", never, "gpu") == (
        False,
        "acting and learning in their own programs",
    )
    with pytest.raises(ConfigError, match="pipeline.fused 'yes' must be one of auto, on, off"):
        fused_step.choose_fused("yes", never, "gpu")
    assert jax.default_backend() == "cpu"
