"""The policy-version schedule that both runners follow (docs/architecture.md).

Policy versions count from 1 (the initial parameters). Update k consumes rollout k and
produces version k + 1; rollout k is collected with version `max(1, k - policy_lag)`:
with lag 1 (Cleanba's one-step lag) rollout k + 1 is collected while update k runs, with
lag 0 acting and learning alternate. The Sebulba pipeline's actors wait for exactly this
version and its learner checks it; the Anakin runner carries the previous parameters to
act with it; the checkpoints and metrics record it.
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
