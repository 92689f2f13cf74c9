"""Where a fused program's update pieces run, read from the module XLA scheduled.

The fused step (`sebulba.fused_step`) promises that each piece of the update runs while
the host's CPUs step the envs: between an env step's `send` (which hands the actions to
envpool's threads) and its `recv` (which waits for their results). A compiled module
holds its computations' instructions in the order they run (`is_scheduled=true`), so
the promise can be read off it, for any backend, XLA:CPU's as XLA:GPU's compiled for a
GPU on a machine without one.

`piece_placement(hlo_text)` walks the module from its entry computation as it runs: an
instruction between a send and the next recv of its computation is in a window, and a
loop, conditional or call made inside a window runs its computations there too. Every
kernel (a fusion, a library call, an unfused dot, convolution or copy) whose op name
holds the pieces' name scope (`scan_actor.UPDATE_PIECE_SCOPE`) is counted inside or
outside a window; those outside that multiply matrices (a dot, a convolution, a
cuBLAS/cuDNN call or a fusion around one) are named apart, since they are the update's
time. `order_summary` prints the order of each computation that holds env calls: S
(send), R (recv), L (a loop), pN / wN (N kernels of the pieces / of the rest in a row).
"""

from __future__ import annotations

import dataclasses
import re

from sebulba.preflight.hlo_text import BRANCHES, CALLED, Instruction, parse, shape_bytes

# envpool's XLA custom calls end their target names so (`<Task>EnvPool..._send`).
_ENV_CALL = re.compile(r'custom_call_target="[^"]*_(send|recv)"')
_OP_NAME = re.compile(r'op_name="([^"]*)"')
# Instructions that launch no work of their own.
_NO_KERNEL = {
    "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "while", "conditional",
    "call", "after-all", "opt-barrier", "partition-id", "replica-id", "add-dependency",
}  # fmt: skip
_MATRIX_CALL = re.compile(r'custom_call_target="[^"]*(cublas|cudnn|matmul|conv)', re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class PiecePlacement:
    """The pieces' kernels of one compiled module, inside and outside the env windows.

    Attributes:
      windows: env steps (send .. recv) in whose window a piece kernel runs.
      inside: piece kernels that run inside a window.
      inside_bytes: what those kernels write, in bytes.
      outside: names of piece kernels that run outside every window.
      outside_bytes: what those kernels write, in bytes.
      matrix_outside: those of `outside` that multiply matrices.
    """

    windows: int
    inside: int
    inside_bytes: int
    outside: tuple[str, ...]
    outside_bytes: int
    matrix_outside: tuple[str, ...]


def _env_call(instruction: Instruction) -> str | None:
    if instruction.op != "custom-call":
        return None
    match = _ENV_CALL.search(instruction.attributes)
    return match.group(1) if match else None


def _callees(instruction: Instruction) -> list[str]:
    """Computations an instruction runs as control flow (not a fusion's body)."""
    if instruction.op == "fusion":
        return []
    names = [name for key, name in CALLED.findall(instruction.attributes) if key != "to_apply"]
    branches = BRANCHES.search(instruction.attributes)
    if branches:
        names += [name.strip().lstrip("%") for name in branches.group(1).split(",")]
    return names


def _is_matrix(instruction: Instruction, computations: dict[str, list[Instruction]]) -> bool:
    if instruction.op in ("dot", "convolution"):
        return True
    if instruction.op == "custom-call":
        return _MATRIX_CALL.search(instruction.attributes) is not None
    if instruction.op == "fusion":
        for _, name in CALLED.findall(instruction.attributes):
            for inner in computations.get(name, []):
                if _is_matrix(inner, computations):
                    return True
    return False


def _in_scope(instruction: Instruction, scope: str) -> bool:
    match = _OP_NAME.search(instruction.attributes)
    return match is not None and f"/{scope}/" in f"{match.group(1)}/"


def piece_placement(hlo_text: str, scope: str = "update_piece") -> PiecePlacement:
    """Where the kernels of `scope` run in a scheduled module (`compiled.as_text()`)."""
    computations, entry, _ = parse(hlo_text)
    inside = inside_bytes = outside_bytes = 0
    outside: list[str] = []
    matrix_outside: list[str] = []
    windows: set[tuple[str, int]] = set()

    def walk(name: str, window: tuple[str, int] | None) -> None:
        nonlocal inside, inside_bytes, outside_bytes
        own = window
        for position, instruction in enumerate(computations.get(name, [])):
            call = _env_call(instruction)
            if call == "send":
                own = (name, position)
            elif call == "recv":
                own = window
            if instruction.op not in _NO_KERNEL and call is None and _in_scope(instruction, scope):
                if own is not None:
                    inside += 1
                    inside_bytes += shape_bytes(instruction.shape)
                    windows.add(own)
                else:
                    outside.append(instruction.name)
                    outside_bytes += shape_bytes(instruction.shape)
                    if _is_matrix(instruction, computations):
                        matrix_outside.append(instruction.name)
            for callee in _callees(instruction):
                walk(callee, own)

    walk(entry, None)
    return PiecePlacement(
        len(windows),
        inside,
        inside_bytes,
        tuple(outside),
        outside_bytes,
        tuple(matrix_outside),
    )


def order_summary(hlo_text: str, scope: str = "update_piece") -> dict[str, str]:
    """{computation: order} for each computation that sends to the envs or loops."""
    computations, _, _ = parse(hlo_text)
    summaries = {}
    for name, instructions in computations.items():
        marks = []
        for instruction in instructions:
            call = _env_call(instruction)
            if call is not None:
                marks.append(call[0].upper())
            elif instruction.op == "while":
                marks.append("L")
            elif instruction.op not in _NO_KERNEL:
                marks.append("p" if _in_scope(instruction, scope) else "w")
        text = "".join(marks)
        if "S" in text or "L" in text:
            summaries[name] = re.sub(
                r"([pw])\1*", lambda m: f" {m.group(1)}{len(m.group(0))} ", text
            )
    return {name: re.sub(r"\s+", " ", text).strip() for name, text in summaries.items()}
