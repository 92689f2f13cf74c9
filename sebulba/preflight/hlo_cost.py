"""What a compiled XLA program costs per run, read from its optimised HLO text.

`compiled.cost_analysis()` counts the body of a `while` loop (a `lax.scan`: the
learner's epochs and minibatches, GAE, an LSTM's unroll) once, however many times it
runs, and its TPU `optimal_seconds` is not usable. This module walks the compiled
program instead: each computation runs as many times as the loops around it iterate,
and the totals are

* FLOPs of the matrix units: every `dot` and `convolution` (2 x output elements x the
  elements each one sums over), also where XLA:GPU has handed them to a library: a
  `custom-call` to cuBLAS (`__cublas$gemm`, `__cublas$lt$matmul`: the product's dimension
  numbers are in its backend config) or to cuDNN (`__cudnn$convForward`, its fused
  bias-and-activation form, `__cudnn$convBackwardInput` and `__cudnn$convBackwardFilter`:
  each names the forward convolution's window and `dim_labels`, and costs what that
  convolution costs). A Triton GEMM is a fusion whose body holds the `dot`. Elementwise
  work is left out (a few percent in these networks, and the vector units do it beside
  the matrix units);
* bytes accessed: the operands and result of every instruction outside fusions (what a
  fused kernel reads and writes in device memory; a library call's too, less the
  scratch buffer it is given), collectives and copies excepted;
* collectives: each all-reduce, all-gather, reduce-scatter, all-to-all and
  collective-permute, with the bytes it sends from each device and its group size; on
  GPUs each is an asynchronous pair (`all-reduce-start` / `all-reduce-done`), counted
  at its start, or an `async-start` wrapping it, counted inside.

Each computation is costed once and counted as often as it runs: the entry once, a
`while` body its trip count times, a `call`'s callee once per call, all of it multiplied
by the runs of the computation that holds the instruction (a computation called from k
places counts once per place). A `conditional` runs one branch per execution; it is
counted as its most expensive branch (most FLOPs, then most traffic), so the prediction
is the slowest path's. FLOPs are kept by the element type the products multiply.

Trip counts come from XLA's `known_trip_count` annotation where the backend writes one
(CPU, GPU), else from the loop itself (`sebulba.preflight.hlo_text.trip_count`). A loop whose count
cannot be read counts once and is reported in `unknown_loops`.
"""

from __future__ import annotations

import dataclasses
import math
import re

from sebulba.preflight.hlo_text import (
    ARRAY,
    BRANCHES,
    CALLED,
    NAME,
    Instruction,
    array_dims,
    parse,
    root_of,
    shape_bytes,
    trip_count,
)

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
# Instructions that move no data of their own through device memory.
_NO_TRAFFIC = {
    "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "while", "conditional",
    "call", "after-all", "partition-id", "replica-id", "opt-barrier", "copy-start",
    "copy-done", "custom-call", "send", "send-done", "recv", "recv-done", "async-start",
    "async-done", "async-update",
}  # fmt: skip
# The custom calls through which XLA:GPU runs products on libraries (cuBLAS GEMMs, cuDNN
# convolutions): priced as the dot or convolution each stands for.
_LIBRARY_TARGETS = ("__cublas$", "__cudnn$conv")
_TARGET = re.compile(r'custom_call_target="([^"]+)"')


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective instruction and how often it runs per execution of the program.

    Attributes:
      kind: all-reduce, all-gather, reduce-scatter, all-to-all or collective-permute.
      payload_bytes: what each device contributes (the sum of its operands).
      group_size: devices taking part in each group.
      count: executions per program run (the trip counts of the loops around it).
    """

    kind: str
    payload_bytes: int
    group_size: int
    count: int


@dataclasses.dataclass(frozen=True)
class ProgramCost:
    """Per-device totals of one execution of a compiled SPMD program."""

    flops: float
    bytes_accessed: float
    collectives: tuple[Collective, ...]
    unknown_loops: int  # `while` loops whose trip count could not be read (counted once).
    # FLOPs by the element type the products multiply ("f32", "bf16", ...): GPUs run
    # float32 products as TF32, at a different rate than bf16 (`sebulba.preflight.accelerators`).
    flops_by_type: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def collective_bytes(self) -> int:
        """Bytes each device contributes to collectives per execution."""
        return sum(c.payload_bytes * c.count for c in self.collectives)


@dataclasses.dataclass
class _Totals:
    """What one run of a computation costs (FLOPs by element type, traffic, collectives)."""

    flops: dict[str, float] = dataclasses.field(default_factory=dict)
    traffic: float = 0.0
    # Collective instruction name -> (its collective, executions per run).
    collectives: dict[str, tuple[Collective, int]] = dataclasses.field(default_factory=dict)

    def add(self, other: _Totals, times: int) -> None:
        for dtype, flops in other.flops.items():
            self.flops[dtype] = self.flops.get(dtype, 0.0) + times * flops
        self.traffic += times * other.traffic
        for name, (collective, count) in other.collectives.items():
            previous = self.collectives.get(name, (collective, 0))[1]
            self.collectives[name] = (collective, previous + times * count)

    @property
    def total_flops(self) -> float:
        return sum(self.flops.values())


# Ops whose `to_apply` is a scalar function applied element by element (a reduction's
# `add`): its instructions touch no device memory and do no matrix work of their own.
_SCALAR_APPLY = {"reduce", "reduce-window", "all-reduce", "all-reduce-start", "reduce-scatter",
                 "scatter", "select-and-scatter", "sort", "map"}  # fmt: skip


class _Walker:
    """Costs computations bottom-up, each once (memoised), so a computation called from
    k places is priced once and counted k times, never re-walked per call site."""

    def __init__(self, computations, by_name, num_devices: int):
        self.computations, self.by_name, self.num_devices = computations, by_name, num_devices
        self.memo: dict[tuple[str, bool], _Totals] = {}
        self.unknown_loops: set[str] = set()

    def cost(self, name: str, fused: bool) -> _Totals:
        """One run of computation `name`; `fused` where it is the body of a fusion."""
        key = (name, fused)
        if key not in self.memo:
            self.memo[key] = self._walk(name, fused)
        return self.memo[key]

    def _walk(self, name: str, fused: bool) -> _Totals:
        totals = _Totals()
        for instruction in self.computations.get(name, []):
            op = instruction.op
            library = _library_target(instruction)
            if op in ("dot", "convolution") or library:
                dtype = _element_type(instruction, self.by_name)
                if library:
                    flops = _library_flops(library, instruction, self.by_name)
                else:
                    flops = _matrix_flops(instruction, self.by_name)
                totals.flops[dtype] = totals.flops.get(dtype, 0.0) + flops
            if library and not fused:
                totals.traffic += _library_traffic(instruction, self.by_name)
            kind = op.removesuffix("-start")
            if kind in COLLECTIVES:
                payload = sum(
                    shape_bytes(self.by_name[o].shape)
                    for o in instruction.operands
                    if o in self.by_name
                )
                size = group_size(instruction.attributes, self.num_devices)
                totals.collectives[instruction.name] = (Collective(kind, payload, size, 1), 1)
            elif not (fused or op in _NO_TRAFFIC or op.endswith("-done")):
                totals.traffic += _traffic(instruction, self.computations, self.by_name)
            self._add_callees(instruction, fused, totals)
        return totals

    def _add_callees(self, instruction: Instruction, fused: bool, totals: _Totals) -> None:
        op = instruction.op
        if op.endswith(("-done", "-update")):
            return  # An async op's computation is counted at its start.
        called = dict(CALLED.findall(instruction.attributes))
        branches = [name for kind, name in CALLED.findall(instruction.attributes)
                    if kind in ("true_computation", "false_computation")]  # fmt: skip
        listed = BRANCHES.search(instruction.attributes)
        if listed:
            branches += NAME.findall(listed.group(1))
        if op == "conditional" and branches:
            # One branch runs per execution: count the one with the most FLOPs (then
            # traffic), so the time predicted is the slowest path's.
            costs = [self.cost(branch, fused) for branch in branches]
            totals.add(max(costs, key=lambda c: (c.total_flops, c.traffic)), 1)
            return
        if op == "while":
            count = trip_count(instruction, self.computations, self.by_name)
            if count is None:
                self.unknown_loops.add(instruction.name)
                count = 1
            if "body" in called:
                totals.add(self.cost(called["body"], fused), count)
            if "condition" in called:  # Tested once more than the body runs.
                totals.add(self.cost(called["condition"], fused), count + 1)
            return
        if "calls" in called:  # fusion, async-start and custom calls' callees.
            totals.add(self.cost(called["calls"], fused or op == "fusion"), 1)
        if "to_apply" in called and op not in _SCALAR_APPLY:
            totals.add(self.cost(called["to_apply"], fused), 1)  # `call`: runs once.


def _element_type(instruction: Instruction, by_name: dict[str, Instruction]) -> str:
    """The element type a dot or convolution multiplies (its first operand's)."""
    operand = by_name.get(instruction.operands[0]) if instruction.operands else None
    match = ARRAY.search(operand.shape if operand is not None else instruction.shape)
    return match.group(1) if match else "f32"


def _matrix_flops(instruction: Instruction, by_name: dict[str, Instruction]) -> float:
    """2 x output elements x the elements each output sums over, for a dot or convolution."""
    outputs = math.prod(array_dims(instruction.shape))
    if instruction.op == "dot":
        lhs = by_name.get(instruction.operands[0]) if instruction.operands else None
        contracting = re.search(r"lhs_contracting_dims=\{([0-9,]*)\}", instruction.attributes)
        if lhs is None or contracting is None:
            return 0.0
        dims = array_dims(lhs.shape)
        summed = math.prod(dims[int(d)] for d in contracting.group(1).split(",") if d)
        return 2.0 * outputs * summed
    rhs = by_name.get(instruction.operands[1]) if len(instruction.operands) > 1 else None
    if rhs is None:
        return 0.0
    return _convolution_flops(instruction.shape, rhs.shape, instruction.attributes)


def _convolution_flops(output: str, kernel: str, attributes: str) -> float:
    """2 x output elements x what each sums over, for a convolution of output shape
    `output` and kernel shape `kernel` (shape texts) whose `dim_labels` are in `attributes`."""
    labels = re.search(r"dim_labels=[^_]*_([^-]*)->", attributes)
    dims = array_dims(kernel)
    if labels is None or len(dims) != len(labels.group(1)):
        return 0.0
    # Each output sums over the kernel's spatial and input-feature extent ('o' excluded).
    summed = math.prod(s for s, label in zip(dims, labels.group(1), strict=True) if label != "o")
    return 2.0 * math.prod(array_dims(output)) * summed


def _library_target(instruction: Instruction) -> str | None:
    """The cuBLAS or cuDNN function a `custom-call` runs a product on; None otherwise."""
    if instruction.op != "custom-call":
        return None
    target = _TARGET.search(instruction.attributes)
    if target is None or not target.group(1).startswith(_LIBRARY_TARGETS):
        return None
    return target.group(1)


def _library_flops(target: str, instruction: Instruction, by_name: dict[str, Instruction]) -> float:
    """FLOPs of a cuBLAS GEMM or cuDNN convolution call (its result's first element is the
    product; a second, of bytes, is its scratch space)."""
    shapes = [by_name[o].shape if o in by_name else "" for o in instruction.operands]
    if target.startswith("__cublas$"):
        contracting = re.search(
            r'"lhs_contracting_dimensions":\[([^\]]*)\]', instruction.attributes
        )
        if contracting is None or not shapes:
            return 0.0
        lhs = array_dims(shapes[0])
        summed = math.prod(lhs[int(d)] for d in re.findall(r"\d+", contracting.group(1)))
        return 2.0 * math.prod(array_dims(instruction.shape)) * summed
    if len(shapes) < 2:
        return 0.0
    # The forward convolution's output and kernel: the gradient calls take one of them
    # as an operand and return the other.
    if target.endswith("convBackwardInput"):
        output, kernel = shapes[0], shapes[1]
    elif target.endswith("convBackwardFilter"):
        output, kernel = shapes[1], instruction.shape
    else:
        output, kernel = instruction.shape, shapes[1]
    return _convolution_flops(output, kernel, instruction.attributes)


def _library_traffic(instruction: Instruction, by_name: dict[str, Instruction]) -> float:
    """Bytes a library call reads and writes: its operands and its result, less the
    scratch buffer (the result's last element, of bytes, where it has one)."""
    read = sum(shape_bytes(by_name[o].shape) for o in instruction.operands if o in by_name)
    parts = ARRAY.findall(instruction.shape)
    written = shape_bytes(instruction.shape)
    if len(parts) > 1 and parts[-1][0] in ("s8", "u8"):
        written -= shape_bytes(f"{parts[-1][0]}[{parts[-1][1]}]")
    return read + written


def group_size(attributes: str, num_devices: int) -> int:
    """Devices per group of a collective, from its `replica_groups`."""
    iota = re.search(r"replica_groups=\[([0-9,]+)\]<=", attributes)
    if iota:
        return int(iota.group(1).split(",")[-1])
    mesh = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", attributes)
    if mesh:
        sizes = dict(re.findall(r"'([^']+)'=(\d+)", mesh.group(1)))
        axes = re.findall(r"'([^']+)'", mesh.group(2))
        return math.prod(int(sizes[a]) for a in axes if a in sizes) or num_devices
    listed = re.search(r"replica_groups=\{\{([0-9,]*)\}", attributes)
    if listed:
        return len([d for d in listed.group(1).split(",") if d])
    return num_devices


def program_cost(hlo_text: str, num_devices: int) -> ProgramCost:
    """Per-device FLOPs, bytes accessed and collectives of one run of a compiled program.

    Args:
      hlo_text: `compiled.as_text()`, the optimised SPMD program of one device.
      num_devices: devices the program runs on (a collective without explicit groups
        spans them all).
    """
    computations, entry, by_name = parse(hlo_text)
    walker = _Walker(computations, by_name, num_devices)
    totals = walker.cost(entry, fused=False)
    collectives = tuple(
        dataclasses.replace(collective, count=count)
        for collective, count in totals.collectives.values()
    )
    return ProgramCost(
        totals.total_flops,
        totals.traffic,
        collectives,
        len(walker.unknown_loops),
        dict(totals.flops),
    )


_SLICING = ("dynamic-slice", "slice", "gather")


def _traffic(
    instruction: Instruction,
    computations: dict[str, list[Instruction]],
    by_name: dict[str, Instruction],
) -> float:
    """Bytes one execution of a top-level instruction reads and writes in device memory.

    A slice reads only what it returns, and an in-place update (`dynamic-update-slice`,
    the way a scan writes its outputs) touches only the update, so a loop that slices
    one minibatch out of the whole rollout is not charged for the rollout at each step.
    Inside a fusion, a parameter read only through slices counts as those slices.
    """

    def size(name: str) -> int:
        return shape_bytes(by_name[name].shape) if name in by_name else 0

    op = instruction.op
    if op in _SLICING:
        return 2.0 * shape_bytes(instruction.shape)
    if op in ("dynamic-update-slice", "scatter"):
        update = instruction.operands[1] if len(instruction.operands) > 1 else ""
        return 2.0 * size(update)
    if op != "fusion":
        return shape_bytes(instruction.shape) + sum(size(o) for o in instruction.operands)
    called = dict(CALLED.findall(instruction.attributes))
    body = computations.get(called.get("calls", ""), [])
    root = root_of(body)
    users: dict[str, list[Instruction]] = {}
    parameters: dict[int, str] = {}
    for inner in body:
        for operand in inner.operands:
            users.setdefault(operand, []).append(inner)
        if inner.op == "parameter" and inner.operand_text.strip().isdigit():
            parameters[int(inner.operand_text)] = inner.name
    in_place = None
    written = shape_bytes(instruction.shape)
    if root is not None and root.op == "dynamic-update-slice" and len(root.operands) > 1:
        in_place = root.operands[0]
        written = size(root.operands[1])
    read = 0.0
    for index, operand in enumerate(instruction.operands):
        parameter = parameters.get(index)
        if parameter is None:
            read += size(operand)
            continue
        inner_users = users.get(parameter, [])
        if parameter == in_place and len(inner_users) == 1:
            continue  # The buffer updated in place: only the update is written.
        if inner_users and all(u.op in _SLICING for u in inner_users):
            read += sum(shape_bytes(u.shape) for u in inner_users)
        else:
            read += size(operand)
    return read + written
