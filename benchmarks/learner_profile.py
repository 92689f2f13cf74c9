"""Where the learner's update spends its time, operation by operation.

    python benchmarks/learner_profile.py --config=configs/ppo_atari.py:smoke
    python benchmarks/learner_profile.py --config=configs/ppo_atari.py:Breakout-v5 \\
        --set "mesh.actor_device_ids=(0,)" --set "mesh.learner_device_ids=(0,)"

Collects one rollout with the pipeline's own actor threads (as `ceilings.py` does), then
runs the compiled learner update (`Pipeline.compile_update`, the program a run executes)
`--updates` times under JAX's profiler, and reads the trace back with
`jax.profiler.ProfileData` (no TensorBoard needed). Every traced operation of the update's
XLA program is charged its own time; loops and other control flow are not charged, the
operations inside them are. Prints, per update:

* the wall time and the operations' time; their ratio is how busy the update keeps the
  device (on a GPU, one stream: at most 1; on a CPU, operations that run on several
  threads at once can take it above 1);
* the time per kind of operation, read from the optimised program (`Compiled.as_text()`):
  a custom call by its target (cuDNN's convolutions, cuBLAS's matrix products), a fusion
  by its kind and the costliest operation it contains (convolution, dot, scatter, ...),
  any other operation by its opcode;
* the operations that took longest.

Every figure is taken under the config's `debug.deterministic_gpu`, as a run has it: two
invocations, with `--set debug.deterministic_gpu=False` for the second, show which kernels
deterministic execution makes slower. `--json` prints one JSON object instead (keys
`wall_ms`, `op_ms`, `busy`, `kinds` and `top_ops`, times per update in milliseconds).
On a GPU, XLA captures runs of kernels into command buffers, which the trace shows as
one operation each (kind "XLA command buffer"); `--no_command_buffers` turns them off, so
that every kernel is charged its own time (each is then launched on its own, which the
wall time includes). Each stage (the rollout, compiling, the traced updates) is announced
on stderr with the seconds since the start: on a CPU a full Atari config takes minutes
before the results.
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import json
import os
import re
import sys
import tempfile
import time

# Two virtual devices so actor and learner get separate devices, as on accelerators.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
from ceilings import actor_only_sps, endless  # noqa: E402
from config_spec import actor_and_learner_config, benchmark_parser  # noqa: E402

from sebulba import train  # noqa: E402
from sebulba.runtime import platforms  # noqa: E402

# libtpu's errors about a TPU it cannot find never show where no accelerator exists.
platforms.skip_absent_accelerators()

# Lines a trace viewer derives from the raw ones; they would count every operation twice.
DERIVED_LINES = frozenset(
    {"XLA Ops", "XLA Modules", "Framework Ops", "Framework Name Scope", "Steps", "Source code"}
)
# The operations that name a fusion's kind, costliest first.
NOTABLE_OPCODES = (
    "convolution",
    "dot",
    "select-and-scatter",
    "scatter",
    "reduce-window",
    "sort",
    "gather",
    "reduce",
)
# Control flow is not charged: the operations inside it are (on a CPU a loop's own time
# includes its body running on other threads; on a GPU the host drives it).
CONTROL_FLOW = frozenset({"while", "conditional", "call"})
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*.*?\s([a-z][\w\-]*)\((.*)$")
_COMPUTATION = re.compile(r"^\s*(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")


@dataclasses.dataclass(frozen=True)
class Instruction:
    """One instruction of the optimised program, as its text says."""

    opcode: str
    attributes: str  # The text after the opcode's opening parenthesis.

    def attribute(self, name: str) -> str | None:
        match = re.search(rf"\b{name}=\"?%?([\w.\-$]+)", self.attributes)
        return match.group(1) if match else None


def parse_program(hlo_text: str) -> tuple[dict[str, Instruction], dict[str, list[str]]]:
    """Optimised HLO text -> (instruction by name, opcodes of each computation)."""
    instructions: dict[str, Instruction] = {}
    opcodes: dict[str, list[str]] = collections.defaultdict(list)
    computation = None
    for line in hlo_text.splitlines():
        match = _INSTRUCTION.match(line)
        if match:
            name, opcode, rest = match.groups()
            instructions[name] = Instruction(opcode, rest)
            if computation is not None:
                opcodes[computation].append(opcode)
            continue
        match = _COMPUTATION.match(line)
        if match and not line.lstrip().startswith("HloModule"):
            computation = match.group(1)
    return instructions, opcodes


def operation_kind(name: str, instructions, opcodes) -> str:
    """What an operation of the program is: a custom call's target, a fusion's kind and
    the costliest operation it fuses, or the opcode; "unknown" for a name the program
    does not have (a runtime's own operation)."""
    instruction = instructions.get(name)
    if instruction is None and name.startswith("command_buffer"):
        # XLA:GPU records a captured sequence of kernels as one operation of its own.
        return "XLA command buffer (its kernels not attributed)"
    if instruction is None:
        return "unknown"
    if instruction.opcode == "custom-call":
        return f"custom-call {instruction.attribute('custom_call_target') or '?'}"
    if instruction.opcode == "fusion":
        fused = opcodes.get(instruction.attribute("calls") or "", [])
        notable = next((op for op in NOTABLE_OPCODES if op in fused), "elementwise")
        return f"fusion {instruction.attribute('kind') or '?'} ({notable})"
    return instruction.opcode


def own_times(events) -> dict[str, int]:
    """[(op name, start ns, end ns)] of one timeline -> op name -> its own time in ns
    (its duration less that of the operations nested in it)."""
    totals: dict[str, int] = collections.Counter()
    open_ops: list[list] = []  # [name, start, end, ns of the operations nested in it]
    for name, start, end in sorted(events, key=lambda event: (event[1], -event[2])):
        while open_ops and open_ops[-1][2] <= start:
            done, done_start, done_end, nested = open_ops.pop()
            totals[done] += done_end - done_start - nested
        if open_ops:
            open_ops[-1][3] += end - start
        open_ops.append([name, start, end, 0])
    for done, done_start, done_end, nested in open_ops:
        totals[done] += done_end - done_start - nested
    return dict(totals)


def _stats(event) -> dict:
    return dict(event.stats)


def op_times(xspace_path: str, module_name: str) -> dict[str, int]:
    """Own time (ns) of each operation of the program `module_name` in a trace."""
    from jax.profiler import ProfileData

    totals: dict[str, int] = collections.Counter()
    for plane in ProfileData.from_file(xspace_path).planes:
        for line in plane.lines:
            if line.name in DERIVED_LINES:
                continue
            events = []
            for event in line.events:
                stats = _stats(event)
                # Only the update runs while tracing: an event that does not name its
                # module (as some GPU traces' kernels may not) is taken as the update's.
                if "hlo_op" in stats and str(stats.get("hlo_module", module_name)) == module_name:
                    events.append((str(stats["hlo_op"]), event.start_ns, event.end_ns))
            for name, ns in own_times(events).items():
                totals[name] += ns
    return dict(totals)


def profile_update(compiled, state, rollout, updates: int) -> tuple[dict[str, int], float]:
    """Runs the compiled update `updates` times under the profiler (after one untraced
    warm-up); returns the own time of each operation (ns, summed) and the wall time (s)."""
    state, metrics = compiled(state, rollout)
    jax.block_until_ready((state, metrics))
    module_name = _module_name(compiled.as_text())
    with tempfile.TemporaryDirectory() as trace_dir:
        with jax.profiler.trace(trace_dir):
            start = time.perf_counter()
            for _ in range(updates):
                state, metrics = compiled(state, rollout)
                jax.block_until_ready((state, metrics))
            wall = time.perf_counter() - start
        paths = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)
        if not paths:
            raise RuntimeError(f"the profiler wrote no trace under {trace_dir}")
        times = op_times(paths[0], module_name)
    return times, wall


def _module_name(hlo_text: str) -> str:
    first = hlo_text.split("\n", 1)[0]
    match = re.match(r"HloModule\s+([\w.\-]+)", first)
    if not match:
        raise ValueError(f"not an HLO module's text: {first[:80]!r}")
    return match.group(1)


def summarise(times: dict[str, int], wall_s: float, updates: int, hlo_text: str, top: int):
    """Per update, in ms: wall, op time, busy share, time per kind, the longest ops."""
    instructions, opcodes = parse_program(hlo_text)
    per_update = {
        name: ns / 1e6 / updates
        for name, ns in times.items()
        if operation_kind(name, instructions, opcodes) not in CONTROL_FLOW
    }
    kinds: dict[str, float] = collections.Counter()
    for name, ms in per_update.items():
        kinds[operation_kind(name, instructions, opcodes)] += ms
    op_ms = sum(per_update.values())
    wall_ms = wall_s * 1e3 / updates
    longest = sorted(per_update.items(), key=lambda item: -item[1])[:top]
    return {
        "wall_ms": wall_ms,
        "op_ms": op_ms,
        "busy": op_ms / wall_ms if wall_ms else 0.0,
        "kinds": dict(sorted(kinds.items(), key=lambda item: -item[1])),
        "top_ops": [
            {"op": name, "kind": operation_kind(name, instructions, opcodes), "ms": ms}
            for name, ms in longest
        ],
    }


def print_summary(summary: dict, title: str) -> None:
    op_ms = summary["op_ms"] or 1.0
    print(f"{title}\n")
    print(
        f"per update: wall {summary['wall_ms']:.1f} ms, operations {summary['op_ms']:.1f} ms "
        f"(busy {summary['busy']:.2f})\n"
    )
    print("| kind of operation | ms per update | share |\n|---|---|---|")
    for kind, ms in summary["kinds"].items():
        print(f"| {kind} | {ms:.2f} | {ms / op_ms:.1%} |")
    print("\n| operation | kind | ms per update | share |\n|---|---|---|---|")
    for row in summary["top_ops"]:
        print(f"| {row['op']} | {row['kind']} | {row['ms']:.2f} | {row['ms'] / op_ms:.1%} |")


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--updates", type=int, default=5, help="traced updates")
    parser.add_argument("--top", type=int, default=15, help="operations listed")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--no_command_buffers",
        action="store_true",
        help="XLA:GPU launches every kernel on its own, so each is charged its own time",
    )
    args = parser.parse_args()
    if args.updates < 1:
        parser.error("--updates must be at least 1")
    if args.no_command_buffers:  # Before JAX starts its backend, which reads XLA_FLAGS once.
        flags_now = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = f"{flags_now} --xla_gpu_enable_command_buffer=".strip()
    config = endless(actor_and_learner_config(args))
    config.log.tensorboard = False
    started = time.perf_counter()

    def progress(stage: str) -> None:
        # On stderr: a large config on a CPU takes minutes before the first line of results.
        print(f"[{time.perf_counter() - started:6.1f} s] {stage}", file=sys.stderr, flush=True)

    setup = train.prepare(config)
    progress(f"collecting one rollout of {setup.sizes.steps_per_update:,} env steps")
    try:
        _, pipeline, state, rollouts, _ = actor_only_sps(setup, 0.0, setup.actor_loop)
    finally:
        for pool in setup.envs_per_thread:
            pool.close()
    progress("compiling the update")
    compiled = pipeline.compile_update(state)
    progress(f"one untraced update, then {args.updates} traced, and reading their trace")
    times, wall = profile_update(compiled, state, pipeline._assemble(rollouts), args.updates)
    summary = summarise(times, wall, args.updates, compiled.as_text(), args.top)
    if args.json:
        print(json.dumps(summary))
        return
    devices = {d.platform for d in setup.layout.local_learner_devices}
    print_summary(
        summary,
        f"{config.agent.name} {config.env.id}: learner update of {setup.sizes.steps_per_update:,} "
        f"env steps on {len(setup.layout.local_learner_devices)} {'/'.join(sorted(devices))} "
        f"device(s), deterministic_gpu={config.debug.deterministic_gpu}; jax {jax.__version__}, "
        f"{args.updates} traced updates",
    )


if __name__ == "__main__":
    main()
