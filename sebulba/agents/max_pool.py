"""A max-pool whose gradient is made of strided slices and pads: no scatter.

`flax.linen.max_pool` is `lax.reduce_window(max)`; its gradient is XLA's
select-and-scatter, which a CPU compiles into a windowed arg-max and a scatter, and which a
GPU runs with atomic additions (or, with deterministic ops required, as a sorted scatter).
`max_pool` computes the same function from the k_h x k_w strided views of the padded
input: the forward pass is their elementwise maximum (exact, so equal to reduce_window's);
the backward pass sends each output's gradient to the first element of its window, in
row-major order, that equals the maximum (XLA's select-and-scatter chooses the same one),
and adds the contributions of overlapping windows in the order XLA's scatter adds them
(windows in row-major order of their outputs). On a CPU both passes are therefore bitwise
those of `flax.linen.max_pool`, ties included (`tests/test_networks.py`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax


def _padding(size: int, window: int, stride: int, padding: str) -> tuple[int, int, int]:
    """-> (output size, padding before, padding after) along one spatial axis."""
    if padding == "VALID":
        return (size - window) // stride + 1, 0, 0
    if padding != "SAME":
        raise ValueError(f"padding must be 'SAME' or 'VALID', got {padding!r}")
    out = -(-size // stride)
    total = max((out - 1) * stride + window - size, 0)
    return out, total // 2, total - total // 2


def _geometry(shape, window, strides, padding):
    return [_padding(shape[1 + a], window[a], strides[a], padding) for a in (0, 1)]


def _padded(x: jax.Array, geometry) -> jax.Array:
    (_, top, bottom), (_, left, right) = geometry
    return jnp.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=-jnp.inf)


def _views(padded: jax.Array, geometry, window, strides) -> list[jax.Array]:
    """The window's k_h x k_w strided views of the padded input, in row-major order: view
    (i, j) holds element (i, j) of every window, shaped like the output."""
    (out_h, _, _), (out_w, _, _) = geometry
    batch, channels = padded.shape[0], padded.shape[-1]
    return [
        lax.slice(
            padded,
            (0, i, j, 0),
            (batch, i + (out_h - 1) * strides[0] + 1, j + (out_w - 1) * strides[1] + 1, channels),
            (1, strides[0], strides[1], 1),
        )
        for i in range(window[0])
        for j in range(window[1])
    ]


def _shifted(values, offset, room):
    """NHWC `values` placed `offset` (rows, columns) into zeros that are `room` larger."""
    (down, right), (extra_rows, extra_columns) = offset, room
    return lax.pad(
        values,
        jnp.zeros((), values.dtype),
        ((0, 0, 0), (down, extra_rows - down, 0), (right, extra_columns - right, 0), (0, 0, 0)),
    )


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3))
def max_pool(x: jax.Array, window=(3, 3), strides=(2, 2), padding: str = "SAME") -> jax.Array:
    """Max-pool of NHWC `x` over H and W; what `flax.linen.max_pool(x, window, strides,
    padding)` computes, for padding "SAME" or "VALID"."""
    geometry = _geometry(x.shape, window, strides, padding)
    return functools.reduce(jnp.maximum, _views(_padded(x, geometry), geometry, window, strides))


def _forward(x, window, strides, padding):
    y = max_pool(x, window, strides, padding)
    return y, (x, y)


def _backward(window, strides, padding, residuals, dy):
    x, y = residuals
    geometry = _geometry(x.shape, window, strides, padding)
    padded = _padded(x, geometry)
    # The first view, in row-major order, that holds each window's maximum takes its gradient.
    chosen, taken = [], jnp.zeros(y.shape, bool)
    for view in _views(padded, geometry, window, strides):
        first = jnp.logical_and(view == y, jnp.logical_not(taken))
        chosen.append(first)
        taken = jnp.logical_or(taken, first)
    # Each view's contributions, spread back to its strided positions without materialising
    # a padded array per view: the padded input splits into strides[0] x strides[1]
    # phases (rows = a mod strides[0], columns = b mod strides[1]); view (i, j) lands in
    # phase (i mod strides[0], j mod strides[1]), shifted by (i // strides[0],
    # j // strides[1]) of the output's shape. Of two windows that choose one element, the
    # later (in row-major output order) holds it at a smaller view index: adding the views
    # in reverse adds the windows in XLA's scatter order.
    zero = jnp.zeros((), dy.dtype)
    (out_h, top, _), (out_w, left, _) = geometry
    rows, columns = -(-padded.shape[1] // strides[0]), -(-padded.shape[2] // strides[1])
    phase_shape = (dy.shape[0], rows, columns, dy.shape[3])
    phase_rows = []
    for a in range(strides[0]):
        phases = []
        for b in range(strides[1]):
            phase = jnp.zeros(phase_shape, dy.dtype)
            # This phase's views, in reverse view order (as above).
            for i in reversed(range(a, window[0], strides[0])):
                for j in reversed(range(b, window[1], strides[1])):
                    phase = phase + _shifted(
                        jnp.where(chosen[i * window[1] + j], dy, zero),
                        (i // strides[0], j // strides[1]),
                        (rows - out_h, columns - out_w),
                    )
            phases.append(phase)
        phase_rows.append(jnp.stack(phases, axis=3))  # [N, rows, columns, b, C]
    interleaved = jnp.stack(phase_rows, axis=2)  # [N, rows, a, columns, b, C]
    dx = interleaved.reshape(dy.shape[0], rows * strides[0], columns * strides[1], dy.shape[3])
    return (dx[:, top : top + x.shape[1], left : left + x.shape[2], :],)


max_pool.defvjp(_forward, _backward)
