"""XLA's optimised HLO text, read: instructions per computation, shapes and loop counts.

`parse` splits `compiled.as_text()` into its computations' instructions (name, shape,
op, operands, attributes); `shape_bytes` sizes a shape; `trip_count` reads how many
times a `while` runs its body: from XLA's `known_trip_count` annotation where the
backend writes one (CPU, GPU), else from the loop itself, an induction variable set from
a constant, stepped by a constant and compared with a constant (the form `lax.scan`
compiles to on TPU). `sebulba.preflight.hlo_cost` prices programs with them.
"""

from __future__ import annotations

import dataclasses
import math
import re

_ITEMSIZE = {
    "pred": 1, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "s32": 4,
    "u32": 4, "s64": 8, "u64": 8, "f16": 2, "bf16": 2, "f32": 4, "f64": 8, "c64": 8,
    "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3fnuz": 1, "f8e5m2fnuz": 1,
    "f8e4m3b11fnuz": 1, "token": 0,
}  # fmt: skip
ARRAY = re.compile(r"\b([a-z]+[0-9]*[a-z0-9]*)\[([0-9,]*)\]")
_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->\s*.*\{\s*$")
NAME = re.compile(r"%([\w.\-]+)")
CALLED = re.compile(
    r"\b(calls|body|condition|to_apply|true_computation|false_computation)=%([\w.\-]+)"
)
BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_PARENTHESIS = re.compile(r"[()]")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


@dataclasses.dataclass(frozen=True)
class Instruction:
    name: str
    shape: str  # XLA's shape text: an array, or a tuple of them.
    op: str
    operands: tuple[str, ...]  # Names of the operand instructions.
    operand_text: str  # What stands between the op's parentheses (a constant's literal).
    attributes: str
    computation: str


def shape_bytes(shape: str) -> int:
    """Bytes of an XLA shape text (a tuple's elements summed)."""
    total = 0.0
    for dtype, dims in ARRAY.findall(shape):
        if dtype not in _ITEMSIZE:
            continue
        total += _ITEMSIZE[dtype] * math.prod(int(d) for d in dims.split(",") if d)
    return int(total)


def array_dims(shape: str) -> list[int]:
    """The dimensions of a shape text's first array ('f32[2,3]{1,0}' -> [2, 3])."""
    match = ARRAY.search(shape)
    return [int(d) for d in match.group(2).split(",") if d] if match else []


def _closing(text: str, start: int, depth: int) -> int:
    """Index of the ')' that brings the parenthesis depth `depth` at `start` to 0; -1 if none.

    Only parentheses are visited (a program's text has tens of thousands of lines,
    parsed before every run's first update)."""
    for match in _PARENTHESIS.finditer(text, start):
        depth += 1 if match.group() == "(" else -1
        if depth == 0:
            return match.start()
    return -1


def _split_shape(text: str) -> tuple[str, str]:
    """'(a, b) op(...)' or 'f32[2]{0} op(...)' -> (shape, the rest)."""
    if text.startswith("("):
        end = _closing(text, 1, 1)
        if end >= 0:
            return text[: end + 1], text[end + 1 :].lstrip()
    shape, _, rest = text.partition(" ")
    return shape, rest


def _split_call(text: str) -> tuple[str, str, str]:
    """'op(operands), attributes' -> (op, operands, attributes)."""
    op, _, rest = text.partition("(")
    end = rest.find(")")
    if end >= 0 and "(" in rest[:end]:  # Nested: tuple-shaped operands.
        end = _closing(rest, 0, 1)
    if end < 0:
        return op.strip(), rest, ""
    return op.strip(), rest[:end], rest[end + 1 :]


def parse(hlo_text: str) -> tuple[dict[str, list[Instruction]], str, dict[str, Instruction]]:
    """-> (instructions per computation, the entry computation, instructions by name)."""
    computations: dict[str, list[Instruction]] = {}
    by_name: dict[str, Instruction] = {}
    entry = ""
    current = None
    for line in hlo_text.splitlines():
        stripped = line.strip()
        header = _COMPUTATION.match(stripped)
        if header and "=" not in stripped.split("(")[0]:
            current = header.group(2)
            computations[current] = []
            if header.group(1):
                entry = current
            continue
        if current is None or stripped in ("}", "") or "=" not in stripped:
            continue
        left, _, right = stripped.partition("=")
        name = left.replace("ROOT", "").strip().lstrip("%")
        shape, rest = _split_shape(right.strip())
        op, operands, attributes = _split_call(rest)
        instruction = Instruction(
            name, shape, op, tuple(NAME.findall(operands)), operands, attributes, current
        )
        computations[current].append(instruction)
        by_name[name] = instruction
    return computations, entry, by_name


def _source(name: str, by_name: dict[str, Instruction]) -> Instruction | None:
    """The instruction behind `name`, through copies, conversions and bitcasts."""
    instruction = by_name.get(name)
    for _ in range(8):
        if instruction is None or instruction.op not in ("copy", "convert", "bitcast"):
            return instruction
        instruction = by_name.get(instruction.operands[0]) if instruction.operands else None
    return None


def _integer(name: str, by_name: dict[str, Instruction]) -> int | None:
    """The integer a scalar holds, where it is a constant."""
    source = _source(name, by_name)
    if source is None or source.op != "constant":
        return None
    try:
        return int(source.operand_text)
    except ValueError:
        return None


def _tuple_index(name: str, by_name: dict[str, Instruction]) -> int | None:
    """i where `name` is element i of the loop state (a get-tuple-element)."""
    source = _source(name, by_name)
    if source is None or source.op != "get-tuple-element":
        return None
    match = re.search(r"index=(\d+)", source.attributes)
    return int(match.group(1)) if match else None


def root_of(computation: list[Instruction]) -> Instruction | None:
    """A computation's root, the instruction XLA prints last."""
    return computation[-1] if computation else None


def _unwrapped(
    instruction: Instruction | None,
    computations: dict[str, list[Instruction]],
    by_name: dict[str, Instruction],
) -> Instruction | None:
    """A fusion that wraps a single op (XLA:CPU's `wrapped_add`) as that op on the
    fusion's own operands; any other instruction as it is."""
    if instruction is None or instruction.op != "fusion":
        return instruction
    called = dict(CALLED.findall(instruction.attributes))
    root = root_of(computations.get(called.get("calls", ""), []))
    if root is None:
        return instruction
    operands = []
    for name in root.operands:
        parameter = by_name.get(name)
        if parameter is None or parameter.op != "parameter":
            return instruction
        index = int(parameter.operand_text)
        if index >= len(instruction.operands):
            return instruction
        operands.append(instruction.operands[index])
    return dataclasses.replace(root, operands=tuple(operands))


def trip_count(
    loop: Instruction, computations: dict[str, list[Instruction]], by_name: dict[str, Instruction]
) -> int | None:
    """How many times a `while` instruction runs its body; None where it cannot be read."""
    known = _TRIP.search(loop.attributes)
    if known:
        return int(known.group(1))
    called = dict((kind, name) for kind, name in CALLED.findall(loop.attributes))
    condition = root_of(computations.get(called.get("condition", ""), []))
    condition = _unwrapped(condition, computations, by_name)
    body = root_of(computations.get(called.get("body", ""), []))
    state = by_name.get(loop.operands[0]) if loop.operands else None
    if condition is None or body is None or state is None or condition.op != "compare":
        return None
    if state.op != "tuple" or body.op != "tuple" or len(condition.operands) != 2:
        return None
    direction = re.search(r"direction=(\w+)", condition.attributes)
    left, right = condition.operands
    index, limit = _tuple_index(left, by_name), _integer(right, by_name)
    if index is None or limit is None:  # The comparison may be written the other way round.
        index, limit = _tuple_index(right, by_name), _integer(left, by_name)
        flipped = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE"}
        direction_name = flipped.get(direction.group(1), "") if direction else ""
    else:
        direction_name = direction.group(1) if direction else ""
    if index is None or limit is None or index >= len(state.operands):
        return None
    start = _integer(state.operands[index], by_name)
    update = _source(body.operands[index], by_name) if index < len(body.operands) else None
    update = _unwrapped(update, computations, by_name)
    if start is None or update is None or update.op not in ("add", "subtract"):
        return None
    steps = [_integer(operand, by_name) for operand in update.operands]
    step = next((value for value in steps if value is not None), None)
    if step is None or step == 0:
        return None
    step = -step if update.op == "subtract" else step
    distance = {"LT": limit - start, "LE": limit - start + 1, "GT": start - limit,
                "GE": start - limit + 1, "NE": limit - start}.get(direction_name)  # fmt: skip
    if distance is None:
        return None
    if direction_name in ("GT", "GE"):
        step = -step
    if distance <= 0:
        return 0
    if step < 0:
        return None
    return -(-distance // step)
