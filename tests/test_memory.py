"""Learner memory: unrolled loops on CPU, gradient accumulation, the pre-training check."""

import os
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from sebulba import train
from sebulba.agents import impala, learner, ppo
from sebulba.agents.api import ArraySpec, Discrete, EnvSpec, Rollout, rollout_partition_specs
from sebulba.config.sizes import derive_sizes
from sebulba.errors import ConfigError
from sebulba.preflight import memory
from tests.helpers import agent_config, load_config, mesh_of, small_update_config


class _ConvNet(nn.Module):
    """Small weights, large activations: a conv and a max-pool over 48x48 frames."""

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(16, (3, 3), padding="SAME")(x))
        x = nn.max_pool(x, (3, 3), (2, 2), padding="SAME")
        return jnp.mean(nn.Conv(8, (3, 3), padding="SAME")(x))


def _minibatch_temporaries(loop: str, options: dict, num_steps: int = 8) -> int:
    net = _ConvNet()
    batches = jax.ShapeDtypeStruct((num_steps, 8, 48, 48, 4), jnp.float32)
    params = net.init(jax.random.key(0), jnp.zeros((1, 48, 48, 4)))
    optimizer = optax.adam(1e-3)

    def loss_fn(params, batch):
        return net.apply(params, batch), {}

    def steps(params, opt_state, batches):
        return learner.minibatch_steps(
            loss_fn, optimizer, params, opt_state, batches, unroll=loop == "unrolled"
        )[:2]

    lowered = jax.jit(steps).lower(params, optimizer.init(params), batches)
    return lowered.compile(compiler_options=options).memory_analysis().temp_size_in_bytes


def test_unrolled_minibatch_loop_on_cpu_keeps_one_minibatch_of_activations():
    # XLA's default CPU scheduler hoisted the parameter-independent work of all 8 unrolled
    # steps (max-pool gradient indices, padded inputs) to the start: ~8x the rolled loop.
    options = memory.update_compiler_options(jax.devices())
    rolled = _minibatch_temporaries("scan", options)
    unrolled = _minibatch_temporaries("unrolled", options)
    assert unrolled < 1.5 * rolled, (unrolled, rolled)


CNN_SPEC = EnvSpec("Pong-v5", ArraySpec((4, 84, 84), "uint8"), Discrete(6), is_atari=True)


def _cnn_temporaries(agent_module, accumulation_steps: int, **agent_options) -> int:
    # IMPALA's minibatches are whole env sequences: 8 envs give 4 per minibatch.
    T, B = (8, 4) if agent_module is ppo else (8, 8)
    config = small_update_config(
        agent_module,
        T,
        B,
        network="impala_resnet",
        gradient_accumulation_steps=accumulation_steps,
        **agent_options,
    )
    if agent_options.get("popart"):
        config.env.ids = ("Pong-v5", "Breakout-v5")
    agent = agent_module.make(config, CNN_SPEC, derive_sizes(config))
    f32 = jnp.float32
    outputs = ("logprob", "value") if agent_module is ppo else ("policy",)
    rollout = Rollout(
        obs=jax.ShapeDtypeStruct((T + 1, B, 4, 84, 84), jnp.uint8),
        actions=jax.ShapeDtypeStruct((T, B), jnp.int32),
        rewards=jax.ShapeDtypeStruct((T, B), f32),
        terminations=jax.ShapeDtypeStruct((T, B), bool),
        truncations=jax.ShapeDtypeStruct((T, B), bool),
        valid=jax.ShapeDtypeStruct((T, B), bool),
        policy_outputs={
            k: jax.ShapeDtypeStruct((T + 1, B, 6) if k == "policy" else (T + 1, B), f32)
            for k in outputs
        },
        env_ids=jax.ShapeDtypeStruct((B,), jnp.int32),
    )
    state = jax.eval_shape(agent.init, jax.random.key(0))
    options = memory.update_compiler_options(jax.devices())
    compiled = jax.jit(agent.update).lower(state, rollout).compile(compiler_options=options)
    return compiled.memory_analysis().temp_size_in_bytes


@pytest.mark.parametrize(
    "agent_module, options",
    [(ppo, {}), (impala, {"popart": True})],
    ids=["ppo", "impala-popart"],
)
def test_gradient_accumulation_lowers_the_update_temporaries(agent_module, options):
    # 2 minibatches through the IMPALA ResNet, each in 4 micro-batches. PopArt's forward
    # pass before each gradient (its targets) keeps no activations: the saving holds.
    whole = _cnn_temporaries(agent_module, 1, **options)
    split = _cnn_temporaries(agent_module, 4, **options)
    assert split < 0.75 * whole, (split, whole)


def _compiled_cartpole_update(num_devices=2):
    config = agent_config(ppo, mesh__learner_device_ids=list(range(num_devices)))
    sizes = derive_sizes(config)
    agent = ppo.make(config, EnvSpec("CartPole-v1", ArraySpec((4,), "float32"), Discrete(2)), sizes)
    mesh = mesh_of(num_devices)
    replicated = NamedSharding(mesh, PartitionSpec())
    state = jax.eval_shape(agent.init, jax.random.key(0))
    T, B = sizes.num_steps, sizes.num_envs
    example = Rollout(
        obs=np.zeros((T + 1, B, 4), np.float32),
        actions=np.zeros((T, B), np.int32),
        rewards=np.zeros((T, B), np.float32),
        terminations=np.zeros((T, B), bool),
        truncations=np.zeros((T, B), bool),
        valid=np.ones((T, B), bool),
        policy_outputs={k: np.zeros((T + 1, B), np.float32) for k in ("logprob", "value")},
        env_ids=np.arange(B, dtype=np.int32),
    )
    rollout = jax.tree.map(
        lambda x, spec: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, spec)),
        example,
        rollout_partition_specs(example),
    )
    jitted = jax.jit(
        agent.update,
        in_shardings=(jax.tree.map(lambda _: replicated, state), None),
        out_shardings=(jax.tree.map(lambda _: replicated, state), replicated),
        donate_argnums=0,
    )
    return jitted.lower(state, rollout).compile(), rollout, mesh.devices.ravel().tolist()


def test_normal_cartpole_update_fits_and_counts_both_rollouts():
    compiled, rollout, devices = _compiled_cartpole_update()
    needed = memory.check_update_fits(compiled, rollout, devices, agent=agent_config(ppo).agent)
    # One device's share of the next rollout: obs, 2 policy outputs, and the small rest.
    leaves = jax.tree.leaves(rollout)
    shard_bytes = sum(np.prod(x.shape) * x.dtype.itemsize for x in leaves) // len(devices)
    assert needed.next_rollout == shard_bytes
    analysis = compiled.memory_analysis()
    assert needed.arguments == analysis.argument_size_in_bytes >= shard_bytes
    assert 0 < needed.total < memory.available_bytes(devices)


def test_update_that_cannot_fit_is_refused_in_one_line_with_the_figures():
    compiled, rollout, devices = _compiled_cartpole_update()
    with pytest.raises(ConfigError) as error:
        memory.check_update_fits(
            compiled, rollout, devices, agent=agent_config(ppo).agent, available=1024
        )
    message = str(error.value)
    assert "\n" not in message
    assert re.search(r"needs [\d.]+ MiB per learner device .* is 0\.0 MiB", message), message
    for key in ("env.num_envs", "agent.num_steps", "agent.num_minibatches"):
        assert key in message
    assert "agent.gradient_accumulation_steps" in message
    assert "agent.buffer_size" not in message  # PPO has no replay buffer.


def test_train_stops_before_training_when_the_update_cannot_fit(tmp_path, monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda devices: 1024)
    config = load_config("ppo_cartpole")
    config.total_timesteps = config.env.num_envs * config.agent.num_steps * 2
    workdir = os.path.join(tmp_path, "run")
    with pytest.raises(ConfigError, match=r"learner update needs .* but .* is 0\.0 MiB"):
        train.train(config, workdir)
    assert not os.path.exists(workdir)  # Nothing written.
    # The documented escape hatch trains anyway.
    config.debug.skip_memory_check = True
    train.train(config, workdir)
    assert os.path.exists(os.path.join(workdir, "summary.json"))


def test_an_oversized_replay_buffer_is_refused_before_the_state_is_created(tmp_path, monkeypatch):
    # A buffer larger than the devices: creating it first would take the host down (the
    # kernel kills the process) before the check could say so.
    monkeypatch.setattr(memory, "available_bytes", lambda devices: 2**20)
    created = []

    def restore_or_init(*args, **kwargs):
        created.append(True)
        return restore_or_init_of_train(*args, **kwargs)

    restore_or_init_of_train = train.restore_or_init
    monkeypatch.setattr(train, "restore_or_init", restore_or_init)
    config = load_config("dqn_cartpole", "smoke")
    config.agent.buffer_size = config.env.num_envs * config.agent.num_steps * 40_000
    workdir = os.path.join(tmp_path, "run")
    with pytest.raises(ConfigError, match=r"learner update needs .*: lower agent\.buffer_size"):
        train.train(config, workdir)
    assert not created  # Neither made nor restored: no array of the state exists.
    assert not os.path.exists(workdir)
