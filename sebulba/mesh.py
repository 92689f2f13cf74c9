"""Device layout: actor devices, the global learner mesh and its shardings.

The only module that builds a `Mesh`. Each process names its actor and learner devices
as indices into `jax.local_devices()` (with `mesh.actor_platform="cpu"`, the actor
devices into the host's CPU devices, `jax.local_devices(backend="cpu")`). The learner
devices of all processes form one 1-D mesh, ordered by process index and then by the
configured local order, so every process builds the identical mesh (the Podracer
"Sebulba" layout of Hessel et al. 2021).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import ml_collections
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from sebulba.errors import ConfigError

# The learner mesh's only axis: rollouts are split along their env axis over it.
BATCH_AXIS = "batch"
# `mesh.actor_platform`: where actor devices come from.
ACTOR_PLATFORMS = ("default", "cpu")


@dataclasses.dataclass(frozen=True)
class DeviceLayout:
    """Where actors and the learner run.

    Attributes:
      actor_devices: this process's actor devices, in configured order.
      local_learner_devices: this process's learner devices, in mesh order.
      learner_mesh: 1-D mesh over the learner devices of every process.
    """

    actor_devices: tuple[jax.Device, ...]
    local_learner_devices: tuple[jax.Device, ...]
    learner_mesh: Mesh

    @property
    def replicated(self) -> NamedSharding:
        """Sharding of parameters and optimizer state: a full copy per learner device."""
        return NamedSharding(self.learner_mesh, PartitionSpec())

    def sharding(self, spec: PartitionSpec) -> NamedSharding:
        return NamedSharding(self.learner_mesh, spec)

    @property
    def actors_share_an_accelerator(self) -> bool:
        """Whether a device that acts is also one that learns, and not a CPU."""
        shared = set(self.actor_devices) & set(self.local_learner_devices)
        return any(device.platform != "cpu" for device in shared)

    def describe(self) -> str:
        """A one-line, layout-identifying description (logged and put in summary.json)."""
        return (
            f"processes={jax.process_count()} "
            f"actor_devices={[d.id for d in self.actor_devices]} "
            f"learner_devices={[d.id for d in self.learner_mesh.devices.flat]}"
        )


def _devices_of_process(devices: Sequence[jax.Device], process_index: int) -> list[jax.Device]:
    # Same order on every process: sorted by global device id.
    return sorted((d for d in devices if d.process_index == process_index), key=lambda d: d.id)


def _check_ids(ids, field: str, num_local: int) -> list[int]:
    ids = list(ids)
    if not ids:
        raise ConfigError(f"{field} must name at least one device")
    for i in ids:
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < num_local:
            raise ConfigError(
                f"{field} contains {i!r}, but this process has {num_local} local device(s) "
                f"(valid indices 0..{num_local - 1})"
            )
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{field} lists a device twice: {ids}")
    return ids


def build_layout(
    mesh_config: ml_collections.ConfigDict,
    devices: Sequence[jax.Device] | None = None,
    process_index: int | None = None,
) -> DeviceLayout:
    """Builds actor devices and the global learner mesh from `config.mesh`.

    Actor and learner may share a device (one GPU, or a CPU). Every process must use
    the same number of learner devices, which is what the config guarantees.

    Args:
      mesh_config: `config.mesh`.
      devices: every device of the run (default `jax.devices()`); `sebulba.check` passes
        the devices of a TPU topology that is not attached.
      process_index: the process whose actor and local learner devices to name (default
        `jax.process_index()`).

    Raises:
      ConfigError: an index is out of range, repeated, or no device is named.
    """
    devices = jax.devices() if devices is None else list(devices)
    process_index = jax.process_index() if process_index is None else process_index
    processes = sorted({d.process_index for d in devices})
    local = _devices_of_process(devices, process_index)
    actor_candidates = local
    if actor_platform(mesh_config) == "cpu":
        actor_candidates = host_cpu_devices()
    actor_ids = _check_ids(
        mesh_config.actor_device_ids, "mesh.actor_device_ids", len(actor_candidates)
    )
    learner_ids = _check_ids(mesh_config.learner_device_ids, "mesh.learner_device_ids", len(local))
    learner_devices = [_devices_of_process(devices, p)[i] for p in processes for i in learner_ids]
    return DeviceLayout(
        actor_devices=tuple(actor_candidates[i] for i in actor_ids),
        local_learner_devices=tuple(local[i] for i in learner_ids),
        learner_mesh=Mesh(learner_devices, (BATCH_AXIS,)),
    )


def actor_platform(mesh_config: ml_collections.ConfigDict) -> str:
    """`mesh.actor_platform`, checked.

    Raises:
      ConfigError: a value other than those of `ACTOR_PLATFORMS`.
    """
    value = mesh_config.get("actor_platform", "default")
    if value not in ACTOR_PLATFORMS:
        raise ConfigError(
            f"mesh.actor_platform {value!r} must be one of {', '.join(ACTOR_PLATFORMS)}"
        )
    return value


def host_cpu_devices() -> list[jax.Device]:
    """This process's CPU devices, sorted by id (the actors' with `actor_platform="cpu"`).

    Raises:
      ConfigError: JAX has no CPU backend here (`JAX_PLATFORMS` leaves it out).
    """
    try:
        return sorted(jax.local_devices(backend="cpu"), key=lambda d: d.id)
    except RuntimeError as error:
        raise ConfigError(
            f"mesh.actor_platform is 'cpu' but JAX has no CPU backend here ({error}); add "
            "cpu to JAX_PLATFORMS (e.g. JAX_PLATFORMS=cuda,cpu)"
        ) from None
