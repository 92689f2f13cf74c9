"""The policy-version schedule that both runners follow (docs/architecture.md).

Policy versions count from 1 (the initial parameters). Update k consumes rollout k and
produces version k + 1; rollout k is collected with version `max(1, k - policy_lag)`:
with lag 1 (Cleanba's one-step lag) rollout k + 1 is collected while update k runs, with
lag 0 acting and learning alternate, and with lag L the actors may run L rollouts ahead
of the learner. The Sebulba pipeline's actors wait for exactly this version and its
learner checks it; the Anakin runner carries the L previous versions to act with the
oldest; the checkpoints and metrics record it.

The lagged versions: before update u, the state holds version u and rollouts u .. u + L - 1
still need versions `lagged_versions(u, L)` (oldest first), which a run carries, a
checkpoint after update u - 1 saves and a resumed run starts from.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def required_policy_version(update: int, policy_lag: int) -> int:
    """Parameter version that must collect rollout `update` (both count from 1)."""
    return max(1, update - policy_lag)


def behaviour_version(update: jax.Array, policy_lag: int) -> jax.Array:
    """`required_policy_version` inside jit: an update's int32 number (from 1) -> the
    version that collected its rollout, for an agent that reports its behaviour's values."""
    return jnp.maximum(update - policy_lag, 1)


def lagged_versions(update: int, policy_lag: int) -> list[int]:
    """Versions that collect rollouts `update` .. `update + policy_lag - 1`, oldest first
    (the L versions a run holds besides the state's, version `update`; repeated where
    the schedule starts at version 1)."""
    return [required_policy_version(update + i, policy_lag) for i in range(policy_lag)]


def advance_lagged(lagged: tuple, params) -> tuple:
    """The lagged parameters of the next update: drop the oldest, append `params`
    (version `update`, whose update just ran). `()` stays `()` (policy_lag 0)."""
    return (*lagged[1:], params) if lagged else lagged
