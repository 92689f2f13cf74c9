"""Every size derived from a config, computed and checked in one place.

Divisibility rules fail here, before any work starts, with a message naming the fields
and numbers involved.
"""

from __future__ import annotations

import dataclasses

import ml_collections
import numpy as np

from sebulba.config.validation import FINITE_NON_NEGATIVE, check_range
from sebulba.errors import ConfigError

# The largest `pipeline.policy_lag`: each step of lag keeps one more copy of the policy
# parameters on every actor device and the learner, and one more rollout in flight.
MAX_POLICY_LAG = 16


@dataclasses.dataclass(frozen=True)
class Sizes:
    """Derived sizes of a run.

    Attributes:
      num_processes: JAX processes in the run.
      num_actor_threads: actor threads per process.
      envs_per_thread: envs stepped by one actor thread (`env.num_envs`).
      num_envs: envs over all threads and processes (the rollout's B).
      num_steps: steps per env per rollout (the rollout's T, `agent.num_steps`).
      learner_devices_per_process: local learner devices.
      num_learner_devices: learner devices over all processes.
      envs_per_learner_device: columns of the rollout held by one learner device.
      steps_per_update: env steps consumed by one update (B * T).
      num_updates: learner updates in the whole run.
    """

    num_processes: int
    num_actor_threads: int
    envs_per_thread: int
    num_envs: int
    num_steps: int
    learner_devices_per_process: int
    num_learner_devices: int
    envs_per_learner_device: int
    steps_per_update: int
    num_updates: int

    @property
    def global_steps(self) -> int:
        """Env steps the run will have taken when it ends."""
        return self.num_updates * self.steps_per_update

    def env_order(self) -> np.ndarray:
        """[num_envs] int32: the global env id of each column of the rollout's env axis.

        Actor thread h of process p steps the envs (p * threads + h) * env.num_envs + i and
        sends each local learner device an equal, contiguous slice of them; the rollout's
        env axis is laid out process by process, learner device by learner device, and on
        each device thread by thread. So 2 threads x 4 envs on 2 learner devices give
        [0, 1, 4, 5, 2, 3, 6, 7], and one thread (the Anakin runner's case) the id order.
        Learner state split along envs (a replay buffer) follows this order: a checkpoint
        records it, and a restore onto another layout moves the columns to the new one.
        """
        processes, threads = self.num_processes, self.num_actor_threads
        devices = self.learner_devices_per_process
        ids = np.arange(self.num_envs, dtype=np.int32)
        ids = ids.reshape(processes, threads, devices, self.envs_per_thread // devices)
        return ids.transpose(0, 2, 1, 3).reshape(-1)


def _positive(value, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return value


def derive_sizes(config: ml_collections.ConfigDict, num_processes: int = 1) -> Sizes:
    """Computes and validates every derived size of `config`.

    Raises:
      ConfigError: naming the offending fields and numbers.
    """
    num_actor_threads = _positive(config.pipeline.num_actor_threads, "pipeline.num_actor_threads")
    envs_per_thread = _positive(config.env.num_envs, "env.num_envs")
    num_steps = _positive(config.agent.num_steps, "agent.num_steps")
    total_timesteps = _positive(config.total_timesteps, "total_timesteps")
    learner_ids = list(config.mesh.learner_device_ids)
    if not learner_ids:
        raise ConfigError("mesh.learner_device_ids must name at least one device")
    learner_devices_per_process = len(learner_ids)
    if envs_per_thread % learner_devices_per_process:
        raise ConfigError(
            f"env.num_envs ({envs_per_thread}) must be divisible by the number of "
            f"mesh.learner_device_ids ({learner_devices_per_process}): each actor thread "
            "sends an equal slice of its envs to every learner device"
        )
    num_envs = num_processes * num_actor_threads * envs_per_thread
    steps_per_update = num_envs * num_steps
    num_updates = total_timesteps // steps_per_update
    if num_updates < 1:
        raise ConfigError(
            f"total_timesteps ({total_timesteps}) is smaller than one update: "
            f"env.num_envs ({envs_per_thread}) x pipeline.num_actor_threads "
            f"({num_actor_threads}) x processes ({num_processes}) x agent.num_steps "
            f"({num_steps}) = {steps_per_update} steps"
        )
    lag = config.pipeline.policy_lag
    if isinstance(lag, bool) or not isinstance(lag, int) or not 0 <= lag <= MAX_POLICY_LAG:
        raise ConfigError(
            f"pipeline.policy_lag must be an integer from 0 to {MAX_POLICY_LAG}, got {lag!r}"
        )
    for name in ("learner_delay_s", "actor_delay_s", "actor_delay_jitter_s"):
        check_range(config.debug[name], f"debug.{name}", FINITE_NON_NEGATIVE)
    return Sizes(
        num_processes=num_processes,
        num_actor_threads=num_actor_threads,
        envs_per_thread=envs_per_thread,
        num_envs=num_envs,
        num_steps=num_steps,
        learner_devices_per_process=learner_devices_per_process,
        num_learner_devices=learner_devices_per_process * num_processes,
        envs_per_learner_device=num_actor_threads * envs_per_thread // learner_devices_per_process,
        steps_per_update=steps_per_update,
        num_updates=num_updates,
    )
