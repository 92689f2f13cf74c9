"""Throughput ceilings of one config: where the time goes between envpool and the learner.

    python benchmarks/ceilings.py --config=configs/ppo_cartpole.py
    python benchmarks/ceilings.py --config=configs/impala_cartpole.py --json
    python benchmarks/ceilings.py --config=configs/ppo_atari.py:smoke --set env.num_envs=16

Measures, in one process and one run, env steps per second of:

* raw envpool: the config's env pools stepped with random actions (one Python thread per
  actor thread, as the pipeline has), nothing else: the ceiling of any actor.
* actor-only: the pipeline's own actor loop (policy inference, env steps, bookkeeping and
  the copy of each rollout to the learner devices) with one fixed parameter version and
  no learner; rollouts are taken as fast as they are made.
* learner-only: the compiled learner update (`Pipeline.compile_update`) on one fixed
  rollout, back to back.
* plain jit: `jax.jit(agent.update)` on one learner device, without the pipeline's
  shardings, donation or compiler options: the reference the compiled update is held to.
* end-to-end: `sebulba.train.train` with `pipeline.policy_lag` 1 and 0, steady state
  (after update 1, which compiles), from metrics.jsonl.

Actor and learner run on two virtual CPU devices (0 and 1) unless the config's mesh says
otherwise with `--set`. Every figure is steady state: the first rollout or update of each
measurement, which compiles, is excluded. Prints a table; `--json` prints one JSON object
with the keys `raw_envpool_sps`, `actor_only_sps`, `learner_only_sps`, `plain_jit_sps`,
`end_to_end_sps` (lag 1), `end_to_end_lag0_sps` and the ratios (`*_over_*`).
"""

from __future__ import annotations

import argparse
import ast
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

import importlib.util  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

from sebulba import random_streams, spaces, train  # noqa: E402
from sebulba.handoff import RunControl  # noqa: E402
from sebulba.pipeline import Pipeline  # noqa: E402
from sebulba.sizes import derive_sizes  # noqa: E402


def load_config(spec: str):
    """`path/to/config.py[:arg]` -> the config its `get_config(arg)` returns."""
    path, _, arg = spec.partition(":")
    module_spec = importlib.util.spec_from_file_location("benchmarked_config", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.get_config(arg or None)


def apply_overrides(config, overrides: list[str]) -> None:
    """Applies `KEY=VALUE` overrides (VALUE as a Python literal, else a string)."""
    for item in overrides:
        key, _, text = item.partition("=")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text
        *parents, name = key.split(".")
        node = config
        for parent in parents:
            node = node[parent]
        node[name] = value


def random_actions(action_spec, n: int, rng: np.random.Generator) -> np.ndarray:
    """Uniform random actions [n, ...] of any action spec, as the env takes them."""
    if isinstance(action_spec, spaces.Discrete):
        return rng.integers(0, action_spec.num_actions, n, dtype=np.int32)
    if isinstance(action_spec, spaces.MultiDiscrete):
        return rng.integers(0, action_spec.nvec, (n, len(action_spec.nvec)), dtype=np.int32)
    low = np.reshape(action_spec.low, action_spec.shape)
    high = np.reshape(action_spec.high, action_spec.shape)
    return rng.uniform(low, high, (n, *action_spec.shape)).astype(np.float32)


def raw_envpool_sps(setup, seconds: float) -> float:
    """Steps/s of the config's pools under random actions, one thread per pool."""
    pools = setup.envs_per_thread
    num_envs = setup.sizes.envs_per_thread
    counts = [0] * len(pools)
    stop = threading.Event()

    def step_pool(i, pool):
        rng = np.random.default_rng(i)
        pool.reset()
        # A few batches of random actions drawn up front: the env, not numpy, is measured.
        batches = [random_actions(setup.env_spec.action, num_envs, rng) for _ in range(16)]
        while not stop.is_set():
            for actions in batches:
                pool.step(actions)
                counts[i] += 1

    threads = [threading.Thread(target=step_pool, args=item) for item in enumerate(pools)]
    for thread in threads:
        thread.start()
    time.sleep(min(1.0, seconds / 4))  # Warm-up.
    start_counts, start = list(counts), time.perf_counter()
    time.sleep(seconds)
    steps = sum(counts) - sum(start_counts)
    elapsed = time.perf_counter() - start
    stop.set()
    for thread in threads:
        thread.join()
    return steps * num_envs / elapsed


class _FixedParams:
    """A parameter store that serves one version for every update (no learner)."""

    def __init__(self, params_per_device):
        self.params_per_device = params_per_device

    def get(self, version: int, device_index: int):
        del version
        return self.params_per_device[device_index]


def _pipeline(setup, config) -> Pipeline:
    return Pipeline(
        setup.agent,
        setup.layout,
        setup.sizes,
        setup.envs_per_thread,
        env_spec=setup.env_spec,
        seed=config.seed,
        policy_lag=config.pipeline.policy_lag,
        clip_rewards=config.env.clip_rewards,
        transfer_guard=config.debug.transfer_guard,
    )


def actor_only_sps(setup, config, seconds: float):
    """Steps/s of the pipeline's actor threads alone; also returns one assembled rollout."""
    pipeline = _pipeline(setup, config)
    state = train.init_learner_state(setup)
    params = setup.agent.policy_params(state)
    store = _FixedParams([jax.device_put(params, device) for device in setup.layout.actor_devices])
    control = RunControl()
    handoffs = [queue.Queue(maxsize=1) for _ in setup.envs_per_thread]
    threads = [
        threading.Thread(
            target=pipeline._run_actor,
            args=(t, envs, store, handoffs[t], 1, control),
            daemon=True,
        )
        for t, envs in enumerate(setup.envs_per_thread)
    ]
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
    return updates * setup.sizes.steps_per_update / elapsed, pipeline, state, first_rollouts


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


def end_to_end_sps(config, policy_lag: int, updates: int) -> float:
    """Steady-state steps/s of a real run (`train.train`), from metrics.jsonl."""
    config = config.copy_and_resolve_references()
    config.pipeline.policy_lag = policy_lag
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
    first, last = lines[0], lines[-1]  # Update 1 compiles; steady state starts after it.
    return (last["global_step"] - first["global_step"]) / (
        last["wall_time_s"] - first["wall_time_s"]
    )


MEASUREMENTS = ("raw", "actor", "learner", "end_to_end")


def measure(config, seconds: float, updates: int, only=MEASUREMENTS) -> dict:
    """Runs the measurements named in `only`; returns the figures and their ratios."""
    config.log.tensorboard = False
    result = {"config": f"{config.agent.name} {config.env.id}"}
    end_to_end_config = config
    # The actors run until stopped: give them more updates than any measurement takes.
    config = config.copy_and_resolve_references()
    config.total_timesteps = 10**12
    if "raw" in only:
        setup = train.prepare(config)
        try:
            result["raw_envpool_sps"] = raw_envpool_sps(setup, seconds)
        finally:
            for pool in setup.envs_per_thread:
                pool.close()
    setup = train.prepare(config)  # Fresh envs for the actors.
    result["num_envs_per_thread"] = setup.sizes.envs_per_thread
    result["num_actor_threads"] = setup.sizes.num_actor_threads
    if "actor" in only or "learner" in only:
        try:
            actor, pipeline, state, rollouts = actor_only_sps(setup, config, seconds)
        finally:
            for pool in setup.envs_per_thread:
                pool.close()
        result["actor_only_sps"] = actor
        if "learner" in only:
            result["learner_only_sps"], result["plain_jit_sps"] = learner_only_sps(
                pipeline, state, rollouts, setup.sizes, seconds
            )
        del pipeline, state, rollouts
    else:
        for pool in setup.envs_per_thread:
            pool.close()
    if "end_to_end" in only:
        result["end_to_end_sps"] = end_to_end_sps(end_to_end_config, 1, updates)
        result["end_to_end_lag0_sps"] = end_to_end_sps(end_to_end_config, 0, updates)
    ratios = {
        "actor_only_over_raw_envpool": ("actor_only_sps", "raw_envpool_sps"),
        "end_to_end_over_raw_envpool": ("end_to_end_sps", "raw_envpool_sps"),
        "learner_only_over_plain_jit": ("learner_only_sps", "plain_jit_sps"),
        "end_to_end_over_actor_only": ("end_to_end_sps", "actor_only_sps"),
        "end_to_end_over_learner_only": ("end_to_end_sps", "learner_only_sps"),
        "end_to_end_lag0_over_lag1": ("end_to_end_lag0_sps", "end_to_end_sps"),
    }
    for name, (numerator, denominator) in ratios.items():
        if numerator in result and denominator in result:
            result[name] = result[numerator] / result[denominator]
    return result


def print_table(result: dict) -> None:
    print(
        f"{result['config']}, {result['num_actor_threads']} actor thread(s) x "
        f"{result['num_envs_per_thread']} envs; jax {jax.__version__}, {jax.default_backend()}\n"
    )
    print("| measurement | steps/s |\n|---|---|")
    for key in (
        "raw_envpool_sps",
        "actor_only_sps",
        "learner_only_sps",
        "plain_jit_sps",
        "end_to_end_sps",
        "end_to_end_lag0_sps",
    ):
        if key in result:
            print(f"| {key} | {result[key]:,.0f} |")
    print("\n| ratio | value |\n|---|---|")
    for key, value in result.items():
        if "_over_" in key:
            print(f"| {key} | {value:.2f} |")


def print_threads_table(config, thread_counts: list[int], seconds: float) -> None:
    """Raw envpool and actor-only steps/s for each number of actor threads, envs per
    thread fixed (the config's `env.num_envs` is the envs of one thread)."""
    envs_per_thread = config.env.num_envs
    print(
        f"{config.agent.name} {config.env.id}, {envs_per_thread} envs per actor thread; "
        f"jax {jax.__version__}, {jax.default_backend()}\n"
    )
    print("| actor threads | raw envpool steps/s | actor-only steps/s | actor-only / raw |")
    print("|---|---|---|---|")
    for threads in thread_counts:
        variant = config.copy_and_resolve_references()
        variant.pipeline.num_actor_threads = threads
        variant.env.num_envs = envs_per_thread * threads
        result = measure(variant, seconds, updates=0, only=("raw", "actor"))
        print(
            f"| {threads} | {result['raw_envpool_sps']:,.0f} | {result['actor_only_sps']:,.0f} "
            f"| {result['actor_only_over_raw_envpool']:.2f} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="configs/FILE.py[:ARG]")
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE override")
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
    config = load_config(args.config)
    config.mesh.actor_device_ids = (0,)
    config.mesh.learner_device_ids = (1,)
    apply_overrides(config, args.set)
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
