"""What the Sebulba pipeline's actor threads are made of (`sebulba/pipeline.py` runs them).

  actor_step     the policy step both runners act with (the Anakin runner too): sampling
                 keys from the actor stream, the carry's reset
  scan_actor     `pipeline.actor_loop="scan"`: an actor thread's rollout as one XLA
                 program through envpool's XLA interface; which tasks and devices allow it
  rollout_check  the check, where the rollout lies, that it holds only values its spec
                 allows (finite floats, bounded integers, 0/1 flags, the thread's env
                 ids) before the handoff
  consistency_check
                 `debug.consistency_checks`: each rollout re-derived from its records
                 (policy outputs, actions, obs[0] against the last obs[T])
  rollouts       what a thread collects: its env groups, the step loop's host rollout,
                 the scan loop's collector, the pieces handed to the learner
  handoff        thread coordination between actors and learner: stop flag and first
                 error, versioned parameter store, stop-aware queue waits, the gate that
                 starts actor threads together

docs/architecture.md describes the design and its guarantees.
"""
