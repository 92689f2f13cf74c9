"""The actors' check that a rollout is finite before the learner sees it.

A NaN or infinity in a rollout (a corrupted device buffer, an env that returns NaN, a
policy whose parameters diverged) would otherwise reach the learner as a diverged loss
with no hint of where it came from. Each actor thread checks its rollout where it lies,
one small reduction per learner-device piece: for every floating-point leaf, whether
each time step is finite. Only those few booleans cross to the host, so the check
costs one tiny program and one small copy per rollout; the full report (which fields,
the first bad step) is built on the host only when something is not finite.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from sebulba.agents.api import Rollout, rollout_env_axes


def _finite_per_step(env_axis: int, x: jax.Array) -> jax.Array | None:
    """[T (+ 1)] bools for a time-major leaf, [1] for a per-env leaf; None if not float."""
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        return None
    finite = jnp.isfinite(x)
    if env_axis == 0:  # Per-env leaves (initial_carry) have no time axis.
        return jnp.all(finite)[None]
    return jnp.all(finite.reshape(finite.shape[0], -1), axis=1)


@jax.jit
def finite_steps(rollout: Rollout) -> dict[str, jax.Array]:
    """Per floating-point leaf (by its path), whether each of its time steps is finite."""
    flags = jax.tree.map(_finite_per_step, rollout_env_axes(rollout), rollout)
    paths = jax.tree_util.tree_flatten_with_path(flags)[0]
    return {jax.tree_util.keystr(path).lstrip("."): leaf for path, leaf in paths}


def non_finite_fields(pieces: Sequence[Rollout]) -> str | None:
    """Where the pieces of one rollout are not finite ("rewards from step 3, ..."); None if all are.

    Blocks until the pieces are computed (the flags are read back).
    """
    flags = jax.device_get([finite_steps(piece) for piece in pieces])
    found = {}
    for piece_flags in flags:
        for name, finite in piece_flags.items():
            bad_steps = np.flatnonzero(~np.asarray(finite))
            if bad_steps.size:
                first = int(bad_steps[0])
                found[name] = min(found.get(name, first), first)
    if not found:
        return None
    per_env = ("initial_carry", "env_ids")
    return ", ".join(
        name if name.startswith(per_env) else f"{name} (from step {step})"
        for name, step in found.items()
    )
