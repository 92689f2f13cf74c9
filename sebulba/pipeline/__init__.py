"""Sebulba: envpool envs on the host CPUs, actor threads and a learner thread per process.

The first architecture of the Podracer paper (Hessel et al. 2021, "Podracer
architectures for scalable reinforcement learning"), with the deterministic one-step lag
of Cleanba (Huang et al. 2023): actor threads step envpool environments on the host CPUs
and run batched policy inference on actor devices, and a learner thread runs one jitted
update over the learner mesh, which spans the learner devices of every process. It
shares with the Anakin runner (`sebulba.anakin`) the agents, the `Rollout` contract,
the mesh, the lag schedule (`sebulba.lag_schedule`), the policy step
(`sebulba.actor_step`), the config sections, checkpoints, metrics and the workdir's
outputs:

  actor_learner  `Pipeline`: the actor threads, the learner loop and the double-buffered
                 handoff between them; the global rollout's shapes and shardings
                 (`rollout_struct`) and the update lowered for the learner mesh
                 (`lower_update`)
  scan_actor     `pipeline.actor_loop="scan"`: an actor thread's rollout as one XLA
                 program through envpool's XLA interface; which tasks and devices allow it
  handoff        thread coordination: stop flag and first error, versioned parameter
                 store, stop-aware queue waits

docs/architecture.md describes the design and its guarantees.
"""

from sebulba.pipeline.actor_learner import Pipeline, lower_update, rollout_struct

__all__ = ["Pipeline", "lower_update", "rollout_struct"]
