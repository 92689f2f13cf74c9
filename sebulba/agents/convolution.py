"""A 2-D convolution whose gradients are convolutions in the layout XLA:CPU runs fast.

JAX differentiates `lax.conv_general_dilated` into two convolutions: the input's gradient
and the kernel's. It writes the kernel's as a convolution whose dimension numbers swap
the batch and feature axes (`f01b_i01o->01bf` for NHWC inputs). In straight-line code
XLA:CPU rewrites such a convolution into the NHWC / HWIO form its Eigen kernels take; in
the body of a loop (a rolled `lax.scan` over minibatches, DQN's and SAC's gradient steps)
it does not, and runs it through its generic loop nest instead: 7x to 23x slower per
update (`python benchmarks/minibatch_loop.py`, docs/benchmarks.md).

`conv_general_dilated` computes the same forward convolution and writes both gradients
with the transposes made explicit, so that each is itself an NHWC / HWIO convolution,
which Eigen runs wherever it stands. On a CPU its gradients are bitwise JAX's in
straight-line code, whole unrolled updates included (`tests/test_networks.py`): a run
that unrolled its loop before gives the same parameters.

It covers stride-1 NHWC / HWIO convolutions without dilation or feature groups: the
MinAtar network's, the IMPALA ResNet's and the "multi_input" encoder's on small images.
Anything else goes to `lax.conv_general_dilated` unchanged, strided convolutions (the
Nature CNN's) included: written the same way, their gradients run fast in a loop too
(1.0 s against 10.9 s per update of the benchmark's Breakout case), but in a whole
unrolled update XLA:CPU then rounds them differently than JAX's, which would change
every recorded Nature CNN run on a CPU.

`flax.linen.Conv(..., conv_general_dilated=conv_general_dilated)` uses it; the module's
parameters are unchanged, so checkpoints and initial parameters do not depend on it.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax import lax

# What `flax.linen.Conv` passes for NHWC inputs: lhs (N, C, H, W), rhs (O, I, H, W) and
# output (N, C, H, W) as the positions of those axes in NHWC / HWIO arrays.
_NHWC = lax.ConvDimensionNumbers(
    lhs_spec=(0, 3, 1, 2), rhs_spec=(3, 2, 0, 1), out_spec=(0, 3, 1, 2)
)
_NHWC_NAMES = ("NHWC", "HWIO", "NHWC")


def _is_nhwc(dimension_numbers) -> bool:
    if dimension_numbers is None:
        return False
    if isinstance(dimension_numbers, lax.ConvDimensionNumbers):
        return tuple(map(tuple, dimension_numbers)) == tuple(map(tuple, _NHWC))
    return tuple(dimension_numbers) == _NHWC_NAMES


def _conv(lhs, rhs, strides, padding, lhs_dilation=(1, 1), rhs_dilation=(1, 1), precision=None):
    return lax.conv_general_dilated(
        lhs,
        rhs,
        strides,
        padding,
        lhs_dilation=lhs_dilation,
        rhs_dilation=rhs_dilation,
        dimension_numbers=_NHWC_NAMES,
        precision=precision,
    )


def writes_gradients(
    ndim: int,
    window_strides: Sequence[int],
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers=None,
    feature_group_count: int = 1,
    batch_group_count: int = 1,
    preferred_element_type=None,
    **_unused,
) -> bool:
    """Whether `conv_general_dilated` writes this convolution's gradients itself (so that
    XLA:CPU runs them as fast in a rolled loop as unrolled); False where they are JAX's.

    Takes `lax.conv_general_dilated`'s arguments, or a traced `conv_general_dilated`
    equation's params (`ndim` the input's rank; the rest, padding and precision, do not
    decide).
    """
    return (
        ndim == 4
        and _is_nhwc(dimension_numbers)
        and all(d == 1 for d in (lhs_dilation or (1, 1)))
        and all(d == 1 for d in (rhs_dilation or (1, 1)))
        and feature_group_count == 1
        and batch_group_count == 1
        and preferred_element_type is None
        and all(int(s) == 1 for s in window_strides)
    )


def conv_general_dilated(
    lhs: jax.Array,
    rhs: jax.Array,
    window_strides: Sequence[int],
    padding,
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers=None,
    feature_group_count: int = 1,
    batch_group_count: int = 1,
    precision=None,
    preferred_element_type=None,
) -> jax.Array:
    """`lax.conv_general_dilated`'s signature and result; stride-1 NHWC / HWIO convolutions
    without dilation or groups get gradients in Eigen's layout (module docstring)."""
    plain = writes_gradients(
        lhs.ndim,
        window_strides,
        lhs_dilation,
        rhs_dilation,
        dimension_numbers,
        feature_group_count,
        batch_group_count,
        preferred_element_type,
    )
    if not plain:
        return lax.conv_general_dilated(
            lhs,
            rhs,
            window_strides,
            padding,
            lhs_dilation=lhs_dilation,
            rhs_dilation=rhs_dilation,
            dimension_numbers=dimension_numbers,
            feature_group_count=feature_group_count,
            batch_group_count=batch_group_count,
            precision=precision,
            preferred_element_type=preferred_element_type,
        )
    strides = tuple(int(s) for s in window_strides)
    if isinstance(padding, str):
        padding = lax.padtype_to_pads(lhs.shape[1:3], rhs.shape[0:2], strides, padding)
    pads = tuple((int(low), int(high)) for low, high in padding)
    return _nhwc_conv(lhs, rhs, strides, pads, precision)


def _nhwc_conv_impl(lhs, rhs, strides, pads, precision):
    return _conv(lhs, rhs, strides, pads, precision=precision)


_nhwc_conv = jax.custom_vjp(_nhwc_conv_impl, nondiff_argnums=(2, 3, 4))


def _forward(lhs, rhs, strides, pads, precision):
    return _nhwc_conv(lhs, rhs, strides, pads, precision), (lhs, rhs)


def _backward(strides, pads, precision, residuals, grad_out):
    lhs, rhs = residuals
    kernel = rhs.shape[0:2]
    in_size, out_size = lhs.shape[1:3], grad_out.shape[1:3]
    # The input's gradient: the output's gradient, dilated by the strides, correlated with
    # the kernel flipped in space and with its in and out features swapped (HWOI as HWIO).
    lhs_pads = tuple(
        (k - 1 - low, n - (m - 1) * s - 1 + low)
        for k, n, m, s, (low, _) in zip(kernel, in_size, out_size, strides, pads, strict=True)
    )
    flipped = jnp.flip(rhs, (0, 1)).transpose(0, 1, 3, 2)
    grad_lhs = _conv(grad_out, flipped, (1, 1), lhs_pads, lhs_dilation=strides, precision=precision)
    # The kernel's gradient: the input with its features as the batch [C, H, W, N],
    # correlated with the output's gradient as an HWIO kernel [H', W', N, O] dilated by the
    # strides; the result [C, kh, kw, O] is the kernel's gradient as [kh, kw, C, O].
    rhs_pads = tuple(
        (low, (m - 1) * s + k - n - low)
        for k, n, m, s, (low, _) in zip(kernel, in_size, out_size, strides, pads, strict=True)
    )
    grad_rhs = _conv(
        lhs.transpose(3, 1, 2, 0),
        grad_out.transpose(1, 2, 0, 3),
        (1, 1),
        rhs_pads,
        rhs_dilation=strides,
        precision=precision,
    ).transpose(1, 2, 0, 3)
    return grad_lhs, grad_rhs


_nhwc_conv.defvjp(_forward, _backward)
