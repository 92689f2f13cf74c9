"""The IMPALA ResNet's gradient with flax's max-pool and with `sebulba.agents.max_pool`.

    python benchmarks/max_pool.py                  # 256 frames, 5 rounds
    python benchmarks/max_pool.py --batch=4096     # PPO Atari's minibatch (a GPU's size)

Times `jax.grad` of the network `agent.network="impala_resnet"` builds (Atari frames
[B, 4, 84, 84], a loss summing its policy logits and value) with each max-pool, alternating
the two `--rounds` times in one process so that both see the same machine, and prints the
median milliseconds of each and their ratio. Both compute bitwise the same gradient on a
CPU; the script checks that the two gradients agree before timing. Runs under
`debug.deterministic_gpu`'s default (deterministic GPU kernels); `--nondeterministic`
times XLA's fastest kernels instead.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sebulba.runtime import gpu_determinism, platforms  # noqa: E402

# libtpu's errors about a TPU it cannot find never show where no accelerator exists.
platforms.skip_absent_accelerators()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256, help="frames per gradient")
    parser.add_argument("--rounds", type=int, default=5, help="alternations of the two")
    parser.add_argument("--seconds", type=float, default=2.0, help="per round and variant")
    parser.add_argument("--nondeterministic", action="store_true", help="XLA's fastest kernels")
    args = parser.parse_args()
    gpu_determinism.configure(not args.nondeterministic)

    import jax
    import jax.numpy as jnp
    import numpy as np

    from sebulba.agents import networks
    from sebulba.agents.api import Discrete

    frames = jax.random.randint(jax.random.key(0), (args.batch, 4, 84, 84), 0, 256)
    frames = frames.astype(jnp.uint8)
    variants = {}
    for name in ("reduce_window", "slices"):
        net = networks.make_network("impala_resnet", Discrete(6), max_pool=name)

        def loss(params, net=net):
            logits, value = net.apply(params, frames)
            return logits.sum() + value.sum()

        params = net.init(jax.random.key(1), frames[:1])
        variants[name] = (jax.jit(jax.grad(loss)), params)
    gradients = [jax.device_get(f(p)) for f, p in variants.values()]
    same = jax.tree.map(lambda a, b: bool(np.array_equal(a, b)), *gradients)
    max_diff = max(
        jax.tree.leaves(jax.tree.map(lambda a, b: float(np.max(np.abs(a - b))), *gradients))
    )
    times = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, (gradient, params) in variants.items():
            count, start = 0, time.perf_counter()
            while count < 2 or time.perf_counter() - start < args.seconds:
                jax.block_until_ready(gradient(params))
                count += 1
            times[name].append((time.perf_counter() - start) / count * 1e3)
    flax_ms, slices_ms = (statistics.median(times[name]) for name in ("reduce_window", "slices"))
    print(
        f"IMPALA ResNet gradient, {args.batch} frames, {jax.default_backend()} "
        f"({jax.devices()[0].device_kind}), deterministic kernels: {not args.nondeterministic}, "
        f"jax {jax.__version__}; median of {args.rounds} rounds\n"
    )
    print("| max-pool | ms per gradient |\n|---|---|")
    print(f"| flax.linen.max_pool (reduce_window) | {flax_ms:.1f} |")
    print(f"| sebulba.agents.max_pool (strided views) | {slices_ms:.1f} |")
    print(f"\nslices / flax time: {slices_ms / flax_ms:.2f}")
    print(
        f"gradients bitwise equal: {all(jax.tree.leaves(same))} (largest difference {max_diff:.3g})"
    )


if __name__ == "__main__":
    main()
