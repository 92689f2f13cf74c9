"""benchmarks/ceilings.py: the actor side's figures, and what its handoff figure copies."""

import os
import sys

import numpy as np

from sebulba import train
from tests.helpers import load_config

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks"))
import ceilings  # noqa: E402


def _cartpole(num_envs=4, learner_device=1):
    config = load_config("ppo_cartpole")
    config.env.num_envs = num_envs
    config.agent.num_steps = 16
    config.mesh.actor_device_ids = (0,)
    config.mesh.learner_device_ids = (learner_device,)
    return config


def test_the_actor_side_says_where_each_loops_time_goes():
    # Each figure is measured (no timing relation is asserted: the machine is shared).
    result = ceilings.measure(_cartpole(), seconds=0.2, updates=0, only=("actor",))
    figures = [
        f"{part}_{loop}_sps" for part in ("actor_only", "handoff") for loop in ("step", "scan")
    ]
    figures += ["policy_calls_sps", "policy_in_scan_sps", "episode_bookkeeping_sps"]
    assert all(np.isfinite(result[key]) and result[key] > 0 for key in figures), result
    assert "learner_only_sps" not in result and "end_to_end_scan_sps" not in result


def test_the_handoff_is_timed_on_the_rollout_the_actor_collected():
    # The rollout kept before its handoff is the one handed over: copying it again gives
    # the pieces the learner received, on the learner's device.
    config = ceilings.endless(_cartpole(learner_device=2))
    setup = train.prepare(config)
    try:
        _, pipeline, _, rollouts, collected = ceilings.actor_only_sps(setup, 0.2, "scan")
    finally:
        ceilings._close(setup)
    pieces = pipeline._to_learner_devices(collected)
    assert pipeline.check_rollout(pieces, pipeline.piece_env_ids(0)) is None
    assert {d.id for piece in pieces for d in piece.obs.devices()} == {2}
    assert pieces[0].obs.shape == rollouts[0].pieces[0].obs.shape
    assert np.asarray(pieces[0].obs).any()  # Real observations, not zeros.
