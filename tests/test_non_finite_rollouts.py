"""Never a silent bad rollout: the actors check each rollout before the learner sees it."""

import types

import envpool
import jax
import numpy as np
import pytest

from sebulba import train
from sebulba.actors import rollout_check, scan_actor
from sebulba.agents.api import Rollout
from sebulba.environments import spaces
from sebulba.errors import NonFiniteRolloutError
from tests import non_finite_policy_agent
from tests.helpers import agent_config, read_metrics
from tests.test_cli import TEST_CONFIG, run_cli


def _rollout(T=4, B=3, **overrides) -> Rollout:
    fields = dict(
        obs=np.zeros((T + 1, B, 2), np.float32),
        actions=np.zeros((T, B), np.int32),
        rewards=np.zeros((T, B), np.float32),
        terminations=np.zeros((T, B), bool),
        truncations=np.zeros((T, B), bool),
        valid=np.ones((T, B), bool),
        policy_outputs={"value": np.zeros((T + 1, B), np.float32)},
        env_ids=np.arange(B, dtype=np.int32),
        initial_carry=(np.zeros((B, 5), np.float32),),
    )
    fields.update(overrides)
    return Rollout(**fields)


def test_a_finite_rollout_passes_and_each_bad_field_is_named_with_its_first_step():
    assert rollout_check.non_finite_fields([_rollout(), _rollout()]) is None
    rewards = np.zeros((4, 3), np.float32)
    rewards[2, 1] = np.inf
    value = np.zeros((5, 3), np.float32)
    value[3, 0] = np.nan
    carry = np.zeros((3, 5), np.float32)
    carry[1, 4] = np.nan
    # One piece per learner device: a field is bad if it is bad on any of them.
    pieces = [_rollout(rewards=rewards), _rollout(policy_outputs={"value": value})]
    found = rollout_check.non_finite_fields(pieces)
    assert found == "rewards (from step 2), policy_outputs['value'] (from step 3)"
    found = rollout_check.non_finite_fields([_rollout(initial_carry=(carry,))])
    assert found == "initial_carry[0]"


@pytest.mark.parametrize("actor_loop", ["step", "scan"])
def test_a_non_finite_rollout_stops_the_run_before_the_learner_uses_it(tmp_path, actor_loop):
    config = agent_config(non_finite_policy_agent, pipeline__actor_loop=actor_loop)
    # Version 3 is the first bad one; with the one-step lag it collects rollout 4.
    message = (
        rf"actor thread 0 \({actor_loop} loop, cpu device 0\) collected a non-finite rollout 4 "
        r"with policy version 3: policy_outputs\['logits'\] \(from step 0\)"
    )
    with pytest.raises(NonFiniteRolloutError, match=message):
        train.train(config, str(tmp_path))
    assert [line["update"] for line in read_metrics(str(tmp_path))] == [1, 2, 3]


def test_a_non_finite_rollout_exits_with_one_line(tmp_path):
    result = run_cli(tmp_path / "run", config=f"{TEST_CONFIG}:non_finite")
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("sebulba: bad data: actor thread 0 (")
    assert "non-finite rollout 4 with policy version 3" in last
    assert "Traceback" not in result.stderr


def test_auto_takes_scan_on_gpus_only_in_the_verified_shapes():
    pools = {n: envpool.make("CartPole-v1", env_type="gymnasium", num_envs=n) for n in (64, 128)}
    action = spaces.Discrete(2)
    gpu0 = types.SimpleNamespace(platform="gpu", id=0)
    gpu1 = types.SimpleNamespace(platform="gpu", id=1)
    big, small = [pools[128]], [pools[64]]
    try:
        # One thread of 128 envs per GPU: verified, so auto takes scan.
        loop, _ = scan_actor.choose_actor_loop("auto", [big, big], [gpu0, gpu1], action)
        assert loop == "scan"
        # Two threads sharing a GPU: not verified; auto keeps the step loop and says why.
        loop, why = scan_actor.choose_actor_loop("auto", [big, big], [gpu0, gpu0], action)
        assert loop == "step"
        assert "2 actor threads sharing one gpu device are not verified" in why
        assert "pipeline.actor_loop='scan' runs it anyway" in why
        # One thread per GPU, but fewer envs per program than verified.
        loop, why = scan_actor.choose_actor_loop("auto", [small], [gpu0], action)
        assert loop == "step"
        assert "64 envs per actor thread on a gpu device are not verified" in why
        # Asked for by name, it runs, and the log line says it is unverified.
        loop, why = scan_actor.choose_actor_loop("scan", [big, big], [gpu0, gpu0], action)
        assert loop == "scan" and why.startswith("requested, although")
        # CPUs: any number of threads per device and of envs is verified by the suite.
        cpu = jax.devices()[0]
        loop, _ = scan_actor.choose_actor_loop("auto", [small, small], [cpu, cpu], action)
        assert loop == "scan"
    finally:
        for pool in pools.values():
            pool.close()
