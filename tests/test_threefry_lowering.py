"""The Threefry hash lowers without a loop on CPU, and runs train bit for bit as with it.

`sebulba.runtime.threefry_lowering` swaps JAX's CPU lowering of the hash (a 5-iteration
loop in JAX up to 0.10) for the written-out 20 rounds; every key and random number of a
run must stay what it was, or checksums, records and resumed runs would change.
"""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sebulba import random_streams, train
from sebulba.runtime import threefry_lowering
from tests.helpers import load_config, read_metrics, read_summary
from tests.test_anakin import TIMING_METRICS


@contextlib.contextmanager
def lowered_with_the_loop():
    """Programs lowered inside use JAX's CPU lowering with the loop (where JAX has one)."""
    from jax._src.random import threefry2x32
    from jax.extend.random import threefry2x32_p
    from jax.interpreters import mlir

    looped = getattr(threefry2x32, "_threefry2x32_cpu_lowering_rule", None)
    if looped is None:
        pytest.skip("this JAX has no looped CPU lowering of Threefry to compare with")
    mlir.register_lowering(threefry2x32_p, looped, platform="cpu")
    try:
        text = jax.jit(lambda k: jax.random.bits(k)).lower(jax.random.key(0)).as_text()
        if "stablehlo.while" not in text:
            pytest.skip("this JAX's CPU lowering of Threefry has no loop to compare with")
        yield
    finally:
        threefry_lowering.use_unrolled_threefry_on_cpu.cache_clear()
        assert threefry_lowering.use_unrolled_threefry_on_cpu()


def every_kind_of_draw(seed):
    """Keys of sebulba's streams and the draws its agents and envs make from them."""
    env_ids = jnp.arange(64, dtype=jnp.int32)
    env_keys = random_streams.jax_env_keys(seed, 7, env_ids)
    learner = random_streams.learner_key(seed)
    first, second = jax.random.split(jax.random.fold_in(learner, 12345))
    return dict(
        init=jax.random.key_data(random_streams.init_key(seed)),
        env_keys=jax.random.key_data(env_keys),
        uniform=jax.vmap(lambda k: jax.random.uniform(k, (5,)))(env_keys),
        normal=jax.random.normal(first, (3, 257)),
        categorical=jax.random.categorical(second, jnp.zeros((1000, 18))),
        permutation=jax.random.permutation(learner, 4096),
        bits=jax.random.bits(second, (10_000,), jnp.uint32),
    )


def draws(seed):
    # A new function object per call: each call lowers afresh, under the lowering in force.
    return jax.jit(lambda s: every_kind_of_draw(s))(seed)


def test_importing_sebulba_lowers_threefry_without_a_loop_on_cpu():
    assert jax.default_backend() == "cpu"
    threefry_lowering.use_unrolled_threefry_on_cpu()  # Cached: the import already called it.
    text = jax.jit(lambda s: every_kind_of_draw(s)).lower(jnp.uint32(3)).as_text()
    assert "stablehlo.shift_left" in text  # The hash's rotations are in there...
    assert "stablehlo.while" not in text  # ...written out.


@pytest.mark.parametrize("seed", [0, 1, 2**31 - 1])
def test_written_out_hash_gives_the_bits_of_the_loop(seed):
    seed = jnp.uint32(seed)
    written_out = draws(seed)
    with lowered_with_the_loop():
        looped = draws(seed)
    assert written_out.keys() == looped.keys()
    for name in written_out:
        np.testing.assert_array_equal(
            np.asarray(written_out[name]), np.asarray(looped[name]), err_msg=name
        )


@pytest.mark.xla_default_compilation
def test_a_run_trains_the_same_parameters_under_both_lowerings(tmp_path):
    # Anakin CartPole derives env keys, action samples and minibatch shuffles at every
    # step, and its update consumes them in float work. Without the barrier after the
    # hash, XLA fused that work differently and the loss moved in its last bits at update 3.
    config = load_config("ppo_cartpole_anakin")
    config.total_timesteps = config.env.num_envs * config.agent.num_steps * 6
    config.pipeline.updates_per_call = 1
    config.log.tensorboard = False
    train.train(config, str(tmp_path / "written-out"))
    with lowered_with_the_loop():
        train.train(config, str(tmp_path / "loop"))
    runs = [str(tmp_path / name) for name in ("written-out", "loop")]
    written_out, looped = (read_summary(run) for run in runs)
    assert written_out["params_checksum"] == looped["params_checksum"]
    timing = TIMING_METRICS | {"time"}
    for a, b in zip(*(read_metrics(run) for run in runs), strict=True):
        a, b = ({k: v for k, v in line.items() if k not in timing} for line in (a, b))
        assert a == b, a["update"]
