"""benchmarks/learner_profile.py: each operation's own time, read from a real trace."""

import os
import sys

import jax
import jax.numpy as jnp
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks"))
import learner_profile  # noqa: E402


def test_nested_operations_charge_their_parent_only_its_own_time():
    events = [("loop", 0, 100), ("conv", 10, 40), ("add", 40, 50), ("conv", 60, 90)]
    events.append(("copy", 200, 230))  # After the loop closed.
    assert learner_profile.own_times(events) == {"loop": 30, "conv": 60, "add": 10, "copy": 30}


def _update(state, rollout):
    """A stand-in learner update: a convolution and a matrix product in a loop."""
    kernel = jnp.ones((3, 3, 4, 4), jnp.float32)

    def body(x, _):
        y = jax.lax.conv_general_dilated(
            x, kernel, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
        return jnp.tanh(y @ jnp.eye(4)), None

    out, _ = jax.lax.scan(body, rollout, None, length=3)
    return state + out.mean(), {"loss": out.sum()}


def test_a_traced_update_is_split_into_kinds_that_add_up_to_its_operations():
    state, rollout = jnp.zeros(()), jnp.ones((8, 16, 16, 4))
    compiled = jax.jit(_update).lower(state, rollout).compile()
    times, wall = learner_profile.profile_update(compiled, state, rollout, updates=2)
    summary = learner_profile.summarise(times, wall, 2, compiled.as_text(), top=50)
    assert summary["op_ms"] > 0 and summary["wall_ms"] > 0
    assert sum(summary["kinds"].values()) == pytest.approx(summary["op_ms"])
    # Every traced operation is one the program has; the loop itself is not charged.
    kinds = set(summary["kinds"])
    assert "unknown" not in kinds and "while" not in kinds, kinds
    assert any("convolution" in kind for kind in kinds), kinds
    assert summary["top_ops"][0]["ms"] == max(row["ms"] for row in summary["top_ops"])


def test_a_custom_call_is_named_by_its_target_and_a_fusion_by_what_it_fuses():
    text = "\n".join(
        [
            "HloModule jit_update, entry_computation_layout={()->f32[]}",
            "%fused_computation.3 (p: f32[4]) -> f32[4] {",
            "  %p = f32[4]{0} parameter(0)",
            "  ROOT %dot.1 = f32[4]{0} dot(f32[4]{0} %p, f32[4]{0} %p), lhs_contracting_dims={}",
            "}",
            "ENTRY %main (a: f32[4]) -> (f32[4], f32[4]) {",
            "  %a = f32[4]{0} parameter(0)",
            "  %custom-call.7 = (f32[4]{0}, u8[0]{0}) custom-call(f32[4]{0} %a), "
            'custom_call_target="__cudnn$convBackwardFilter"',
            "  ROOT %fusion.3 = f32[4]{0} fusion(f32[4]{0} %a), kind=kOutput, "
            "calls=%fused_computation.3",
            "}",
        ]
    )
    instructions, opcodes = learner_profile.parse_program(text)
    kind = learner_profile.operation_kind
    assert kind("custom-call.7", instructions, opcodes) == (
        "custom-call __cudnn$convBackwardFilter"
    )
    assert kind("fusion.3", instructions, opcodes) == "fusion kOutput (dot)"
    assert kind("a", instructions, opcodes) == "parameter"
    assert kind("memcpy", instructions, opcodes) == "unknown"
    assert kind("command_buffer_497", instructions, opcodes).startswith("XLA command buffer")
    assert learner_profile._module_name(text) == "jit_update"
