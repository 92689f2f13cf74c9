"""`python -m sebulba.check` for NVIDIA GPUs, compiled by XLA:GPU on this GPU-less machine.

The HLO tests read modules that XLA:GPU compiled for an H100 target (jax 0.10.2), cut to
the instructions under test; they need nothing installed.
"""

from __future__ import annotations

from sebulba.preflight import hlo_cost

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
