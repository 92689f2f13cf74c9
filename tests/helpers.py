"""Shared helpers for the tests: configs, run outputs, and an agent's sharded update."""

import contextlib
import glob
import importlib.util
import json
import os
import signal
import struct
import subprocess
import sys

import jax
import numpy as np
import pytest
from jax.experimental.compilation_cache import compilation_cache
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from tensorboardX.proto import event_pb2

from sebulba import train
from sebulba.agents.api import rollout_partition_specs
from sebulba.config import base_config
from sebulba.environments.spaces import ArraySpec, Discrete, EnvSpec
from tests import zygote

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def config_module(name):
    """The module of configs/NAME.py (configs/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "configs", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_config(name, arg=None):
    """`get_config(arg)` of configs/NAME.py, as `--config=configs/NAME.py:ARG` loads it."""
    return config_module(name).get_config(arg)


def process_env(devices=None):
    """The environment of a sebulba process a test starts: JAX on CPU with `devices`
    virtual devices (None: JAX's default, one) compiling as the tests do (conftest.py),
    and this checkout importable."""
    flags = os.environ["SEBULBA_TEST_XLA_FLAGS"]
    if devices is not None:
        flags += f" --xla_force_host_platform_device_count={devices}"
    env = dict(os.environ, XLA_FLAGS=flags.strip(), JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    return env


def run_python(*args, env, cwd=ROOT, timeout=120, fresh_interpreter=False):
    """`python ARGS` in a subprocess with `env`, its output captured as text: forked from
    a process that has imported JAX and sebulba already (tests/zygote.py), or, with
    `fresh_interpreter` (a test of what a command imports), started as a new interpreter."""
    return zygote.run(list(args), env=env, cwd=cwd, timeout=timeout, fork=not fresh_interpreter)


def popen_python(*args, env, cwd=ROOT, **streams):
    """`subprocess.Popen([python, *ARGS], env=env, cwd=cwd, **streams)` (`stdin`,
    `stdout`, `stderr`, `text`), forked as `run_python`'s are."""
    return zygote.popen(list(args), env=env, cwd=cwd, **streams)


def fork_the_commands_of(monkeypatch, module):
    """The `python ...` processes that `module` (library code a test runs in its own
    process: sebulba.sweep's runner, benchmarks/default_runs.py) starts are forked as
    `run_python`'s are, for the rest of the test."""
    monkeypatch.setattr(module, "subprocess", zygote.FORKING_SUBPROCESS)


@contextlib.contextmanager
def workdir_held_by_another_process(workdir):
    """A process holding `workdir` as a run does (`sebulba.runtime.workdir.hold`) while
    the block runs; yields its pid. It is killed at the end: the kernel drops the lock,
    as for a run that died."""
    code = (
        "import sys, time\n"
        "from sebulba.runtime import workdir\n"
        "workdir.hold(sys.argv[1])\n"
        "print('held', flush=True)\n"
        "time.sleep(600)\n"
    )
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(workdir)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def run_evaluate_cli(*flags, cwd=ROOT, timeout=120, unset=(), **environ):
    """`python -m sebulba.evaluate FLAGS` on the CPU, run from `cwd`, without the variables
    named in `unset` and with `environ` added."""
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(JAX_PLATFORMS="cpu", **environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return run_python("-m", "sebulba.evaluate", *flags, env=env, cwd=cwd, timeout=timeout)


# CartPole-v1's spec, for unit tests of an agent that build no env.
CARTPOLE = EnvSpec("CartPole-v1", ArraySpec((4,), "float32"), Discrete(2))

# PPO with a small LSTM on CartPole without velocities (configs/ppo_memory.py, shrunk):
# `agent_config(ppo, **LSTM_RUN)`.
LSTM_RUN = dict(
    env__observation_indices=(0, 2),
    agent__core="lstm",
    agent__lstm_size=16,
    agent__num_steps=16,
    agent__num_minibatches=2,
)


def agent_config(agent_module, **overrides):
    """A run config for `agent_module` on CartPole with dotted-key overrides."""
    config = base_config(agent_module.get_config())
    config.env.num_envs = 8
    config.total_timesteps = 8 * config.agent.num_steps * 6
    config.log.every_updates = 1
    config.log.tensorboard = False
    for dotted, value in overrides.items():
        section, _, field = dotted.rpartition("__")
        target = config[section] if section else config
        target[field] = tuple(value) if isinstance(value, list) else value
    return config


def normalized_continuous_overrides(num_steps=16):
    """`agent_config` overrides: PPO or IMPALA on Pendulum-v1 (Box actions, float obs) with
    observation normalisation and reward scaling on, 6 short updates."""
    return {
        "env__id": "Pendulum-v1",
        "agent__normalize_observations": True,
        "agent__normalize_rewards": True,
        "agent__minibatch_loop": "scan",
        "agent__num_steps": num_steps,
        "agent__num_minibatches": 2,
        "total_timesteps": 8 * num_steps * 6,
    }


def small_update_config(agent_module, num_steps, num_envs, **agent):
    """A config for unit tests of an agent's update: 10 updates of num_envs x num_steps."""
    config = base_config(agent_module.get_config())
    config.agent.minibatch_loop = "scan"  # Compiles fastest; the tests compare the loops.
    config.agent.num_steps = num_steps
    config.agent.num_minibatches = 2
    config.total_timesteps = num_steps * num_envs * 10
    config.env.num_envs = num_envs
    for name, value in agent.items():
        config.agent[name] = value
    return config


def make_pipeline(setup, **options):
    """`train.make_pipeline(setup)` as a test drives it: the run's seed, policy lag and reward
    clipping, but the per-step actor loop, transfer guard "disallow" and no delays (the
    `Pipeline` defaults), unless `options` say otherwise."""
    pipeline_defaults = {
        "actor_loop": "step",
        "transfer_guard": "disallow",
        "learner_delay_s": 0.0,
        "actor_delay_s": 0.0,
        "actor_delay_jitter_s": 0.0,
    }
    return train.make_pipeline(setup, **{**pipeline_defaults, **options})


def sigint_after(update: int):
    """An `on_update` that sends this process SIGINT once `update` is done; the run stops
    after the update in flight when the signal lands, and saves a checkpoint."""

    def interrupt(report, state):
        del state
        if report.update == update:
            os.kill(os.getpid(), signal.SIGINT)

    return interrupt


def assert_an_interrupted_run_resumes_exactly(make_config, tmp_path, reference=None):
    """Trains `make_config()` once uninterrupted, once stopped by SIGINT after update 3 and
    resumed; asserts the resumed run ends on the same checksum and the same final state, to
    the bit (a replay agent's buffer too). Returns the resumed run's workdir and final state.
    `reference`: the uninterrupted run's (workdir, final state), where a test has one."""
    if reference is None:
        reference_dir = str(tmp_path / "reference")
        reference = reference_dir, jax.device_get(train.train(make_config(), reference_dir))
    reference, expected = reference
    workdir = str(tmp_path / "run")
    train.train(make_config(), workdir, on_update=sigint_after(3))
    assert not os.path.exists(os.path.join(workdir, "summary.json"))
    state = train.train(make_config(), workdir)  # Resumes after update 3.
    assert read_summary(workdir)["params_checksum"] == read_summary(reference)["params_checksum"]
    for a, b in zip(jax.tree.leaves(expected), jax.tree.leaves(state), strict=True):
        np.testing.assert_array_equal(a, jax.device_get(b))
    return workdir, state


def logged_learning_rates(agent, rollouts):
    """The `learning_rate` metric of successive jitted updates, one per rollout."""
    state = agent.init(jax.random.key(0))
    update = jax.jit(agent.update)
    rates = []
    for rollout in rollouts:
        state, metrics = update(state, rollout)
        rates.append(float(metrics["learning_rate"]))
    return rates


def assert_rollouts_came_from_the_lagged_version(lines, policy_lag):
    """Each metrics line k of a probe-agent run (its parameter is its version): rollout k
    was collected, every sample of it, by version max(1, k - policy_lag), and the learner
    took version k to k + 1."""
    for line in lines:
        k = line["update"]
        expected = max(1, k - policy_lag)
        assert line["behaviour_version_min"] == line["behaviour_version_max"] == expected
        assert line["actor_policy_version"] == expected
        assert line["learner_version_in"] == k
        assert line["learner_policy_version"] == k + 1


def read_metrics(workdir):
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def read_summary(workdir):
    with open(os.path.join(workdir, "summary.json"), encoding="utf-8") as f:
        return json.load(f)


def assert_a_muzero_run_searches_and_learns(workdir):
    """A MuZero run's metrics: every update after the first learns, with finite
    losses, and searches at its config's simulations; the run ends at its step budget."""
    with open(os.path.join(workdir, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    lines = read_metrics(workdir)
    assert [line["update"] for line in lines] == list(range(1, len(lines) + 1))
    assert [line["learning"] for line in lines] == [0.0] + [1.0] * (len(lines) - 1)
    for line in lines[1:]:
        assert all(np.isfinite(line[key]) for key in ("loss", "value_loss", "reward_loss"))
        simulations = line["sps"] * config["agent"]["num_simulations"]
        assert line["search_simulations_per_s"] == pytest.approx(simulations)
    assert read_summary(workdir)["global_step"] == config["total_timesteps"]


def mesh_of(n):
    """A learner mesh over the first n devices."""
    return Mesh(jax.devices()[:n], ("batch",))


def run_update(agent, num_devices, rollout):
    """Jits `agent.update` as the pipeline does; returns (its output, the jitted step)."""
    mesh = mesh_of(num_devices)
    replicated = NamedSharding(mesh, PartitionSpec())
    # Placed as the pipeline places it: replicated, or as `Agent.partition_specs` says.
    shapes = jax.eval_shape(agent.init, jax.random.key(0))
    state_sharding = agent.state_shardings(shapes, lambda spec: NamedSharding(mesh, spec))
    state = jax.jit(agent.init, out_shardings=state_sharding)(jax.random.key(0))
    rollout_sharding = jax.tree.map(
        lambda spec: NamedSharding(mesh, spec), rollout_partition_specs(rollout)
    )
    step = jax.jit(
        agent.update,
        in_shardings=(state_sharding, rollout_sharding),
        out_shardings=(state_sharding, replicated),
        donate_argnums=0,
    )
    return step(state, rollout), step


def assert_update_agrees_across_layouts(agent, rollout, device_counts=(1, 2, 4)):
    """1, 2 and 4 learner devices give replicated states equal to float tolerance."""
    results = {}
    for n in device_counts:
        (state, _), _ = run_update(agent, n, rollout)
        results[n] = jax.device_get(state.params)
        for leaf in jax.tree.leaves(state):
            assert leaf.sharding.is_fully_replicated
            assert leaf.sharding.device_set == set(jax.devices()[:n])
    reference = jax.tree.leaves(results[device_counts[0]])
    for n in device_counts[1:]:
        for a, b in zip(reference, jax.tree.leaves(results[n]), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def assert_update_moves_no_rollout_data(agent, rollout, num_devices=4):
    """The compiled update all-reduces gradients, and no other data crosses devices."""
    _, step = run_update(agent, num_devices, rollout)
    mesh = mesh_of(num_devices)
    shapes = jax.eval_shape(agent.init, jax.random.key(0))
    shardings = agent.state_shardings(shapes, lambda spec: NamedSharding(mesh, spec))
    state = jax.jit(agent.init, out_shardings=shardings)(jax.random.key(0))
    hlo = step.lower(state, rollout).compile().as_text()
    assert "all-reduce" in hlo
    for collective in ("all-to-all", "all-gather", "collective-permute"):
        assert collective not in hlo


def popart_overrides(num_steps=16):
    """`agent_config` overrides: PPO or IMPALA with PopArt on two CartPole tasks (envs 0-3
    run CartPole-v1, 4-7 CartPole-v0: the same spaces, different time limits), 6 updates."""
    return {
        "env__ids": ("CartPole-v1", "CartPole-v0"),
        "agent__popart": True,
        # A large step, so the statistics move visibly within a few updates.
        "agent__popart_step_size": 1e-2,
        "agent__minibatch_loop": "scan",
        "agent__num_steps": num_steps,
        "agent__num_minibatches": 2,
        "total_timesteps": 8 * num_steps * 6,
    }


@pytest.fixture(scope="module", autouse=True)
def module_compilation_cache(tmp_path_factory):
    """A test module's runs share a compilation cache in a temporary directory, as
    command-line reruns do: a rerun or a resumed segment loads what its first run
    compiled. Imported by the modules that want it (autouse within them)."""
    previous = (
        jax.config.jax_compilation_cache_dir,
        jax.config.jax_persistent_cache_min_compile_time_secs,
    )
    jax.config.update("jax_compilation_cache_dir", str(tmp_path_factory.mktemp("jax-cache")))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    compilation_cache.reset_cache()
    yield
    jax.config.update("jax_compilation_cache_dir", previous[0])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", previous[1])
    compilation_cache.reset_cache()


def tensorboard_scalars(workdir):
    """{tag: [(step, value)]} read straight from the TFRecord event files."""
    scalars = {}
    for path in glob.glob(os.path.join(workdir, "events.out.tfevents.*")):
        with open(path, "rb") as f:
            data = f.read()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset : offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12 : offset + 12 + length])
            offset += 12 + length + 4
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def tensorboard_texts(workdir):
    """{tag: [(step, text)]} of the text summaries in the TFRecord event files."""
    texts = {}
    for path in glob.glob(os.path.join(workdir, "events.out.tfevents.*")):
        with open(path, "rb") as f:
            data = f.read()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset : offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12 : offset + 12 + length])
            offset += 12 + length + 4
            for value in event.summary.value:
                if value.tensor.string_val:
                    text = value.tensor.string_val[0].decode()
                    texts.setdefault(value.tag, []).append((event.step, text))
    return texts
