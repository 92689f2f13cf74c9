"""Never a silent bad rollout: the actors check each rollout against its spec (and, with
`debug.consistency_checks`, against its own records) before the learner sees it."""

import types

import envpool
import jax
import numpy as np
import pytest

from sebulba import train
from sebulba.actors import rollout_check, scan_actor
from sebulba.agents import ppo
from sebulba.agents.api import Rollout
from sebulba.environments import spaces
from sebulba.environments.spaces import ArraySpec, Discrete, EnvSpec, MultiDiscrete
from sebulba.errors import InvalidRolloutError
from sebulba.pipeline import Pipeline
from tests import minimal_agent, non_finite_policy_agent
from tests.helpers import LSTM_RUN, agent_config, read_metrics, read_summary
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


SPEC = EnvSpec("test", ArraySpec((2,), "float32"), Discrete(2))


def _problems(pieces, spec=SPEC):
    """The check's report on pieces of 3 envs each, piece i holding env ids 3i .. 3i + 2."""
    expected = [np.arange(3 * i, 3 * i + 3, dtype=np.int32) for i in range(len(pieces))]
    return rollout_check.RolloutCheck(spec).problems(pieces, expected)


def test_a_sound_rollout_passes_and_each_non_finite_field_is_named_with_step_and_env():
    assert _problems([_rollout(), _rollout(env_ids=np.arange(3, 6, dtype=np.int32))]) is None
    rewards = np.zeros((4, 3), np.float32)
    rewards[2, 1] = np.inf
    value = np.zeros((5, 3), np.float32)
    value[3, 0] = np.nan
    carry = np.zeros((3, 5), np.float32)
    carry[1, 4] = np.nan
    # One piece per learner device: a field is bad if it is bad on any of them, and the
    # env is named by its global index.
    second = dict(env_ids=np.arange(3, 6, dtype=np.int32), policy_outputs={"value": value})
    found = _problems([_rollout(rewards=rewards), _rollout(**second)])
    assert found == (
        "rewards not finite (from step 2, env 1), "
        "policy_outputs['value'] not finite (from step 3, env 3)"
    )
    found = _problems([_rollout(initial_carry=(carry,))])
    assert found == "initial_carry[0] not finite (env 1)"


def test_integers_outside_the_spec_flag_bytes_and_foreign_env_ids_are_caught():
    # The corruption that made IMPALA's V-trace NaN and that PPO would have learned from.
    actions = np.zeros((4, 3), np.int32)
    actions[1, 2] = 2**20
    assert _problems([_rollout(actions=actions)]) == "actions outside [0, 2) (from step 1, env 2)"
    actions[1, 2] = -1
    assert _problems([_rollout(actions=actions)]) == "actions outside [0, 2) (from step 1, env 2)"
    # A flag byte that XLA would read as True, whatever the byte.
    valid = np.ones((4, 3), np.uint8)
    valid[3, 0] = 2
    found = _problems([_rollout(valid=valid.view(bool))])
    assert found == "valid not 0 or 1 (from step 3, env 0)"
    # Another thread's env: its keys and its replay columns would be wrong.
    found = _problems([_rollout(env_ids=np.array([0, 1, 7], np.int32))])
    assert found == "env_ids not the thread's (env 2)"
    # Per component of a MultiDiscrete action, and a discrete observation entry.
    multi = EnvSpec("test", ArraySpec((2,), "float32"), MultiDiscrete((3, 2)))
    actions = np.zeros((4, 3, 2), np.int32)
    assert _problems([_rollout(actions=actions)], multi) is None
    actions[0, 1, 1] = 2  # Fine for the first component, not the second.
    found = _problems([_rollout(actions=actions)], multi)
    assert found == "actions outside [[0, 0], [3, 2]) (from step 0, env 1)"
    entries = EnvSpec(
        "test",
        {"direction": ArraySpec((), "int32", num_values=4), "image": ArraySpec((2,), "uint8")},
        Discrete(2),
    )
    obs = {"direction": np.full((5, 3), 3, np.int32), "image": np.full((5, 3, 2), 255, np.uint8)}
    assert _problems([_rollout(obs=obs)], entries) is None
    obs["direction"][4, 2] = 4
    found = _problems([_rollout(obs=obs)], entries)
    assert found == "obs['direction'] outside [0, 4) (from step 4, env 2)"


@pytest.mark.parametrize("actor_loop", ["step", "scan"])
def test_a_non_finite_rollout_stops_the_run_before_the_learner_uses_it(tmp_path, actor_loop):
    config = agent_config(non_finite_policy_agent, pipeline__actor_loop=actor_loop)
    # Version 3 is the first bad one; with the one-step lag it collects rollout 4.
    message = (
        rf"actor thread 0 \({actor_loop} loop, cpu device 0\) collected a bad rollout 4 "
        r"with policy version 3: policy_outputs\['logits'\] not finite \(from step 0, env 0\)"
    )
    with pytest.raises(InvalidRolloutError, match=message):
        train.train(config, str(tmp_path))
    assert [line["update"] for line in read_metrics(str(tmp_path))] == [1, 2, 3]


def test_a_bad_rollout_exits_with_one_line(tmp_path):
    result = run_cli(tmp_path / "run", config=f"{TEST_CONFIG}:non_finite")
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("sebulba: bad data: actor thread 0 (")
    assert "bad rollout 4 with policy version 3" in last
    assert "Traceback" not in result.stderr


def _corrupting(monkeypatch, rollout: int, corrupt):
    """The pipeline with `corrupt(piece) -> piece` applied to the first learner piece of
    rollout `rollout` (one actor thread), after the actor collected it and before the checks:
    what a bad copy or a bad device buffer would hand over."""
    original = Pipeline._to_learner_devices
    calls = []

    def to_learner_devices(self, collected):
        pieces = original(self, collected)
        calls.append(None)
        if len(calls) == rollout:
            pieces = [corrupt(pieces[0]), *pieces[1:]]
        return pieces

    monkeypatch.setattr(Pipeline, "_to_learner_devices", to_learner_devices)


def test_an_action_outside_the_action_space_stops_ppo_before_it_learns_from_it(
    tmp_path, monkeypatch
):
    # PPO stores the log-probability its actor computed, so with such an action its
    # losses stay finite: only this check stops it.
    def corrupt(piece):
        return piece.replace(actions=piece.actions.at[1, 2].set(2**20))

    _corrupting(monkeypatch, 3, corrupt)
    config = agent_config(
        ppo, agent__num_steps=8, agent__num_minibatches=2, debug__transfer_guard="allow"
    )
    message = r"collected a bad rollout 3 .*: actions outside \[0, 2\) \(from step 1, env 2\)"
    with pytest.raises(InvalidRolloutError, match=message):
        train.train(config, str(tmp_path))
    assert [line["update"] for line in read_metrics(str(tmp_path))] == [1, 2]


def _consistency_config(**overrides):
    settings = dict(
        debug__consistency_checks=True, debug__transfer_guard="allow", total_timesteps=8 * 16 * 4
    )
    return agent_config(minimal_agent, **{**settings, **overrides})


@pytest.mark.parametrize("actor_loop", ["step", "scan"])
def test_the_consistency_checks_pass_a_sound_run_and_change_nothing(tmp_path, actor_loop):
    checked = _consistency_config(pipeline__actor_loop=actor_loop)
    checked.debug.transfer_guard = "disallow"  # Every transfer the checks make is explicit.
    plain = _consistency_config(pipeline__actor_loop=actor_loop, debug__consistency_checks=False)
    checksums = []
    for config, name in ((checked, "checked"), (plain, "plain")):
        train.train(config, str(tmp_path / name))
        checksums.append(read_summary(str(tmp_path / name))["params_checksum"])
    assert checksums[0] == checksums[1]


def test_the_consistency_checks_pass_a_recurrent_policy(tmp_path):
    config = agent_config(ppo, debug__consistency_checks=True, total_timesteps=8 * 16 * 3)
    config.update_from_flattened_dict({k.replace("__", "."): v for k, v in LSTM_RUN.items()})
    train.train(config, str(tmp_path))


@pytest.mark.parametrize(
    "corrupt, found",
    [
        # In spec, but not what the policy computed: the observation was changed.
        (
            lambda p: p.replace(obs=p.obs.at[2, 1].add(0.5)),
            r"policy_outputs\['logits'\] differ from their recomputation by up to [0-9.e-]+ "
            r"\(from step 2, env 1\)",
        ),
        # A valid action, but not the one the actor's key drew from these logits.
        (
            lambda p: p.replace(actions=p.actions.at[1, 3].set(1 - p.actions[1, 3])),
            r": actions differ from their resampling \(from step 1, env 3\)",
        ),
        # obs[0] that is not where the last rollout left the envs.
        (
            lambda p: p.replace(obs=p.obs.at[0, 5].add(0.25)),
            r"obs\[0\] differs from obs\[T\] of rollout 2 \(envs 5\)",
        ),
    ],
)
def test_the_consistency_checks_find_data_within_spec_that_is_wrong(
    tmp_path, monkeypatch, corrupt, found
):
    _corrupting(monkeypatch, 3, corrupt)
    with pytest.raises(InvalidRolloutError, match=found):
        train.train(_consistency_config(pipeline__actor_loop="step"), str(tmp_path))


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
