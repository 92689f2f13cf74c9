"""One policy step of a training run's actors, the same for both runners.

The Sebulba pipeline's actor threads (step by step, or inside one program per rollout
with `sebulba.actors.scan_actor`) and the Anakin runner's act-and-learn program all
act through `actor_step`, so they draw the same sampling keys (the actor stream of
`sebulba.random_streams`, keyed by step index and global env index) and apply the
carry's reset rule the same way.
"""

from __future__ import annotations

from sebulba import random_streams
from sebulba.agents.api import Agent, reset_carry


def actor_step(agent: Agent, seed: int, params, carry, obs, starts, env_ids, step_index):
    """One policy step of an actor: -> (the carry obs was processed with, the next carry,
    actions, outputs, step_index + 1).

    The step index lives on the device and advances here, so a step transfers only its
    observations and episode-start flags (one host-to-device copy) and its actions (one
    copy back); the carry stays on the device.
    """
    keys = random_streams.actor_keys(seed, step_index, env_ids)
    carry = reset_carry(carry, starts, agent.new_carry(env_ids.shape[0]))
    return carry, *agent.recurrent_act(params, carry, obs, keys), step_index + 1
