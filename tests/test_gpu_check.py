"""`python -m sebulba.check` for NVIDIA GPUs, compiled by XLA:GPU on this GPU-less machine.

The HLO tests read modules that XLA:GPU compiled for an H100 target (jax 0.10.2), cut to
the instructions under test; they need nothing installed. The others compile through
JAX's CUDA plugin (`sebulba.preflight.gpu_targets`) and are skipped where it is missing.
"""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest

from sebulba import check, random_streams
from sebulba.config.run_plan import plan
from sebulba.errors import ConfigError
from sebulba.preflight import accelerators, gpu_targets, hlo_cost
from tests.helpers import load_config, process_env, run_python

MISSING = gpu_targets.plugin_missing_reason()
needs_plugin = pytest.mark.skipif(MISSING is not None, reason=f"no GPU compile: {MISSING}")

# --- FLOPs and traffic of the library calls of XLA:GPU's modules --------------------------

# A two-layer convolution's weight gradients (NHWC, 3x3 VALID kernels, batch 2): its ENTRY
# as compiled, metadata and backend configs cut, and the small fusions between the calls
# (kernel transposes, ReLU) turned into parameters of the shapes they produced.
CUDNN_CALLS = """
ENTRY %main.2 (x: f32[2,8,8,2], k1: f32[4,3,3,2], k2: f32[4,3,3,4], y: f32[2,6,6,4], g: f32[2,4,4,4], gy: f32[2,6,6,4]) -> (f32[4,3,3,2], f32[4,3,3,4]) {
  %x.1 = f32[2,8,8,2]{3,2,1,0} parameter(0)
  %wrapped_transpose = f32[4,3,3,2]{3,2,1,0} parameter(1)
  %wrapped_transpose.1 = f32[4,3,3,4]{3,2,1,0} parameter(2)
  %loop_maximum_fusion = f32[2,6,6,4]{3,2,1,0} parameter(3)
  %wrapped_add = f32[2,4,4,4]{3,2,1,0} parameter(4)
  %loop_select_fusion = f32[2,6,6,4]{3,2,1,0} parameter(5)
  %cudnn-conv.2 = (f32[2,6,6,4]{3,2,1,0}, u8[0]{0}) custom-call(%x.1, %wrapped_transpose), window={size=3x3}, dim_labels=b01f_o01i->b01f, custom_call_target="__cudnn$convForward"
  %cudnn-conv.3 = (f32[2,4,4,4]{3,2,1,0}, u8[0]{0}) custom-call(%loop_maximum_fusion, %wrapped_transpose.1), window={size=3x3}, dim_labels=b01f_o01i->b01f, custom_call_target="__cudnn$convForward"
  %cudnn-conv-bw-filter.3 = (f32[4,3,3,4]{3,2,1,0}, u8[0]{0}) custom-call(%loop_maximum_fusion, %wrapped_add), window={size=3x3}, dim_labels=b01f_o01i->b01f, custom_call_target="__cudnn$convBackwardFilter"
  %cudnn-conv-bw-input.1 = (f32[2,6,6,4]{3,2,1,0}, u8[0]{0}) custom-call(%wrapped_add, %wrapped_transpose.1), window={size=3x3}, dim_labels=b01f_o01i->b01f, custom_call_target="__cudnn$convBackwardInput"
  %cudnn-conv-bw-filter.2 = (f32[4,3,3,2]{3,2,1,0}, u8[0]{0}) custom-call(%x.1, %loop_select_fusion), window={size=3x3}, dim_labels=b01f_o01i->b01f, custom_call_target="__cudnn$convBackwardFilter"
  %get-tuple-element.13.0 = f32[4,3,3,2]{3,2,1,0} get-tuple-element(%cudnn-conv-bw-filter.2), index=0
  %get-tuple-element.15.0 = f32[4,3,3,4]{3,2,1,0} get-tuple-element(%cudnn-conv-bw-filter.3), index=0
  ROOT %tuple.7 = (f32[4,3,3,2]{3,2,1,0}, f32[4,3,3,4]{3,2,1,0}) tuple(%get-tuple-element.13.0, %get-tuple-element.15.0)
}
"""  # noqa: E501


def test_cudnn_convolutions_cost_their_forward_convolution():
    # Layer 1: 2 x 6 x 6 x 4 outputs, each summing 3 x 3 x 2 inputs; layer 2: 2 x 4 x 4 x 4
    # outputs of 3 x 3 x 4. The forward pass, both weight gradients and layer 2's input
    # gradient each cost their layer's forward convolution.
    layer1, layer2 = 2 * (2 * 6 * 6 * 4) * (3 * 3 * 2), 2 * (2 * 4 * 4 * 4) * (3 * 3 * 4)
    cost = hlo_cost.program_cost(CUDNN_CALLS, num_devices=1)
    assert cost.flops_by_type == {"f32": 2 * layer1 + 3 * layer2}
    # Each call reads its operands and writes its result, not its (empty) scratch space,
    # in float32 elements: the input x, layer 1's output y and its gradient, layer 2's
    # output gradient g, the kernels k1 and k2.
    x, y, g, k1, k2 = 2 * 8 * 8 * 2, 2 * 6 * 6 * 4, 2 * 4 * 4 * 4, 3 * 3 * 2 * 4, 3 * 3 * 4 * 4
    calls = [x + k1 + y, y + k2 + g, y + g + k2, g + k2 + y, x + y + k1]
    assert cost.bytes_accessed == 4 * sum(calls)


# Two products as cuBLAS calls (compiled with --xla_gpu_enable_triton_gemm=false): a batched
# float32 einsum [4,8,16] x [4,16,32] and a bfloat16 [64,128] x [128,32]; backend configs
# cut to their dot dimension numbers.
CUBLAS_CALLS = """
ENTRY %main.1 (x.1: f32[4,8,16], w.1: f32[4,16,32], a.1: bf16[64,128], b.1: bf16[128,32]) -> (f32[4,8,32], bf16[64,32]) {
  %b.1 = bf16[128,32]{1,0} parameter(3)
  %a.1 = bf16[64,128]{1,0} parameter(2)
  %w.1 = f32[4,16,32]{2,1,0} parameter(1)
  %x.1 = f32[4,8,16]{2,1,0} parameter(0)
  %custom-call.2 = (f32[4,8,32]{2,1,0}, s8[4194304]{0}) custom-call(%x.1, %w.1), custom_call_target="__cublas$lt$matmul", backend_config={"operation_queue_id":"0","gemm_backend_config":{"selected_algorithm":"0","alpha_real":1,"beta":0,"dot_dimension_numbers":{"lhs_contracting_dimensions":["2"],"rhs_contracting_dimensions":["1"],"lhs_batch_dimensions":["0"],"rhs_batch_dimensions":["0"]}}}
  %get-tuple-element.2 = f32[4,8,32]{2,1,0} get-tuple-element(%custom-call.2), index=0
  %custom-call.3 = (bf16[64,32]{1,0}, s8[4194304]{0}) custom-call(%a.1, %b.1), custom_call_target="__cublas$lt$matmul", backend_config={"operation_queue_id":"0","gemm_backend_config":{"selected_algorithm":"0","alpha_real":1,"beta":0,"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]}}}
  %get-tuple-element.1.0 = bf16[64,32]{1,0} get-tuple-element(%custom-call.3), index=0
  ROOT %tuple.1.0 = (f32[4,8,32]{2,1,0}, bf16[64,32]{1,0}) tuple(%get-tuple-element.2, %get-tuple-element.1.0)
}
"""  # noqa: E501


def test_cublas_gemms_cost_their_product_by_element_type():
    cost = hlo_cost.program_cost(CUBLAS_CALLS, num_devices=1)
    assert cost.flops_by_type == {"f32": 2 * (4 * 8 * 32) * 16, "bf16": 2 * (64 * 32) * 128}
    # Operands and product; the 4 MiB workspace (s8) is scratch, not traffic.
    f32_bytes = 4 * (4 * 8 * 16 + 4 * 16 * 32 + 4 * 8 * 32)
    bf16_bytes = 2 * (64 * 128 + 128 * 32 + 64 * 32)
    assert cost.bytes_accessed == f32_bytes + bf16_bytes


# XLA prints an asynchronous collective whose wrapped computation is that one instruction
# as `reduce-scatter-start` (as every collective of the modules compiled here was); the
# general form wraps a computation with `async-start`. Written by hand in XLA's syntax.
ASYNC_WRAPPED = """
%wrapped_reduce_scatter (p: f32[256,512]) -> f32[64,512] {
  %p = f32[256,512]{1,0} parameter(0)
  ROOT %rs = f32[64,512]{1,0} reduce-scatter(%p), channel_id=3, replica_groups=[1,4]<=[4], dimensions={0}, to_apply=%add
}

ENTRY %main (g: f32[256,512]) -> f32[64,512] {
  %g = f32[256,512]{1,0} parameter(0)
  %start = ((f32[256,512]{1,0}), f32[64,512]{1,0}) async-start(%g), calls=%wrapped_reduce_scatter
  ROOT %done = f32[64,512]{1,0} async-done(%start)
}
"""  # noqa: E501


def test_a_collective_wrapped_in_async_start_is_counted_inside_and_moves_no_other_bytes():
    cost = hlo_cost.program_cost(ASYNC_WRAPPED, num_devices=4)
    assert cost.collectives == (hlo_cost.Collective("reduce-scatter", 256 * 512 * 4, 4, 1),)
    assert cost.bytes_accessed == 0


# --- Runs compiled for GPUs ----------------------------------------------------------------


def _cartpole(learners: int, **overrides):
    """configs/ppo_cartpole.py with `learners` learner devices (2 envs each) beside actor
    device 0 and `overrides` ({"section.key": value})."""
    config = load_config("ppo_cartpole")
    config.mesh.actor_device_ids = (0,)
    config.mesh.learner_device_ids = tuple(range(learners))
    config.env.num_envs = max(4, 2 * learners)
    config.total_timesteps = 4 * config.env.num_envs * config.agent.num_steps
    for key, value in overrides.items():
        section, name = key.split(".")
        config[section][name] = value
    return config


def _parameter_bytes(config) -> int:
    devices, _ = accelerators.devices("h100:8", gpu_proxy=True)
    agent = plan(config.copy_and_resolve_references(), devices, process_index=0).agent
    state = jax.eval_shape(agent.init, random_streams.init_key(config.seed))
    leaves = jax.tree.leaves(state.params)
    return sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in leaves)


@pytest.fixture(scope="module")
def one_h100():
    """ppo_cartpole as shipped (one GPU acting and learning: scan actor, fused step),
    compiled for one H100: its report."""
    return check.check(_cartpole(1), "h100:1")


@needs_plugin
def test_one_h100_is_compiled_for_the_gpu_and_the_proxy_says_it_is_a_proxy(one_h100):
    report = one_h100
    assert (report["proxy"], report["compiled_for"]) == (
        False,
        "NVIDIA H100 80GB HBM3 (deviceless XLA:GPU)",
    )
    text = check.format_report(report, "configs/ppo_cartpole.py")
    assert "(compiled for the GPUs by XLA:GPU, without one; nothing ran)" in text
    assert "compiled for: NVIDIA H100 80GB HBM3 (deviceless XLA:GPU)" in text
    proxy = check.check(_cartpole(1), "h100:1", gpu_proxy=True)
    assert proxy["proxy"] is True
    assert proxy["compiled_for"].startswith("XLA:CPU on 1 virtual CPU device(s)")
    assert "figures are a proxy" in check.format_report(proxy, "configs/ppo_cartpole.py")


@needs_plugin
def test_a_scan_actor_s_rollout_and_the_fused_program_are_compiled_with_envpool_s_calls(one_h100):
    report = one_h100
    actor, fused = report["actor_step"], report["fused"]
    assert actor["actor_loop"] == "scan" and fused["fused"] is True
    rollout = actor["rollout_program"]
    # 128 env steps of a 4-env CartPole pool: the policy's products at every step.
    assert rollout["flops"] > 128 * actor["flops"] * 0.9
    assert rollout["memory_bytes"]["outputs"] >= 128 * 4 * 4 * 4  # Observations at least.
    # The fused program runs the update's pieces and the rollout: both programs' work.
    program = fused["program"]
    assert program["flops"] >= report["learner"]["flops"] + rollout["flops"] * 0.9
    held = sum(program["memory_bytes"][k] for k in ("arguments", "outputs", "temporaries"))
    assert report["hbm_needed_bytes"] >= held - program["memory_bytes"]["aliased"]
    assert report["fits"] is True
    assert 0 < report["hbm_needed_bytes"] <= report["hbm_usable_bytes"] == 60 * 10**9


@needs_plugin
def test_eight_h100s_all_reduce_the_gradient_at_every_optimizer_step():
    config = _cartpole(8, **{"pipeline.actor_loop": "step"})
    report = check.check(config, "h100:8")
    assert report["compiled_for"] == "NVIDIA H100 80GB HBM3 (deviceless XLA:GPU)"
    steps = config.agent.update_epochs * config.agent.num_minibatches
    per_step = [
        c
        for c in report["learner"]["collectives"]
        if c["kind"] == "all-reduce" and c["group_size"] == 8 and c["count"] == steps
    ]
    payload = sum(c["payload_bytes"] for c in per_step)
    # Every parameter's float32 gradient is summed over the 8 devices once per optimizer
    # step, and beside it only the step's scalar statistics (a few float32 loss terms, which
    # XLA may combine into the gradient's all-reduce): 36,620 bytes of parameters and
    # 36,684 summed per step when this was written (jax 0.10.2).
    parameters = _parameter_bytes(config)
    assert parameters <= payload <= parameters + 32 * 4
    assert max(c["payload_bytes"] for c in per_step) >= parameters


@needs_plugin
def test_two_hosts_of_eight_h100s_are_two_processes_whose_learners_all_reduce_over_the_network():
    config = _cartpole(1, **{"pipeline.actor_loop": "step"})
    report = check.check(config, "h100:2x8")
    assert (report["processes"], report["devices"], report["devices_per_process"]) == (2, 16, 8)
    # One learner device per host: the gradient is summed across the two hosts.
    assert report["learner_devices"] == 2
    assert {c["group_size"] for c in report["learner"]["collectives"]} == {2}
    assert report["collective_bytes_per_update"] >= _parameter_bytes(config)
    assert report["assumptions"]["interconnect"] == "InfiniBand NDR, 400 Gb/s per GPU"
    text = check.format_report(report, "configs/ppo_cartpole.py")
    assert "16 x NVIDIA H100 SXM, 2 host(s) of 8" in text
    assert "collectives (InfiniBand NDR, 400 Gb/s per GPU): all-reduce of" in text


def test_two_hosts_without_the_plugin_are_refused_in_one_line(monkeypatch):
    reason = 'JAX\'s CUDA plugin is not installed (...): pip install -e ".[gpu-check]"'
    monkeypatch.setattr(gpu_targets, "plugin_missing_reason", lambda: reason)
    assert accelerators.virtual_device_count("h100:2x8") is None  # No proxy to stand in.
    with pytest.raises(ConfigError) as refused:
        accelerators.devices("h100:2x8")
    assert str(refused.value) == (
        f"--topology=h100:2x8: several GPU hosts are compiled for the GPUs themselves: {reason}"
    )


@needs_plugin
def test_the_command_line_exits_3_for_a_run_the_compiled_gpu_program_does_not_fit():
    # 262,144 envs x 2,048 steps of CartPole on one H100: the compiled update's rollouts
    # alone are tens of GiB.
    result = run_python(
        "-m",
        "sebulba.check",
        "--config=configs/ppo_cartpole.py",
        "--topology=h100:1",
        "--config.env.num_envs=262144",
        "--config.agent.num_steps=2048",
        "--config.total_timesteps=1073741824",
        "--config.pipeline.actor_loop=step",
        env=process_env(),
        timeout=600,
    )
    assert result.returncode == check.DOES_NOT_FIT_STATUS == 3, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert "compiled for: NVIDIA H100 80GB HBM3 (deviceless XLA:GPU)" in lines
    memory = next(line for line in lines if line.startswith("memory per device:"))
    assert memory.endswith(": DOES NOT FIT"), memory
    assert re.search(
        r"but the device memory of a learner device is [\d.]+ GiB: lower env", result.stdout
    )
