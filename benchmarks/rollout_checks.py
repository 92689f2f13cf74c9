"""What the actors' rollout checks cost per rollout, beside what collecting the rollout costs.

    python benchmarks/rollout_checks.py [--configs=configs/ppo_cartpole.py,...] [--seconds=3]

For each config, one actor thread on CPU device 0 with its learner on the same device
(actor and learner coincide, as on one GPU or a laptop): the rollout collected by the
scan loop (`benchmarks/ceilings.py`'s actor-only measurement, which gives the collection
time per rollout), then, on that rollout's pieces, back to back:

* the check against the spec that every rollout gets (`Pipeline.check_rollout`:
  finiteness, integer bounds, flag bytes, env ids);
* `debug.consistency_checks` (`sebulba.actors.consistency_check`: the policy evaluated
  again over the rollout, its actions resampled, obs[0] against the last obs[T]).

Each is the median of repeated calls after a warm-up call that compiles it, in ms per
rollout and as a fraction of the collection time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ceilings  # noqa: E402
import jax  # noqa: E402
from config_spec import load_config  # noqa: E402

from sebulba import train  # noqa: E402
from sebulba.actors.consistency_check import ConsistencyCheck  # noqa: E402
from sebulba.pipeline import copy_to_device  # noqa: E402
from sebulba.runtime import platforms  # noqa: E402

# libtpu's errors about a TPU it cannot find never show where no accelerator exists.
platforms.skip_absent_accelerators()


def _median_ms(fn, seconds: float) -> float:
    fn()  # Compiles.
    times, start = [], time.perf_counter()
    while len(times) < 3 or time.perf_counter() - start < seconds:
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return 1000 * statistics.median(times)


def measure(config_name: str, seconds: float) -> dict:
    """The per-rollout times (ms) of collecting, checking and consistency-checking."""
    config = ceilings.endless(load_config(config_name))
    config.mesh.actor_device_ids = (0,)
    config.mesh.learner_device_ids = (0,)
    config.pipeline.num_actor_threads = 1
    setup = train.prepare(config)
    try:
        sps, pipeline, state, _, collected = ceilings.actor_only_sps(setup, seconds, "scan")
    finally:
        ceilings._close(setup)
    sizes = setup.sizes
    pieces = pipeline._to_learner_devices(collected)
    expected = pipeline.piece_env_ids(0)
    device = setup.layout.actor_devices[0]
    params = copy_to_device(setup.agent.policy_params(state), device)
    consistency = ConsistencyCheck(setup.agent, config.seed, sizes.num_steps, copy_to_device)

    def check():
        if pipeline.check_rollout(pieces, expected) is not None:
            raise RuntimeError("the measured rollout breaks its spec")

    def check_consistency():
        # Rollout 1 and its parameters; no earlier rollout, so obs[0] is not compared.
        consistency._last_obs = None
        jax.block_until_ready(consistency.problems(params, pieces, 1, device))

    return {
        "config": config_name,
        "rollout": f"{sizes.envs_per_thread} envs x {sizes.num_steps} steps",
        "collect_ms": 1000 * sizes.num_steps * sizes.envs_per_thread / sps,
        "check_ms": _median_ms(check, seconds),
        "consistency_ms": _median_ms(check_consistency, seconds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", default="configs/ppo_cartpole.py,configs/ppo_atari.py:smoke")
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    args = parser.parse_args()
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}, scan loop, one device\n")
    print("| config | rollout | collect (ms) | spec check (ms) | consistency checks (ms) |")
    print("| --- | --- | ---: | ---: | ---: |")
    for name in args.configs.split(","):
        r = measure(name, args.seconds)
        collect = r["collect_ms"]
        print(
            f"| `{r['config']}` | {r['rollout']} | {collect:.1f} | "
            f"{r['check_ms']:.2f} ({r['check_ms'] / collect:.1%}) | "
            f"{r['consistency_ms']:.1f} ({r['consistency_ms'] / collect:.0%}) |"
        )


if __name__ == "__main__":
    main()
