"""Device layout: which devices act, which learn, and how state and batches are sharded."""

import jax
import ml_collections
import pytest
from jax.sharding import PartitionSpec

from sebulba import train
from sebulba.errors import ConfigError
from sebulba.mesh import BATCH_AXIS, build_layout
from tests import minimal_agent
from tests.helpers import agent_config, read_summary


def mesh_config(actors, learners):
    return ml_collections.ConfigDict(
        {"actor_device_ids": tuple(actors), "learner_device_ids": tuple(learners)}
    )


def test_actor_and_learner_devices_follow_the_config():
    devices = jax.local_devices()
    layout = build_layout(mesh_config([0, 1], [4, 2, 3]))
    assert layout.actor_devices == (devices[0], devices[1])
    assert layout.local_learner_devices == (devices[4], devices[2], devices[3])
    assert layout.learner_mesh.axis_names == (BATCH_AXIS,)
    assert list(layout.learner_mesh.devices.flat) == [devices[4], devices[2], devices[3]]
    assert layout.replicated.spec == PartitionSpec()


def test_actor_and_learner_may_share_a_device():
    layout = build_layout(mesh_config([0], [0]))
    assert layout.actor_devices[0] == layout.local_learner_devices[0]


@pytest.mark.parametrize(
    "actors, learners, field",
    [
        ([8], [0], "mesh.actor_device_ids"),
        ([0], [1, 9], "mesh.learner_device_ids"),
        ([0], [], "mesh.learner_device_ids"),
        ([], [0], "mesh.actor_device_ids"),
        ([0], [1, 1], "mesh.learner_device_ids"),
        ([-1], [0], "mesh.actor_device_ids"),
    ],
)
def test_impossible_splits_fail_naming_the_field(actors, learners, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        build_layout(mesh_config(actors, learners))


def test_actors_on_the_host_cpu_take_its_cpu_devices():
    config = mesh_config([1], [0])
    config.actor_platform = "cpu"
    layout = build_layout(config)
    assert layout.actor_devices == (jax.local_devices(backend="cpu")[1],)
    config.actor_device_ids = (8,)  # The test process has 8 CPU devices.
    with pytest.raises(ConfigError, match=r"mesh\.actor_device_ids contains 8"):
        build_layout(config)
    config.actor_platform = "tpu"
    with pytest.raises(ConfigError, match=r"^mesh\.actor_platform 'tpu' must be one of"):
        build_layout(config)


def test_a_run_acting_on_the_host_cpu_learns_what_the_default_platform_learns(tmp_path):
    # On a CPU-only host both are the same devices: the platform changes where acting
    # runs, never which data it produces (on a GPU node, up to float rounding).
    summaries = []
    for platform in ("default", "cpu"):
        config = agent_config(minimal_agent, mesh__actor_platform=platform)
        workdir = str(tmp_path / platform)
        train.train(config, workdir)
        summaries.append(read_summary(workdir))
    assert summaries[0]["params_checksum"] == summaries[1]["params_checksum"]


def test_more_actor_devices_than_threads_is_rejected():
    config = agent_config(minimal_agent, mesh__actor_device_ids=[0, 1])
    with pytest.raises(ConfigError, match="pipeline.num_actor_threads"):
        train.prepare(config)


def test_learner_state_is_replicated_on_the_learner_mesh():
    config = agent_config(minimal_agent, mesh__learner_device_ids=[2, 5])
    setup = train.prepare(config)
    state = train.init_learner_state(setup)
    devices = jax.local_devices()
    for leaf in jax.tree.leaves(state):
        assert leaf.sharding.spec == PartitionSpec()
        assert leaf.sharding.device_set == {devices[2], devices[5]}
