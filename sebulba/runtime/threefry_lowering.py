"""The Threefry hash compiled as one fused kernel on CPU, as JAX compiles it elsewhere.

Every random key a run derives (`sebulba.random_streams`: a `fold_in` or `split` per env
step, per action sample, per minibatch shuffle) and every random number it draws runs
JAX's Threefry-2x32 hash. JAX lowers that hash for CPU as a loop of 5 iterations (0.10.2
and 0.11.2 both do; its GPU and TPU lowering is the 20 rounds written out). XLA:CPU runs
each iteration of such a loop as a dozen or more separate small operations (the rounds'
arithmetic, copies of the loop's state), where the written-out hash is one fused kernel.
In a program of small arrays, such as an Anakin CartPole update of 4 envs that derives
keys at every env step, those launches are a large part of the time; each loop is also
one more for XLA to compile.
`benchmarks/threefry_lowering.py` measures runs under both lowerings.

`use_unrolled_threefry_on_cpu` registers JAX's written-out rounds for CPU. The hash is
integer arithmetic (additions modulo 2^32, rotations, exclusive ors) in the same order
either way, so every key and random bit is the one the loop gives. Its results then pass
an optimisation barrier, as the loop's results are a loop's outputs: XLA cannot fuse the
float work that consumes random bits (uniform's scaling, sampling, the update that
follows) into the hash, and fuses it as it did after the loop. Without the barrier the
float roundings moved (PPO's loss on Anakin CartPole differed in its last bits from the
third update on); with it, runs train the same parameters bit for bit, so checksums,
records and resumed runs are unchanged (tests/test_threefry_lowering.py compares draws
and a run's checksum under both lowerings). Where this JAX lowers the hash written out
on CPU already, or lays out its internals differently, nothing is registered and JAX's
lowering stays.
"""

from __future__ import annotations

import functools

import jax


@functools.cache
def use_unrolled_threefry_on_cpu() -> bool:
    """Registers the written-out Threefry lowering for CPU; True if it did.

    Applies to programs lowered afterwards (a compiled program keeps its lowering).
    Called when `sebulba.random_streams` is imported, which every sebulba program's
    module imports, so a run's programs are all lowered with it.
    """
    from jax.extend.random import threefry2x32_p
    from jax.interpreters import mlir

    try:
        from jax._src.random import threefry2x32  # JAX's rounds live in a private module.
    except ImportError:
        return False
    has_looped_cpu_rule = hasattr(threefry2x32, "_threefry2x32_cpu_lowering_rule")
    hash_rounds = getattr(threefry2x32, "_threefry2x32_lowering", None)
    if not has_looped_cpu_rule or hash_rounds is None:
        return False

    def written_out(key1, key2, count1, count2):
        bits = hash_rounds(key1, key2, count1, count2, use_rolled_loops=False)
        return jax.lax.optimization_barrier(bits)

    # As JAX registers the rounds for other platforms: one function per program that every
    # hash calls, which compiles faster than the rounds inlined at each call.
    rule = mlir.lower_fun(written_out, multiple_results=True)
    mlir.register_lowering(threefry2x32_p, rule, platform="cpu", inline=False)
    return True
