"""Actor throughput work keeps the guarantees: keys, envs, transfers, unrolling, sps, cache."""

import dataclasses
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sebulba import random_streams, train
from sebulba.actors.handoff import RunControl
from sebulba.agents import learner
from sebulba.agents.api import Discrete
from sebulba.agents.networks import has_convolutions_slow_in_a_loop, make_network
from sebulba.config import base_config
from sebulba.config.sizes import derive_sizes
from sebulba.environments import envpool_pools, tasks, thread_envs
from sebulba.environments.spaces import ArraySpec
from sebulba.errors import ConfigError
from sebulba.runtime import compile_cache
from sebulba.runtime.metrics import MetricsLogger
from sebulba.update_report import UpdateReport
from tests import minimal_agent, probe_agent
from tests.helpers import agent_config, make_pipeline, read_summary
from tests.test_cli import run_cli


def _key_recording_pipeline(overlap: bool, num_envs: int = 6):
    """A pipeline whose agent stores its sampling keys (and a uniform action) as outputs."""
    config = agent_config(
        probe_agent, env__num_envs=num_envs, pipeline__overlap_env_steps=overlap, seed=5
    )
    setup = train.prepare(config)

    def act(params, obs, keys):
        del params
        actions = jax.vmap(lambda k: jax.random.randint(k, (), 0, 2))(keys).astype(jnp.int32)
        return actions, {"keys": jax.random.key_data(keys), "obs": obs}

    agent = dataclasses.replace(setup.agent, act=act)
    pipeline = make_pipeline(
        dataclasses.replace(setup, agent=agent), policy_lag=1, clip_rewards=False
    )
    return pipeline, setup


def _collect_rollouts(pipeline, setup, first_update, count):
    device = setup.layout.actor_devices[0]
    groups = pipeline._actor_groups(0, setup.envs_per_thread[0], device, first_update)
    env_ids = pipeline.thread_env_ids(0)
    params = jax.device_put(setup.agent.policy_params(train.init_learner_state(setup)), device)
    rollouts = []
    with jax.transfer_guard("disallow"):
        for _ in range(count):
            rollouts.append(pipeline._collect(groups, env_ids, params, device, RunControl()))
    return rollouts


@pytest.mark.parametrize("overlap", [False, True], ids=["whole", "halves"])
def test_actor_keys_follow_the_step_index_kept_on_the_device(overlap):
    pipeline, setup = _key_recording_pipeline(overlap)
    T = setup.sizes.num_steps
    rollouts = _collect_rollouts(pipeline, setup, first_update=3, count=2)
    env_ids = np.arange(6, dtype=np.int32)
    for update, rollout in zip((3, 4), rollouts, strict=True):
        keys = np.asarray(rollout.policy_outputs[0]["keys"])
        for t in range(T + 1):
            expected = random_streams.actor_keys(5, np.int32((update - 1) * (T + 1) + t), env_ids)
            np.testing.assert_array_equal(keys[t], jax.random.key_data(expected))
    for pool in setup.envs_per_thread:
        pool.close()


def test_halves_collect_the_same_data_as_one_pool():
    data = {}
    for overlap in (False, True):
        pipeline, setup = _key_recording_pipeline(overlap, num_envs=5)
        (rollout,) = _collect_rollouts(pipeline, setup, first_update=1, count=1)
        data[overlap] = rollout
        for pool in setup.envs_per_thread:
            pool.close()
    whole, halves = data[False], data[True]
    for name in ("obs", "actions", "rewards", "terminations", "truncations", "valid"):
        np.testing.assert_array_equal(getattr(whole, name), getattr(halves, name), err_msg=name)
    np.testing.assert_array_equal(
        np.asarray(whole.policy_outputs[0]["obs"]), np.asarray(halves.policy_outputs[0]["obs"])
    )
    assert whole.episode_returns == halves.episode_returns


@pytest.mark.parametrize("overlap", [False, True], ids=["whole", "halves"])
def test_each_actor_step_moves_observations_and_actions_once(overlap, monkeypatch):
    pipeline, setup = _key_recording_pipeline(overlap)
    T = setup.sizes.num_steps
    groups = 2 if overlap else 1
    _collect_rollouts(pipeline, setup, first_update=1, count=1)  # Compiles.
    calls = {"device_put": 0, "device_get": 0}
    for name in calls:
        original = getattr(jax, name)

        def counting(*args, _original=original, _name=name, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(jax, name, counting)
    device = setup.layout.actor_devices[0]
    groups_state = pipeline._actor_groups(0, setup.envs_per_thread[0], device, 2)
    params = jax.device_put(setup.agent.policy_params(train.init_learner_state(setup)), device)
    calls.update(device_put=0, device_get=0)
    with jax.transfer_guard("disallow"):
        pipeline._collect(groups_state, pipeline.thread_env_ids(0), params, device, RunControl())
    # One copy of the observations per policy step (T + 1) and of the actions back per
    # env step (T), per group; no step index or key crosses.
    assert calls == {"device_put": groups * (T + 1), "device_get": groups * T}
    for pool in setup.envs_per_thread:
        pool.close()


def test_split_pool_steps_the_same_envs_as_one_pool():
    config = base_config(minimal_agent.get_config())
    whole = envpool_pools.make_envs(config.env, 7, seed=11)
    split = thread_envs.make_thread_envs(
        config.env, tasks.TaskLayout((config.env.id,), 7), 0, 7, 11, split=True
    )
    assert [g.config["num_envs"] for g in thread_envs.step_groups(split)] == [3, 4]
    np.testing.assert_array_equal(whole.reset()[0], split.reset()[0])
    rng = np.random.default_rng(0)
    for _ in range(300):  # Several episodes each, auto-resets included.
        actions = rng.integers(0, 2, 7, dtype=np.int32)
        for a, b in zip(whole.step(actions)[:4], split.step(actions)[:4], strict=True):
            np.testing.assert_array_equal(a, b)
    whole.close()
    split.close()


def test_overlapped_halves_keep_the_checksum_under_injected_delays(tmp_path):
    checksums = []
    for name, delays in (("a", {}), ("b", {"debug__actor_delay_s": 0.03}), ("c", {})):
        config = agent_config(minimal_agent, pipeline__overlap_env_steps=True, **delays)
        if name == "c":
            config.debug.learner_delay_s = 0.03
        train.train(config, str(tmp_path / name))
        checksums.append(read_summary(str(tmp_path / name))["params_checksum"])
    assert len(set(checksums)) == 1


def test_overlap_needs_two_envs_per_thread():
    config = agent_config(minimal_agent, env__num_envs=1, pipeline__overlap_env_steps=True)
    with pytest.raises(ConfigError, match=r"pipeline\.overlap_env_steps.*env\.num_envs \(1\)"):
        train.prepare(config)


def test_auto_unrolls_only_networks_with_convolutions_slow_in_a_loop_on_cpu():
    image = ArraySpec((4, 84, 84), "uint8")
    vector = ArraySpec((4,), "float32")
    minatar = ArraySpec((10, 10, 4), "float32")
    mlp = make_network("mlp", Discrete(2), observation=vector)
    nature = make_network("nature_cnn", Discrete(2), observation=image)
    resnet = make_network("impala_resnet", Discrete(2), observation=image)
    minatar_cnn = make_network("minatar", Discrete(2), observation=minatar)
    screen = ArraySpec((16, 16, 3), "uint8")  # multi_input's images are channels-last.
    multi = make_network("multi_input", Discrete(2), observation={"image": screen, "x": vector})
    # Strided convolutions keep JAX's gradients, which XLA:CPU runs slowly in a loop; the
    # stride-1 ones have the networks' own (sebulba.agents.convolution).
    assert has_convolutions_slow_in_a_loop(nature, image)
    assert not has_convolutions_slow_in_a_loop(mlp, vector)
    assert not has_convolutions_slow_in_a_loop(resnet, image)
    assert not has_convolutions_slow_in_a_loop(minatar_cnn, minatar)
    assert not has_convolutions_slow_in_a_loop(multi, {"image": screen, "x": vector})
    assert jax.default_backend() == "cpu"
    assert learner.unrolls_minibatch_loop("auto", slow_convolutions=True)
    assert not learner.unrolls_minibatch_loop("auto", slow_convolutions=False)
    assert learner.unrolls_minibatch_loop("unrolled", slow_convolutions=False)
    assert not learner.unrolls_minibatch_loop("scan", slow_convolutions=True)


def _quiet_metrics(workdir, updates=None, host_cores=None):
    """A MetricsLogger of the minimal agent's run (`updates` long, if given) that writes
    nothing; and the run's sizes."""
    config = agent_config(minimal_agent)
    if updates is not None:
        config.total_timesteps = updates * config.env.num_envs * config.agent.num_steps
    sizes = derive_sizes(config)
    metrics = MetricsLogger(
        str(workdir),
        sizes,
        task_layout=tasks.task_layout(config, sizes.num_envs),
        every_updates=1,
        tensorboard=False,
        is_main_process=False,
        host_cores=host_cores,
    )
    return metrics, sizes


def _report(update, sizes):
    steps = update * sizes.steps_per_update
    return UpdateReport(update, steps, 1, update + 1, 0.0, 0.0, [], [], [], {})


def test_host_cpu_fraction_is_the_process_cpu_time_over_its_cores(tmp_path):
    metrics, sizes = _quiet_metrics(tmp_path, updates=3, host_cores=1)
    metrics.record(_report(1, sizes))
    cpu_began, wall_began = time.process_time(), time.perf_counter()
    while time.perf_counter() < wall_began + 0.3:  # This thread keeps one core busy...
        pass
    # ...as far as the machine lets it: on a loaded one (CI's 2 cores running two test
    # workers and their command lines) it ran 38% of the time. The fraction is what the
    # process got, measured here as the metric measures it, over the same window.
    got = (time.process_time() - cpu_began) / (time.perf_counter() - wall_began)
    metrics.record(_report(2, sizes))
    busy = metrics.last_line["host_cpu_fraction"]
    cpu_began, wall_began = time.process_time(), time.perf_counter()
    time.sleep(0.3)  # Nothing to do.
    got_idle = (time.process_time() - cpu_began) / (time.perf_counter() - wall_began)
    metrics.record(_report(3, sizes))
    idle = metrics.last_line["host_cpu_fraction"]
    assert busy == pytest.approx(got, abs=0.05) and idle == pytest.approx(got_idle, abs=0.05)
    assert busy > 0.2 and idle < busy / 2, (busy, idle)
    bottleneck = metrics.summary(sizes.global_steps, sizes.num_updates, "x", {})["bottleneck"]
    assert idle < bottleneck["host_cpu_fraction"] < busy
    assert "this process kept its 1 CPU core " in bottleneck["detail"]


def test_summary_sps_is_steady_state_and_says_what_includes_start_up(tmp_path):
    metrics, sizes = _quiet_metrics(tmp_path)
    time.sleep(0.5)  # Update 1: compiling and the first rollout.
    for update in range(1, sizes.num_updates + 1):
        if update > 1:
            time.sleep(0.02)
        metrics.record(
            UpdateReport(
                update, update * sizes.steps_per_update, 1, update + 1, 0.0, 0.0, [], [], [], {}
            )
        )
    summary = metrics.summary(sizes.global_steps, sizes.num_updates, "x", {})
    steady = (sizes.num_updates - 1) * sizes.steps_per_update / (0.02 * (sizes.num_updates - 1))
    assert summary["sps"] == pytest.approx(steady, rel=0.5)
    assert summary["sps_including_compile"] < summary["sps"] / 3


def test_sps_including_start_up_counts_the_whole_run_compiling_included(tmp_path, monkeypatch):
    # A slow compile (here 1.5 s more) is part of the run's wall time: the figure that
    # says "including start-up" is the run's steps over all of it.
    from sebulba.pipeline import Pipeline

    compile_update = Pipeline.compile_update

    def slow_compile(self, shapes):
        time.sleep(1.5)
        return compile_update(self, shapes)

    monkeypatch.setattr(Pipeline, "compile_update", slow_compile)
    workdir = str(tmp_path / "run")
    began = time.perf_counter()
    train.train(agent_config(minimal_agent), workdir)
    measured = time.perf_counter() - began
    summary = read_summary(workdir)
    assert measured - 0.5 < summary["wall_time_s"] <= measured
    assert summary["sps_including_compile"] == pytest.approx(
        summary["global_step"] / summary["wall_time_s"]
    )
    assert summary["sps_including_compile"] < summary["sps"]


def test_summary_sps_of_anakin_blocks_leaves_the_whole_first_call_out(tmp_path):
    # Blocks of 4 updates: each block's updates report together once it returns, so the
    # steady state starts after the first block's last report, not after update 1.
    metrics, sizes = _quiet_metrics(tmp_path, updates=12)
    updates = sizes.num_updates
    for first in range(1, updates + 1, 4):
        time.sleep(0.4 if first == 1 else 0.08)  # The first block also compiles.
        for update in range(first, first + 4):
            report = UpdateReport(
                update, update * sizes.steps_per_update, 1, update + 1, 0.0, 0.0, [], [], [], {}
            )
            report.last_update_of_call = first + 3
            metrics.record(report)
    summary = metrics.summary(updates * sizes.steps_per_update, updates, "x", {})
    steady = sizes.steps_per_update / 0.02  # 4 updates per 0.08 s after the first block.
    assert summary["sps"] == pytest.approx(steady, rel=0.2)


def test_cache_location_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(compile_cache.ENV_VAR, str(tmp_path / "c"))
    assert compile_cache.cache_dir() == str(tmp_path / "c")
    monkeypatch.setenv(compile_cache.ENV_VAR, "")
    assert compile_cache.cache_dir() is None
    monkeypatch.delenv(compile_cache.ENV_VAR)
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compile_cache.cache_dir() == os.path.join(str(tmp_path / "xdg"), "sebulba", "jax")


def test_a_rerun_loads_its_programs_from_the_compilation_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv(compile_cache.ENV_VAR, str(cache))
    monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    first = run_cli(tmp_path / "first")
    assert first.returncode == 0, first.stderr[-2000:]
    entries = set(os.listdir(cache))
    assert entries  # The first run compiled and stored its programs.
    # The actors' rollout program names envpool's pools by their address in the
    # process: it could never be read back, so it is not written.
    assert not [entry for entry in entries if "rollout_program" in entry]
    second = run_cli(tmp_path / "second")
    assert second.returncode == 0, second.stderr[-2000:]
    assert set(os.listdir(cache)) == entries  # The rerun compiled nothing new.
