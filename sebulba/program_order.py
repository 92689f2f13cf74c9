"""Orders within one XLA program made data, so that no compiler pass can move them.

A compiler schedules an instruction anywhere its operands allow. An optimisation
barrier is not an operand: XLA:CPU removes barriers before it schedules (XLA:GPU after,
by the position of one pass). Where the order of two independent parts of a program
matters, such as the fused step's update piece between an env step's send and its
receive (`sebulba.actors.scan_actor`), it is made a data dependence here:

    flag = completion_flag(first)    # False, computed from every element of `first`
    second = after(flag, second)     # `second` unchanged, but read through `flag`

Whatever reads the result of `after` runs once all of `first` is computed. The flag is
`isfinite(t) and |t| == inf` of a sum t over every element: false for every float t
(NaN and infinities included), while no XLA simplification relates the two tests, so
the compiler can neither fold it nor skip computing t.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _is_key(x) -> bool:
    return jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def _numbers(x) -> jax.Array:
    """A leaf's numbers (a typed PRNG key's bits)."""
    return jax.random.key_data(x) if _is_key(x) else x


def completion_flag(tree) -> jax.Array:
    """A boolean scalar, always False, that XLA can only compute from all of `tree`."""
    total = sum(
        (jnp.sum(_numbers(leaf).astype(jnp.float32)) for leaf in jax.tree.leaves(tree)),
        start=jnp.zeros((), jnp.float32),
    )
    return jnp.logical_and(jnp.isfinite(total), jnp.abs(total) == jnp.inf)


def after(flag: jax.Array, tree):
    """`tree` unchanged, each leaf through a select on `flag` (a `completion_flag`)."""

    def passed(x):
        if not _is_key(x):
            return jnp.where(flag, jnp.zeros_like(x), x)
        data = jax.random.key_data(x)
        return jax.random.wrap_key_data(
            jnp.where(flag, jnp.zeros_like(data), data), impl=jax.random.key_impl(x)
        )

    return jax.tree.map(passed, tree)
