"""What the Sebulba pipeline's actor threads are made of (`sebulba/pipeline.py` runs them).

  actor_step     the policy step both runners act with (the Anakin runner too): sampling
                 keys from the actor stream, the carry's reset
  scan_actor     `pipeline.actor_loop="scan"`: an actor thread's rollout as one XLA
                 program through envpool's XLA interface; which tasks and devices allow it
  rollout_check  the check, on the actor's device, that a rollout is finite before the
                 handoff
  handoff        thread coordination between actors and learner: stop flag and first
                 error, versioned parameter store, stop-aware queue waits, the gate that
                 starts actor threads together

docs/architecture.md describes the design and its guarantees.
"""
