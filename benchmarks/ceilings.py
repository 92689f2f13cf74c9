"""Throughput ceilings of one config: where the time goes between envpool and the learner.

    python benchmarks/ceilings.py --config=configs/ppo_cartpole.py
    python benchmarks/ceilings.py --config=configs/impala_cartpole.py --json
    python benchmarks/ceilings.py --config=configs/ppo_atari.py:smoke --set env.num_envs=16

Measures, in one process and one run, env steps per second of:

* raw envpool: the config's env pools stepped with random actions (one Python thread per
  actor thread, as the pipeline has), nothing else: the ceiling of the step loop.
* raw envpool in a scan: the same pools stepped by one jitted `lax.scan` per 128 steps
  through envpool's XLA interface, fixed random actions: the ceiling of the scan loop.
* actor-only, per actor loop (`pipeline.actor_loop` step and scan): the pipeline's own
  actor threads (policy inference, env steps, bookkeeping and the copy of each rollout
  to the learner devices) with one fixed parameter version and no learner; rollouts are
  taken as fast as they are made.
* where the scan loop's time goes beside the env: the policy step alone inside a jitted
  scan (synthetic observations), and the host's episode records over a real rollout's
  rewards and flags (`envs.EpisodeTracker`, step by step).
* where the step loop's time goes beside the env: its policy calls alone, each with the
  copies it makes (observations host -> actor device, actions back to the host), no env.
* host/device copies of the handoff, per actor loop: a collected rollout handed to the
  learner devices as the actor threads hand it (the copy from where the loop leaves it:
  the host for step, the actor device for scan; nothing moves where that device is the
  learner's) and its check against the spec.
* learner-only: the compiled learner update (`Pipeline.compile_update`) on one fixed
  rollout, back to back.
* plain jit: `jax.jit(agent.update)` on one learner device, without the pipeline's
  shardings, donation or compiler options: the reference the compiled update is held to.
* end-to-end: `sebulba.train.train`, steady state (after update 1, which compiles), from
  metrics.jsonl: with `pipeline.policy_lag` 1 for each actor loop, and with lag 0 for
  the loop `auto` chooses.

Where the task cannot run under scan (`sebulba.actors.scan_actor.unsupported_reason`,
e.g. MuJoCo's float64 arrays), the scan figures are left out and the reason is printed.

Actor and learner run on two virtual CPU devices (0 and 1) unless the config's mesh says
otherwise with `--set`. On a GPU every figure is taken under the config's
`debug.deterministic_gpu` (True by default, as a run has it). Every figure is steady
state: the first rollout or update of each measurement, which compiles, is excluded.
Prints markdown tables; `--json` prints one JSON object with the keys `raw_envpool_sps`,
`raw_envpool_scan_sps`, `actor_only_step_sps`, `actor_only_scan_sps`, `policy_in_scan_sps`,
`episode_bookkeeping_sps`, `policy_calls_sps`, `handoff_step_sps`, `handoff_scan_sps`,
`learner_only_sps`, `plain_jit_sps`,
`end_to_end_step_sps`, `end_to_end_scan_sps`, `end_to_end_lag0_sps`, the ratios
(`*_over_*`) and `scan_unsupported` (the reason, where scan cannot run). For the loop
`auto` chooses, also where end to end sits between acting and learning taking turns and
overlapping perfectly: `serialised_bound_sps` = 1 / (1 / actor-only + 1 / learner-only),
`overlapped_bound_sps` = min(actor-only, learner-only) and `overlap_achieved` (0 at the
first, 1 at the second). Raw envpool from Python against inside a scan is
`raw_envpool_scan_over_raw_envpool`.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import tempfile
import threading
import time

# Two virtual devices so actor and learner get separate devices, as on accelerators.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from config_spec import actor_and_learner_config, benchmark_parser  # noqa: E402

from sebulba import random_streams, train
from sebulba.actors import scan_actor
from sebulba.actors.handoff import RunControl, StartGate  # noqa: E402
from sebulba.config.sizes import derive_sizes  # noqa: E402
from sebulba.environments import episodes as episodes_lib  # noqa: E402
from sebulba.environments import spaces, thread_envs  # noqa: E402
from sebulba.runtime import platforms  # noqa: E402

# libtpu's errors about a TPU it cannot find never show where no accelerator exists.
platforms.skip_absent_accelerators()


def random_actions(action_spec, n: int, rng: np.random.Generator) -> np.ndarray:
    """Uniform random actions [n, ...] of any action spec, as the env takes them."""
    if isinstance(action_spec, spaces.Discrete):
        return rng.integers(0, action_spec.num_actions, n, dtype=np.int32)
    if isinstance(action_spec, spaces.MultiDiscrete):
        return rng.integers(0, action_spec.nvec, (n, len(action_spec.nvec)), dtype=np.int32)
    low = np.reshape(action_spec.low, action_spec.shape)
    high = np.reshape(action_spec.high, action_spec.shape)
    return rng.uniform(low, high, (n, *action_spec.shape)).astype(np.float32)


def _env_steps_per_second(setup, seconds: float, step_envs) -> float:
    """Env steps/s of `step_envs(i, envs, counts, stop)` run in one thread per actor
    thread: each adds its steps of `envs` to `counts[i]` until `stop` is set. Timed from
    when every thread has counted once (warm-up and compiling excluded)."""
    envs_per_thread = setup.envs_per_thread
    counts = [0] * len(envs_per_thread)
    stop = threading.Event()
    errors = []

    def run(i, envs):
        try:
            step_envs(i, envs, counts, stop)
        except Exception as error:  # noqa: BLE001 - re-raised below.
            errors.append(error)

    threads = [threading.Thread(target=run, args=item) for item in enumerate(envs_per_thread)]
    for thread in threads:
        thread.start()
    while not errors and min(counts) == 0:
        time.sleep(0.05)
    start_counts, start = list(counts), time.perf_counter()
    time.sleep(seconds)
    steps = sum(counts) - sum(start_counts)
    elapsed = time.perf_counter() - start
    stop.set()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return steps * setup.sizes.envs_per_thread / elapsed


def raw_envpool_sps(setup, seconds: float) -> float:
    """Steps/s of the config's pools under random actions, one thread per pool."""
    num_envs = setup.sizes.envs_per_thread

    def step_pool(i, pool, counts, stop):
        rng = np.random.default_rng(i)
        pool.reset()
        # A few batches of random actions drawn up front: the env, not numpy, is measured.
        batches = [random_actions(setup.env_spec.action, num_envs, rng) for _ in range(16)]
        while not stop.is_set():
            for actions in batches:
                pool.step(actions)
                counts[i] += 1

    return _env_steps_per_second(setup, seconds, step_pool)


def _scan_stepper(pools, actions: np.ndarray, device, num_steps: int = 128):
    """A jitted program stepping `pools` `num_steps` times inside one scan; its handles."""
    xla_fns = [pool.xla() for pool in pools]
    offsets = np.cumsum([0, *[pool.config["num_envs"] for pool in pools]])

    def program(handles, actions):
        def body(handles, step_actions):
            sent = [
                send(handle, step_actions[offsets[i] : offsets[i + 1]])
                for i, (handle, (_, _, send, _)) in enumerate(zip(handles, xla_fns, strict=True))
            ]
            sent = jax.lax.optimization_barrier(sent)  # Every pool steps at once.
            received = [recv(handle) for handle, (_, recv, _, _) in zip(sent, xla_fns, strict=True)]
            return [handle for handle, _ in received], None

        repeats = -(-num_steps // len(actions))
        xs = jnp.tile(actions, (repeats,) + (1,) * (actions.ndim - 1))[:num_steps]
        return jax.lax.scan(body, handles, xs)[0]

    handles = jax.device_put([handle for handle, *_ in xla_fns], device)
    return jax.jit(program), handles, jax.device_put(actions, device)


def raw_envpool_scan_sps(setup, seconds: float, num_steps: int = 128) -> float:
    """Steps/s of the config's pools stepped inside a scan, fixed random actions, one
    thread per actor thread (each on its actor device)."""
    num_envs = setup.sizes.envs_per_thread

    def step_pools(i, envs, counts, stop):
        pools = [p for g in thread_envs.step_groups(envs) for p in scan_actor.pools_of(g)]
        for pool in pools:
            pool.reset()
        rng = np.random.default_rng(i)
        action_spec = setup.env_spec.action
        batches = np.stack([random_actions(action_spec, num_envs, rng) for _ in range(16)])
        batches = np.asarray(scan_actor.env_actions(action_spec, batches))
        device = setup.layout.actor_devices[i % len(setup.layout.actor_devices)]
        program, handles, actions = _scan_stepper(pools, batches, device, num_steps)
        handles = jax.block_until_ready(program(handles, actions))  # Compiles.
        while not stop.is_set():
            handles = jax.block_until_ready(program(handles, actions))
            counts[i] += num_steps

    return _env_steps_per_second(setup, seconds, step_pools)


class _FixedParams:
    """A parameter store that serves one version for every update (no learner)."""

    def __init__(self, params_per_device):
        self.params_per_device = params_per_device

    def get(self, version: int, device_index: int):
        del version
        return self.params_per_device[device_index]


def actor_only_sps(setup, seconds: float, actor_loop: str):
    """Steps/s of the pipeline's actor threads alone; also returns the pipeline, the
    learner state, one rollout per thread as handed over, and thread 0's last collected
    rollout before its handoff (for `handoff_sps`)."""
    pipeline = train.make_pipeline(setup, actor_loop=actor_loop)
    state = train.init_learner_state(setup)
    params = setup.agent.policy_params(state)
    store = _FixedParams([jax.device_put(params, device) for device in setup.layout.actor_devices])
    control = RunControl()
    handoffs = [queue.Queue(maxsize=1) for _ in setup.envs_per_thread]
    gate = StartGate(len(setup.envs_per_thread), control)
    threads = [
        threading.Thread(
            target=pipeline._run_actor,
            args=(t, envs, store, handoffs[t], 1, gate, control),
            daemon=True,
        )
        for t, envs in enumerate(setup.envs_per_thread)
    ]
    collected = []
    hand_over = pipeline._to_learner_devices

    def keep_and_hand_over(rollout):
        if threading.current_thread() is threads[0]:
            collected[:] = [rollout]
        return hand_over(rollout)

    pipeline._to_learner_devices = keep_and_hand_over  # Until the threads have stopped.
    for thread in threads:
        thread.start()
    first_rollouts, start, updates = None, None, 0
    while True:
        rollouts = [q.get() for q in handoffs]
        if control.error is not None:
            raise control.error
        if start is None:  # The first rollout compiles the policy step.
            start = time.perf_counter()
            first_rollouts = rollouts
        else:
            updates += 1
        if start is not None and time.perf_counter() - start >= seconds and updates >= 2:
            break
    elapsed = time.perf_counter() - start
    control.stop()
    for thread in threads:
        thread.join(timeout=10.0)
    del pipeline._to_learner_devices  # The class's method again.
    sps = updates * setup.sizes.steps_per_update / elapsed
    return sps, pipeline, state, first_rollouts, collected[0]


def handoff_sps(pipeline, collected_rollout, setup, seconds: float) -> float:
    """Steps/s of one actor thread's handoff alone: its collected rollout copied to the
    learner devices (`Pipeline._to_learner_devices`, as the actor thread does it) and
    checked against its spec (`Pipeline.check_rollout`, which waits for the copies)."""
    expected_env_ids = pipeline.piece_env_ids(0)
    count, start = 0, time.perf_counter()
    while count < 2 or time.perf_counter() - start < seconds:
        pieces = pipeline._to_learner_devices(collected_rollout)
        if pipeline.check_rollout(pieces, expected_env_ids) is not None:
            raise RuntimeError("the measured rollout breaks its spec")
        count += 1
    steps = setup.sizes.num_steps * setup.sizes.envs_per_thread
    return count * steps / (time.perf_counter() - start)


def _policy_inputs(params, setup):
    """What a policy step takes besides observations, on actor device 0, for one thread's
    envs: (device, envs, params, carry, env ids, step index)."""
    device = setup.layout.actor_devices[0]
    n = setup.sizes.envs_per_thread
    return (
        device,
        n,
        jax.device_put(params, device),
        jax.device_put(setup.agent.new_carry(n), device),
        jax.device_put(np.arange(n, dtype=np.int32), device),
        jax.device_put(np.int32(0), device),
    )


def policy_calls_sps(pipeline, params, setup, seconds: float) -> float:
    """Steps/s of the step loop's policy side alone (no env): per step, observations
    copied from the host to the actor device, one call of the actor step, the actions
    copied back to the host, as `Pipeline._collect` does. One actor device."""
    device, n, params, carry, env_ids, step_index = _policy_inputs(params, setup)
    obs = spaces.zero_observation(setup.env_spec.observation, n)
    starts = np.zeros(n, bool)

    def call(step_index):
        obs_on_device, starts_on_device = jax.device_put((obs, starts), device)
        _, _, actions, _, step_index = pipeline._actor_step(
            params, carry, obs_on_device, starts_on_device, env_ids, step_index
        )
        np.asarray(jax.device_get(actions))
        return step_index

    step_index = call(step_index)  # Compiles.
    count, start = 0, time.perf_counter()
    while count < 2 or time.perf_counter() - start < seconds:
        step_index = call(step_index)
        count += 1
    return count * n / (time.perf_counter() - start)


def policy_in_scan_sps(pipeline, params, setup, seconds: float, num_steps: int = 128) -> float:
    """Steps/s of the actor's policy step alone inside a jitted scan (no env): what the
    scan loop's program spends beside the env. Synthetic observations, one actor device."""
    device, n, params, carry, env_ids, step_index = _policy_inputs(params, setup)
    obs = jax.device_put(spaces.zero_observation(setup.env_spec.observation, n), device)
    starts = jax.device_put(np.zeros(n, bool), device)

    def program(params, step_index):
        def body(step_index, t):
            # Observations that change every step, or XLA hoists the network out of the loop.
            step_obs = jax.tree.map(lambda o: (o + t).astype(o.dtype), obs)
            _, _, actions, outputs, step_index = pipeline._actor_step_fn(
                params, carry, step_obs, starts, env_ids, step_index
            )
            return step_index, (actions, outputs)  # Kept, as the rollout keeps them.

        return jax.lax.scan(body, step_index, jnp.arange(num_steps, dtype=jnp.int32))

    run = jax.jit(program)
    jax.block_until_ready(run(params, step_index))  # Compiles.
    count, start = 0, time.perf_counter()
    while count < 2 or time.perf_counter() - start < seconds:
        jax.block_until_ready(run(params, step_index))
        count += 1
    return count * num_steps * n / (time.perf_counter() - start)


def episode_bookkeeping_sps(actor_rollouts, setup, seconds: float) -> float:
    """Steps/s of the host's episode records (`envs.EpisodeTracker`, step by step) over a
    real rollout's rewards and flags: what the scan loop does on the host per rollout."""
    pieces = [piece for rollout in actor_rollouts for piece in rollout.pieces]
    rewards, terminations, truncations = (
        np.concatenate([np.asarray(getattr(p, name)) for p in pieces], axis=1)
        for name in ("rewards", "terminations", "truncations")
    )
    num_steps, num_envs = rewards.shape
    count, start = 0, time.perf_counter()
    while count < 2 or time.perf_counter() - start < seconds:
        tracker = episodes_lib.EpisodeTracker(np.arange(num_envs))
        returns, lengths, env_ids = [], [], []
        for t in range(num_steps):
            tracker.step(rewards[t], terminations[t], truncations[t], returns, lengths, env_ids)
        count += 1
    return count * num_steps * num_envs / (time.perf_counter() - start)


def _time_updates(update_fn, state, rollout, steps_per_update: int, seconds: float) -> float:
    state, metrics = update_fn(state, rollout)  # Compiles (if it must) and warms up.
    jax.block_until_ready((state, metrics))
    count, start = 0, time.perf_counter()
    while count < 2 or time.perf_counter() - start < seconds:
        state, metrics = update_fn(state, rollout)
        jax.block_until_ready(metrics)
        count += 1
    return count * steps_per_update / (time.perf_counter() - start)


def learner_only_sps(pipeline, state, actor_rollouts, sizes, seconds: float):
    """Steps/s of the compiled update on one rollout; and of `jax.jit(agent.update)`."""
    compiled = pipeline.compile_update(state)
    rollout = pipeline._assemble(actor_rollouts)
    learner = _time_updates(compiled, state, rollout, sizes.steps_per_update, seconds)
    device = pipeline.layout.local_learner_devices[0]
    init = jax.jit(pipeline.agent.init, out_shardings=jax.sharding.SingleDeviceSharding(device))
    plain_state = init(random_streams.init_key(pipeline.seed))
    plain_rollout = jax.device_put(rollout, device)
    plain = _time_updates(
        jax.jit(pipeline.agent.update), plain_state, plain_rollout, sizes.steps_per_update, seconds
    )
    return learner, plain


def end_to_end_sps(config, policy_lag: int, updates: int, actor_loop: str = "auto") -> float:
    """Steady-state steps/s of a real run (`train.train`), from metrics.jsonl."""
    config = config.copy_and_resolve_references()
    config.pipeline.policy_lag = policy_lag
    config.pipeline.actor_loop = actor_loop
    return end_to_end(config, updates)[0]


def end_to_end(config, updates: int) -> tuple[float, dict]:
    """(steady-state steps/s, summary.json) of `updates` updates of `config`, run by
    `train.train` without checkpoints or TensorBoard; steps/s from metrics.jsonl."""
    config = config.copy_and_resolve_references()
    config.total_timesteps = 10**12  # Only to derive the update size.
    sizes = derive_sizes(config, num_processes=jax.process_count())
    config.total_timesteps = sizes.steps_per_update * updates
    config.log.every_updates = 1
    config.log.tensorboard = False
    config.log.console = "lines"
    config.log.console_every_s = 1e9
    config.ckpt.every_updates = 0
    with tempfile.TemporaryDirectory() as workdir:
        train.train(config, workdir)
        with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
            lines = [json.loads(line) for line in f]
        with open(os.path.join(workdir, "summary.json"), encoding="utf-8") as f:
            summary = json.load(f)
    first, last = lines[0], lines[-1]  # Update 1 compiles; steady state starts after it.
    sps = (last["global_step"] - first["global_step"]) / (
        last["wall_time_s"] - first["wall_time_s"]
    )
    return sps, summary


MEASUREMENTS = ("raw", "actor", "learner", "end_to_end")


def endless(config):
    """A copy of the config whose actors run until stopped: more updates than any
    measurement takes, few enough that an update's index fits the int32 that a learning
    rate schedule reads it as."""
    config = config.copy_and_resolve_references()
    config.total_timesteps = 10**12  # Only to derive the update size.
    sizes = derive_sizes(config, num_processes=jax.process_count())
    config.total_timesteps = sizes.steps_per_update * 10**6
    return config


def _close(setup) -> None:
    for pool in setup.envs_per_thread:
        pool.close()


def measure(config, seconds: float, updates: int, only=MEASUREMENTS) -> dict:
    """Runs the measurements named in `only`; returns the figures and their ratios."""
    config.log.tensorboard = False
    result = {"config": f"{config.agent.name} {config.env.id}"}
    end_to_end_config = config
    config = endless(config)
    config.pipeline.actor_loop = "auto"
    setup = train.prepare(config)
    loops = ["step", "scan"] if setup.actor_loop == "scan" else ["step"]
    if setup.actor_loop != "scan":
        result["scan_unsupported"] = setup.actor_loop_reason
    result["num_envs_per_thread"] = setup.sizes.envs_per_thread
    result["num_actor_threads"] = setup.sizes.num_actor_threads
    if "raw" in only:
        try:
            result["raw_envpool_sps"] = raw_envpool_sps(setup, seconds)
        finally:
            _close(setup)
        if "scan" in loops:
            setup = train.prepare(config)
            try:
                result["raw_envpool_scan_sps"] = raw_envpool_scan_sps(setup, seconds)
            finally:
                _close(setup)
    else:
        _close(setup)
    if "actor" in only or "learner" in only:
        for loop in loops:
            setup = train.prepare(config)  # Fresh envs for each measurement.
            try:
                actor, pipeline, state, rollouts, collected = actor_only_sps(setup, seconds, loop)
            finally:
                _close(setup)
            result[f"actor_only_{loop}_sps"] = actor
            result[f"handoff_{loop}_sps"] = handoff_sps(pipeline, collected, setup, seconds)
            del collected
            # Where the loop's time goes beside the env: the step loop's policy calls with
            # their copies; the scan loop's policy step in its program, and its episode
            # records on the host.
            params = setup.agent.policy_params(state)
            if loop == "step":
                result["policy_calls_sps"] = policy_calls_sps(pipeline, params, setup, seconds)
            else:
                result["policy_in_scan_sps"] = policy_in_scan_sps(pipeline, params, setup, seconds)
                result["episode_bookkeeping_sps"] = episode_bookkeeping_sps(
                    rollouts, setup, seconds
                )
        if "learner" in only:
            result["learner_only_sps"], result["plain_jit_sps"] = learner_only_sps(
                pipeline, state, rollouts, setup.sizes, seconds
            )
        del pipeline, state, rollouts
    if "end_to_end" in only:
        for loop in loops:
            result[f"end_to_end_{loop}_sps"] = end_to_end_sps(end_to_end_config, 1, updates, loop)
        result["end_to_end_lag0_sps"] = end_to_end_sps(end_to_end_config, 0, updates)
    auto = loops[-1]  # The loop `auto` chooses.
    ratios = {
        "actor_only_step_over_raw_envpool": ("actor_only_step_sps", "raw_envpool_sps"),
        "actor_only_scan_over_raw_envpool_scan": ("actor_only_scan_sps", "raw_envpool_scan_sps"),
        "actor_only_scan_over_step": ("actor_only_scan_sps", "actor_only_step_sps"),
        "end_to_end_scan_over_step": ("end_to_end_scan_sps", "end_to_end_step_sps"),
        "raw_envpool_scan_over_raw_envpool": ("raw_envpool_scan_sps", "raw_envpool_sps"),
        "learner_only_over_plain_jit": ("learner_only_sps", "plain_jit_sps"),
        f"end_to_end_{auto}_over_actor_only_{auto}": (
            f"end_to_end_{auto}_sps",
            f"actor_only_{auto}_sps",
        ),
        f"end_to_end_{auto}_over_learner_only": (f"end_to_end_{auto}_sps", "learner_only_sps"),
        f"end_to_end_lag0_over_lag1_{auto}": ("end_to_end_lag0_sps", f"end_to_end_{auto}_sps"),
    }
    for name, (numerator, denominator) in ratios.items():
        if numerator in result and denominator in result:
            result[name] = result[numerator] / result[denominator]
    result.update(overlap_figures(result, auto))
    return result


def overlap_figures(result: dict, loop: str) -> dict:
    """How far end to end is from acting and learning taking turns, for the loop `auto`
    chooses: the serialised bound 1 / (1 / actor-only + 1 / learner-only) is what a run
    reaches when each rollout and each update hold the shared resources in turn (one GPU,
    or CPU cores both need); min(actor-only, learner-only) is what perfect overlap reaches;
    `overlap_achieved` places end to end between them (0: taking turns, 1: perfect)."""
    keys = (f"actor_only_{loop}_sps", "learner_only_sps", f"end_to_end_{loop}_sps")
    if not all(key in result for key in keys):
        return {}
    actor, learner, end_to_end = (result[key] for key in keys)
    serialised = 1.0 / (1.0 / actor + 1.0 / learner)
    overlapped = min(actor, learner)
    return {
        "serialised_bound_sps": serialised,
        "overlapped_bound_sps": overlapped,
        "overlap_achieved": (end_to_end - serialised) / (overlapped - serialised),
    }


FIGURES = (
    "raw_envpool_sps",
    "raw_envpool_scan_sps",
    "actor_only_step_sps",
    "actor_only_scan_sps",
    "policy_in_scan_sps",
    "episode_bookkeeping_sps",
    "policy_calls_sps",
    "handoff_step_sps",
    "handoff_scan_sps",
    "learner_only_sps",
    "plain_jit_sps",
    "end_to_end_step_sps",
    "end_to_end_scan_sps",
    "end_to_end_lag0_sps",
    "serialised_bound_sps",
    "overlapped_bound_sps",
)


def print_table(result: dict) -> None:
    print(
        f"{result['config']}, {result['num_actor_threads']} actor thread(s) x "
        f"{result['num_envs_per_thread']} envs; jax {jax.__version__}, {jax.default_backend()}\n"
    )
    if "scan_unsupported" in result:
        print(f"actor loop scan not measured: {result['scan_unsupported']}\n")
    print("| measurement | steps/s |\n|---|---|")
    for key in FIGURES:
        if key in result:
            print(f"| {key} | {result[key]:,.0f} |")
    print("\n| ratio | value |\n|---|---|")
    for key, value in result.items():
        if "_over_" in key or key == "overlap_achieved":
            print(f"| {key} | {value:.2f} |")


def print_threads_table(config, thread_counts: list[int], seconds: float) -> None:
    """Raw envpool and actor-only steps/s for each number of actor threads, envs per
    thread fixed (the config's `env.num_envs` is the envs of one thread)."""
    envs_per_thread = config.env.num_envs
    print(
        f"{config.agent.name} {config.env.id}, {envs_per_thread} envs per actor thread; "
        f"jax {jax.__version__}, {jax.default_backend()}\n"
    )
    print(
        "| actor threads | raw envpool | raw envpool in a scan | actor-only, step loop "
        "| actor-only, scan loop | step / raw | scan / raw in a scan |"
    )
    print("|---|---|---|---|---|---|---|")

    def cell(result, key, fmt=",.0f"):
        return format(result[key], fmt) if key in result else "-"

    for threads in thread_counts:
        variant = config.copy_and_resolve_references()
        variant.pipeline.num_actor_threads = threads
        variant.env.num_envs = envs_per_thread * threads
        result = measure(variant, seconds, updates=0, only=("raw", "actor"))
        print(
            f"| {threads} | {cell(result, 'raw_envpool_sps')} "
            f"| {cell(result, 'raw_envpool_scan_sps')} | {cell(result, 'actor_only_step_sps')} "
            f"| {cell(result, 'actor_only_scan_sps')} "
            f"| {cell(result, 'actor_only_step_over_raw_envpool', '.2f')} "
            f"| {cell(result, 'actor_only_scan_over_raw_envpool_scan', '.2f')} |",
            flush=True,
        )


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    parser.add_argument("--updates", type=int, default=30, help="per end-to-end run")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--only", default=",".join(MEASUREMENTS), help=f"comma-separated subset of {MEASUREMENTS}"
    )
    parser.add_argument(
        "--threads",
        default=None,
        help="e.g. 1,2,4: raw envpool and actor-only per pipeline.num_actor_threads, one table",
    )
    args = parser.parse_args()
    config = actor_and_learner_config(args)
    if args.threads:
        print_threads_table(config, [int(n) for n in args.threads.split(",")], args.seconds)
        return
    result = measure(config, args.seconds, args.updates, args.only.split(","))
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)


if __name__ == "__main__":
    main()
