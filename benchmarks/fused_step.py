"""The fused step against acting and learning in their own programs, end to end, in one run.

    python benchmarks/fused_step.py [--configs=configs/ppo_cartpole.py,...] [--updates=150]
        [--repeats=2] [--set KEY=VALUE ...]

For each config, with actor and learner on one device (the first), the same run (seed,
sizes, scan loop) twice per repeat, `pipeline.fused="off"` then `"on"`: steady-state
env steps/s from metrics.jsonl (after update 1, which compiles), the final
`params_checksum` of each (they must be equal: the fused step is an execution choice),
and the ratio fused / threaded of the repeats' medians. Runs alternate so that the
machine's load falls on both alike.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ceilings  # noqa: E402
import jax  # noqa: E402
from config_spec import apply_overrides, load_config  # noqa: E402

from sebulba.runtime import platforms  # noqa: E402

# libtpu's errors about a TPU it cannot find never show where no accelerator exists.
platforms.skip_absent_accelerators()


def one_run(config, fused: str, updates: int) -> tuple[float, str]:
    """(steady-state env steps/s, params_checksum) of `updates` updates of `config`."""
    config = config.copy_and_resolve_references()
    config.pipeline.fused = fused
    config.pipeline.actor_loop = "scan"
    config.mesh.actor_device_ids = (0,)
    config.mesh.learner_device_ids = (0,)
    config.pipeline.num_actor_threads = 1
    # The runs' console goes to stderr: stdout holds the table alone (the record's output).
    with contextlib.redirect_stdout(sys.stderr):
        sps, summary = ceilings.end_to_end(config, updates)
    return sps, summary["params_checksum"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--configs",
        default=(
            "configs/ppo_cartpole.py,configs/impala_cartpole.py,configs/pqn_cartpole.py,"
            "configs/ppo_atari.py:smoke"
        ),
    )
    parser.add_argument("--updates", type=int, default=150, help="per run")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each mode")
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE override")
    args = parser.parse_args()
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}, {os.cpu_count()} cores\n")
    print(
        "| config | threaded (env steps/s) | fused (env steps/s) | fused / threaded | checksums |"
    )
    print("| --- | ---: | ---: | ---: | --- |")
    for spec in args.configs.split(","):
        config = load_config(spec)
        apply_overrides(config, args.set)
        rates = {"off": [], "on": []}
        checksums = set()
        for _ in range(args.repeats):
            for fused in ("off", "on"):
                sps, checksum = one_run(config, fused, args.updates)
                rates[fused].append(sps)
                checksums.add(checksum)
        threaded, fused = (statistics.median(rates[mode]) for mode in ("off", "on"))
        same = "equal" if len(checksums) == 1 else "DIFFER"
        print(
            f"| `{spec}` | {threaded:,.0f} | {fused:,.0f} | {fused / threaded:.2f} | {same} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
