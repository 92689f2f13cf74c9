"""Anakin throughput: the JAX env alone, the act-and-learn program, and seeds in one program.

    python benchmarks/anakin.py        # configs/ppo_cartpole_anakin.py, ~3 min on 2 idle cores
    python benchmarks/anakin.py --sections=ceiling --batch_sizes=256,4096,16384
    python benchmarks/anakin.py --config=configs/ppo_cartpole_anakin.py:smoke --set env.num_envs=16
    python benchmarks/anakin.py --sections=seeds --seeds=1,2,3

For one Anakin config (an `env.id` `SUITE:TASK`, `sebulba.anakin`), in one process on
JAX's default devices, three sections (`--sections`, each selectable):

* ceiling: env steps/s of the config's JAX env alone: random actions drawn up front, the
  runner's env keys and auto-reset (`env_api.step_envs`), one jitted `lax.scan` of T =
  `agent.num_steps` steps per call, for B = the config's `env.num_envs` and larger
  batches (`--batch_sizes`). At the config's B, the most its updates could reach.
* end_to_end: at the config's B, one update taken apart: the env alone (the ceiling),
  the rollout alone (`AnakinRunner.collect` jitted: policy and env steps), the agent's
  update alone on one rollout, and the runner's compiled act-and-learn program
  (`compile_update`, what a run calls), each back to back with no host work, their calls
  interleaved. Then `sebulba.train.train` for `--updates` updates, timed in blocks of
  `log.every_updates` updates after update 1: per update of the fastest block, the time
  between two updates' reports, the program's call within it and the rest (the host
  loop: finished episodes read back, metrics). Each against the ceiling at the same B.
* seeds: S seeds (`--seeds`) of the full config trained as one vmapped program
  (`sebulba.anakin.seeds.train_seeds`) and the same seeds one after the other
  (`sebulba.train.train` each, in this process, after a warm-up run so that neither pays
  the process's one-time costs): wall time with start-up, compiling and checkpoints, and
  steady state (one update of every seed, from the runs' metrics.jsonl: the fastest
  stretch of whole program calls between two metrics lines). Then where the speed-up
  comes from: the rollout alone, the update alone and the act-and-learn program for one
  seed and vmapped over the S seeds, calls interleaved. Per seed: mean return and
  `params_checksum` both ways, the first logged update whose metrics (and whose episode
  returns) differ between the two, and the largest relative difference of the final
  parameters.

A part's time is the fastest of `--repeats` calls after one untimed call: on a shared
machine the median moves with the neighbours' load, the fastest call much less. JAX's
persistent compilation cache is off, so every program compiles here. Prints markdown
tables (`benchmarks/record_output.py --markdown` records them); what the runs print goes
to stderr.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import tempfile
import time

# Every program compiles in this process: no persistent cache hides compile times.
os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from config_spec import apply_overrides, benchmark_parser, load_config  # noqa: E402

from sebulba import random_streams, train
from sebulba.anakin.env_api import reset_envs, step_envs  # noqa: E402
from sebulba.anakin.runner import AnakinRunner, update_blocks  # noqa: E402
from sebulba.anakin.seeds import SeedBatch, seed_workdir, train_seeds  # noqa: E402
from sebulba.environments import spaces  # noqa: E402
from sebulba.preflight.memory import update_compiler_options  # noqa: E402
from sebulba.runtime import platforms  # noqa: E402

# libtpu's errors about a TPU it cannot find never show where no accelerator exists.
platforms.skip_absent_accelerators()

SECTIONS = ("ceiling", "end_to_end", "seeds")
DEFAULT_CONFIG = "configs/ppo_cartpole_anakin.py"


def quiet_config(config, updates: int | None = None):
    """A copy that writes no TensorBoard and prints no progress; `updates` long if given."""
    config = config.copy_and_resolve_references()
    config.log.tensorboard = False
    config.log.console = "lines"
    config.log.console_every_s = 1e9
    if updates is not None:
        steps_per_update = config.env.num_envs * config.agent.num_steps
        config.total_timesteps = updates * steps_per_update
    return config


@contextlib.contextmanager
def stdout_to_stderr():
    """A run's console lines go to stderr: stdout is the tables (record_output.py)."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def random_actions(action_spec, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Uniform random actions [*shape, ...] of any action spec."""
    if isinstance(action_spec, spaces.Discrete):
        return rng.integers(0, action_spec.num_actions, shape, dtype=np.int32)
    if isinstance(action_spec, spaces.MultiDiscrete):
        nvec = np.asarray(action_spec.nvec)
        return rng.integers(0, nvec, (*shape, len(nvec)), dtype=np.int32)
    low = np.reshape(action_spec.low, action_spec.shape)
    high = np.reshape(action_spec.high, action_spec.shape)
    return rng.uniform(low, high, (*shape, *action_spec.shape)).astype(np.float32)


def fastest(calls: dict, repeats: int) -> dict:
    """Seconds of the fastest of `repeats` calls of each `calls[name]()` (which carries
    its own state from call to call and returns what to wait for), after one untimed call
    of each. The calls take turns, round by round, so that a burst of load falls on all
    alike; the fastest call is the one the machine's other work disturbed least (on a
    shared machine the median moves with the neighbours' load, the minimum much less)."""
    for call in calls.values():
        jax.block_until_ready(call())
    times = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            jax.block_until_ready(call())
            times[name].append(time.perf_counter() - start)
    return {name: min(seconds) for name, seconds in times.items()}


def _compile(fn, *args, donate_argnums=(), devices=None):
    """`jax.jit(fn)` compiled ahead of time with the learner's CPU options (as the runner
    compiles its program), and the seconds compiling took."""
    start = time.perf_counter()
    lowered = jax.jit(fn, donate_argnums=donate_argnums).lower(*args)
    options = update_compiler_options(devices or jax.devices())
    compiled = lowered.compile(compiler_options=options or None)
    return compiled, time.perf_counter() - start


# Ceiling ----------------------------------------------------------------------------------


def env_only_call(env, num_envs: int, num_steps: int, seed: int):
    """A call stepping `num_envs` JAX envs `num_steps` times in one jitted scan (random
    actions drawn up front, the runner's env keys), and the seconds compiling it took."""
    rng = np.random.default_rng(seed)
    actions = jnp.asarray(random_actions(env.spec.action, (num_steps, num_envs), rng))
    env_ids = jnp.arange(num_envs, dtype=jnp.int32)

    def program(envs, total_reward, actions, call):
        def body(carry, xs):
            envs, total_reward = carry
            t, step_actions = xs
            # The runner's env keys (one fold-in per step and env), as a rollout draws them.
            keys = random_streams.jax_env_keys(seed, call * num_steps + t + 1, env_ids)
            envs, step = step_envs(env, envs, step_actions, keys)
            return (envs, total_reward + jnp.sum(step.reward)), None

        steps = jnp.arange(num_steps, dtype=jnp.int32)
        return jax.lax.scan(body, (envs, total_reward), (steps, actions))[0]

    envs = jax.jit(lambda keys: reset_envs(env, keys))(
        random_streams.jax_env_keys(seed, jnp.int32(0), env_ids)
    )
    total = jnp.zeros((), jnp.float32)
    compiled, compile_s = _compile(program, envs, total, actions, jnp.int32(0), donate_argnums=0)
    carry = {"state": (envs, total), "call": 0}

    def call():
        carry["call"] += 1
        carry["state"] = compiled(*carry["state"], actions, np.int32(carry["call"]))
        return carry["state"]

    return call, compile_s


def ceilings(env, batch_sizes: list[int], num_steps: int, seed: int, repeats: int) -> dict:
    """Env-only steps/s for each batch size (their calls interleaved)."""
    calls, compile_s = {}, {}
    for num_envs in batch_sizes:
        calls[num_envs], compile_s[num_envs] = env_only_call(env, num_envs, num_steps, seed)
    seconds = fastest(calls, repeats)
    return {
        num_envs: {
            "num_envs": num_envs,
            "num_steps": num_steps,
            "seconds_per_call": seconds[num_envs],
            "sps": num_envs * num_steps / seconds[num_envs],
            "compile_s": compile_s[num_envs],
        }
        for num_envs in batch_sizes
    }


def print_ceiling(rows: list[dict]) -> None:
    T = rows[0]["num_steps"]
    print(f"### Env-only ceiling: one jitted scan of T = {T} steps, random actions\n")
    print("| envs (B) | env steps per call | env steps/s | µs per scan step | compile |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['num_envs']:,} | {row['num_envs'] * row['num_steps']:,} "
            f"| {row['sps']:,.0f} | {row['seconds_per_call'] / T * 1e6:,.1f} "
            f"| {row['compile_s']:.1f} s |"
        )
    print()


# End to end -------------------------------------------------------------------------------


def _summary(workdir: str) -> dict:
    with open(os.path.join(workdir, "summary.json"), encoding="utf-8") as f:
        return json.load(f)


def make_runner(config, setup, seed: int) -> AnakinRunner:
    return AnakinRunner(
        setup.agent,
        setup.layout,
        setup.sizes,
        setup.jax_env,
        setup.env_spec,
        seed=seed,
        policy_lag=config.pipeline.policy_lag,
        clip_rewards=config.env.clip_rewards,
        updates_per_call=config.pipeline.updates_per_call,
    )


def _stacked(tree, copies: int | None):
    return tree if copies is None else jax.tree.map(lambda x: jnp.stack([x] * copies), tree)


def part_calls(config, setup, copies: int | None = None) -> tuple[dict, dict]:
    """Calls of the rollout alone (`collect`: policy and env steps, fixed parameters) and
    the agent's update alone (on the latest rollout, its state carried from call to
    call), for seed `config.seed`, or `vmap`-ed over `copies` copies of it; and the
    seconds compiling each took."""
    agent, devices = setup.agent, setup.layout.local_learner_devices
    runner = make_runner(config, setup, config.seed)
    collect_fn, update_fn = runner.collect, agent.update
    if copies is not None:
        collect_fn = jax.vmap(runner.collect, in_axes=(0, 0, None))
        update_fn = jax.vmap(agent.update)
    state = train.init_learner_state(setup)
    # A copy: the update below donates its state, which the parameters may alias.
    params = _stacked(jax.tree.map(jnp.copy, agent.policy_params(state)), copies)
    acting = _stacked(runner.initial_acting_state(), copies)
    compile_s = {}
    collect, compile_s["collect"] = _compile(
        collect_fn, params, acting, jnp.int32(1), devices=devices
    )
    rollouts = {"acting": acting, "update": 0}

    def rollout():
        rollouts["update"] += 1
        rollouts["acting"], rollouts["rollout"], episodes = collect(
            params, rollouts["acting"], np.int32(rollouts["update"])
        )
        return rollouts["rollout"], episodes

    jax.block_until_ready(rollout())
    learner = {"state": _stacked(state, copies)}
    update, compile_s["update"] = _compile(
        update_fn, learner["state"], rollouts["rollout"], donate_argnums=0, devices=devices
    )

    def learn():
        learner["state"], metrics = update(learner["state"], rollouts["rollout"])
        return metrics

    return {"collect": rollout, "update": learn}, compile_s


def program_call(config, setup, seed: int) -> tuple:
    """A call of the runner's compiled act-and-learn program (`compile_update`), called as
    `AnakinRunner.run` calls it; and the seconds compiling it took."""
    runner = make_runner(config, setup, seed)
    state = train.init_learner_state(setup)
    start = time.perf_counter()
    program = runner.compile_update(state)
    compile_s = time.perf_counter() - start
    behaviour = None
    if config.pipeline.policy_lag:
        params = setup.agent.policy_params(state)
        behaviour = jax.device_put(params, setup.layout.replicated, may_alias=False)
    loop = {"args": (state, behaviour, runner.initial_acting_state()), "update": 1}
    per_call = runner.updates_per_call

    def act_and_learn():
        # A whole block of `pipeline.updates_per_call` updates, as the host loop calls it.
        count = np.int32(per_call)
        *args, metrics, episodes = program(*loop["args"], np.int32(loop["update"]), count)
        loop["args"] = tuple(args)
        loop["update"] += per_call
        return metrics, episodes

    return act_and_learn, compile_s


def parts_of_an_update(config, repeats: int) -> dict:
    """Seconds per update of the env alone (the ceiling at the config's B), the rollout
    alone, the agent's update alone and the act-and-learn program, each back to back with
    no host work, their calls interleaved; and their compile times."""
    setup = train.prepare(config)
    sizes = setup.sizes
    env, compile_s = {}, {}
    env["env"], compile_s["env"] = env_only_call(
        setup.jax_env, sizes.num_envs, sizes.num_steps, config.seed
    )
    calls, compiled = part_calls(config, setup)
    compile_s.update(compiled)
    calls["program"], compile_s["program"] = program_call(config, setup, config.seed)
    seconds = fastest({**env, **calls}, repeats)
    seconds["program"] /= config.pipeline.updates_per_call  # Per update, as the others.
    return {"seconds": seconds, "compile_s": compile_s}


@contextlib.contextmanager
def timing_the_program(seconds: list):
    """Within: every AnakinRunner's compiled program appends each call's seconds (up to
    its outputs being ready, which the host loop waits for anyway) and the number of
    updates it ran to `seconds`."""
    original = AnakinRunner.compile_update

    def compile_update(self, state):
        compiled = original(self, state)

        def timed_call(*args):
            start = time.perf_counter()
            outputs = jax.block_until_ready(compiled(*args))
            seconds.append((time.perf_counter() - start, int(args[4])))
            return outputs

        self._compiled = timed_call  # What `AnakinRunner.run` calls.
        return compiled

    AnakinRunner.compile_update = compile_update
    try:
        yield
    finally:
        AnakinRunner.compile_update = original


def train_steady_state(config, updates: int, program_alone_s: float) -> dict:
    """`sebulba.train.train` for `updates` updates, timed after its first program call
    (update 1, or the first block of `pipeline.updates_per_call`): per update, the time
    between two updates' reports, the program's calls within it and the rest (the host
    loop); the run's summary and the call's time.

    With one update per call each call is timed (waited for: nothing overlaps it then).
    With several, the runner makes a block's reports while the next block runs, which a
    timed (waited-for) call would undo: the program's share is then `program_alone_s`,
    the program back to back, and the rest is the host work the overlap does not hide."""
    config = quiet_config(config, updates)
    per_call = config.pipeline.updates_per_call
    ends, programs = [], []  # When each update's report reached the host loop; each call.
    every = config.ckpt.every_updates
    _, first_call = next(
        update_blocks(1, updates, per_call, lambda u: bool(every) and u % every == 0)
    )
    with (
        tempfile.TemporaryDirectory() as workdir,
        stdout_to_stderr(),
        timing_the_program(programs) if per_call == 1 else contextlib.nullcontext(),
    ):
        start = time.perf_counter()
        train.train(
            config, workdir, on_update=lambda report, state: ends.append(time.perf_counter())
        )
        wall = time.perf_counter() - start
        summary = _summary(workdir)
    # From the last report of the first call on (that call also ran the first update).
    counted = len(ends) - first_call
    update_s = (ends[-1] - ends[first_call - 1]) / counted
    program_s = program_alone_s
    if programs:
        program_s = sum(seconds for seconds, _ in programs[1:]) / counted
    return {
        "summary": summary,
        "call_s": wall,
        "block": counted,
        "update_s": update_s,
        "program_s": program_s,
        "program_timed_in_run": bool(programs),
        "host_s": update_s - program_s,
    }


def print_end_to_end(config, parts: dict, trained: dict, updates: int) -> None:
    B, T = config.env.num_envs, config.agent.num_steps
    steps = B * T
    seconds, compile_s = parts["seconds"], parts["compile_s"]
    env_s, program_s = seconds["env"], seconds["program"]
    print(f"### End to end at B = {B}, T = {T} ({steps:,} env steps per update)\n")
    print(
        "One update taken apart: each part back to back with no host work, the parts' "
        "calls interleaved (the fastest of each):\n"
    )
    print(
        "| part | ms per update | env steps/s | share of the env-only ceiling "
        "| share of the program's time |"
    )
    print("|---|---|---|---|---|")
    for name, row_s in (
        ("env only (the ceiling at this B)", env_s),
        ("rollout alone (`AnakinRunner.collect`: policy + env)", seconds["collect"]),
        ("update alone (`agent.update` on one rollout)", seconds["update"]),
        ("act-and-learn program (`compile_update`)", program_s),
    ):
        print(
            f"| {name} | {row_s * 1e3:.2f} | {steps / row_s:,.0f} | {env_s / row_s:.2f} "
            f"| {row_s / program_s:.0%} |"
        )
    print()
    policy_s = seconds["collect"] - env_s
    fused_s = program_s - seconds["collect"] - seconds["update"]
    print("| the act-and-learn program's time | ms | share |\n|---|---|---|")
    for name, part_s in (
        ("env steps (env only)", env_s),
        ("policy steps and building the rollout (rollout alone - env only)", policy_s),
        ("the agent's update (update alone)", seconds["update"]),
        ("one program instead of two (program - rollout alone - update alone)", fused_s),
    ):
        print(f"| {name} | {part_s * 1e3:+.2f} | {part_s / program_s:+.0%} |")
    print()
    summary, update_s = trained["summary"], trained["update_s"]
    print(
        f"`sebulba.train.train`, {updates} updates, the last {trained['block']} timed "
        f"(after its first program call; {config.pipeline.updates_per_call} update(s) per "
        "call); per update: the time between two updates' reports, the program's calls "
        "within it, and the rest:\n"
    )
    print("| per update of a run | ms | env steps/s | share of the env-only ceiling | share |")
    print("|---|---|---|---|---|")
    program_row, host_row = (
        ("the act-and-learn program's call", "the host loop (episodes read back, metrics)")
        if trained["program_timed_in_run"]
        else (
            "the act-and-learn program alone (back to back, above)",
            "the rest: host work the next block does not hide",
        )
    )
    for name, row_s, steps_run in (
        ("end to end (`train.train`)", update_s, True),
        (program_row, trained["program_s"], True),
        (host_row, trained["host_s"], False),
    ):
        sps = f"{steps / row_s:,.0f} | {env_s / row_s:.2f}" if steps_run else "- | -"
        print(f"| {name} | {row_s * 1e3:.2f} | {sps} | {row_s / update_s:.0%} |")
    print()
    print(
        f"Compile: env only {compile_s['env']:.1f} s, rollout {compile_s['collect']:.1f} s, "
        f"update {compile_s['update']:.1f} s, act-and-learn program "
        f"{compile_s['program']:.1f} s. train.train's call took {trained['call_s']:.1f} s; "
        f"its summary: {summary['sps']:,.0f} env steps/s (mean after update 1), "
        f"{summary['sps_including_compile']:,.0f} including update 1.\n"
    )


# Seeds ------------------------------------------------------------------------------------


def _metrics_lines(workdir: str) -> list[dict]:
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _compared(line: dict) -> dict:
    """A metrics line's learning figures (not its times, waits or step counts)."""
    timing = ("sps", "wall", "wait", "global_step", "update", "policy_version")
    return {
        key: value
        for key, value in line.items()
        if isinstance(value, float) and not any(word in key for word in timing)
    }


def first_difference(alone: list[dict], together: list[dict]) -> dict:
    """Where two runs' metrics.jsonl first differ: the first logged update with any
    different figure and the largest relative difference there; the first logged update
    with a different episodic return (None where they never differ)."""
    metrics_update = largest = returns_update = None
    for a, b in zip(alone, together, strict=True):
        x, y = _compared(a), _compared(b)
        differing = [k for k in x if x[k] != y.get(k)]
        if differing and metrics_update is None:
            metrics_update = a["update"]
            largest = max(
                abs(x[k] - y[k]) / max(abs(x[k]), abs(y[k]), 1e-30)
                for k in differing
                if x[k] is not None and y.get(k) is not None
            )
        if a.get("episodic_return") != b.get("episodic_return") and returns_update is None:
            returns_update = a["update"]
    return {"metrics": metrics_update, "largest": largest, "returns": returns_update}


def max_relative_difference(a, b) -> float:
    """Largest, over parameter arrays, of max|a - b| / max|b|."""

    def relative(x, y):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        return float(np.max(np.abs(x - y)) / max(np.max(np.abs(y)), 1e-30))

    return max(jax.tree.leaves(jax.tree.map(relative, a, b)), default=0.0)


def vmapped_program_call(config, setup, seeds: list[int]):
    """A call of the seeds' vmapped act-and-learn program (`SeedBatch.lower`, as
    `train_seeds` calls it)."""
    batch = SeedBatch(config, setup, seeds)
    state = train.init_learner_state(setup)  # The same start for every seed: only timed.
    states = jax.device_put(_stacked(state, len(seeds)), setup.layout.replicated)
    behaviours = None
    if config.pipeline.policy_lag:
        params = _stacked(setup.agent.policy_params(state), len(seeds))
        behaviours = jax.device_put(params, setup.layout.replicated)
    actings = batch.initial_acting_states()
    program = batch.compile(batch.lower(states, behaviours, actings))
    seed_array = jax.device_put(np.asarray(seeds, np.int32), setup.layout.replicated)
    loop = {"args": (states, behaviours, actings), "update": 1}
    per_call = config.pipeline.updates_per_call

    def act_and_learn():
        update, count = np.int32(loop["update"]), np.int32(per_call)
        *args, metrics, episodes = program(*loop["args"], update, count, seed_array, {})
        loop["args"] = tuple(args)
        loop["update"] += per_call
        return metrics, episodes

    return act_and_learn


def seed_scaling(config, seeds: list[int], repeats: int) -> dict:
    """Seconds per update, for one seed and vmapped over the S seeds, of the rollout alone,
    the update alone (both vmapped over S copies of one seed's inputs) and the
    act-and-learn program (one seed's `compile_update`, the seeds' `SeedBatch`); the six
    calls interleaved."""
    setup = train.prepare(config)
    one, _ = part_calls(config, setup)
    many, _ = part_calls(config, setup, copies=len(seeds))
    one["program"], _ = program_call(config, setup, config.seed)
    many["program"] = vmapped_program_call(config, setup, seeds)
    calls = {**{(k, 1): v for k, v in one.items()}, **{(k, len(seeds)): v for k, v in many.items()}}
    seconds = fastest(calls, repeats)
    for copies in (1, len(seeds)):  # A program call runs a block: per update, as the others.
        seconds["program", copies] /= config.pipeline.updates_per_call
    return seconds


def fastest_stretch(lines: list[dict], every_updates: int, updates_per_call: int) -> float:
    """Seconds per update of the fastest stretch between two metrics lines a stretch apart.

    A stretch is a whole number of metrics lines and of program calls, lcm(every_updates,
    updates_per_call) updates from one multiple of it to the next (update 1 is outside):
    the lines of one call are all written once it returns, so only lines at call
    boundaries time the calls between them."""
    stretch = math.lcm(every_updates, updates_per_call)
    by_update = {line["update"]: line for line in lines}
    return min(
        (by_update[update + stretch]["wall_time_s"] - line["wall_time_s"]) / stretch
        for update, line in by_update.items()
        if update % stretch == 0 and update + stretch in by_update
    )


def seeds_comparison(config, seeds: list[int], warm_up: bool, repeats: int) -> dict:
    """The seeds one after the other (`train.train`) and as one program (`train_seeds`);
    first a short warm-up run unless `warm_up` is False (this process ran one already).
    Then the two programs alone, interleaved."""
    config = quiet_config(config)
    agent = train.prepare(config).agent
    with tempfile.TemporaryDirectory() as root, stdout_to_stderr():
        if warm_up:
            # The process's one-time costs (first compilations, checkpointing's start-up)
            # are paid here, by neither of the timed runs.
            short = quiet_config(config, updates=2)
            short.seed = max(seeds) + 1
            train.train(short, os.path.join(root, "warm_up"))
        alone, alone_params, alone_lines = {}, {}, {}
        start_all = time.perf_counter()
        for seed in seeds:
            seeded = config.copy_and_resolve_references()
            seeded.seed = seed
            workdir = os.path.join(root, "alone", f"seed={seed}")
            state = train.train(seeded, workdir)
            alone[seed] = _summary(workdir)
            alone_lines[seed] = _metrics_lines(workdir)
            alone_params[seed] = jax.device_get(agent.policy_params(state))
        alone_wall = time.perf_counter() - start_all
        start = time.perf_counter()
        finals = train_seeds(config, os.path.join(root, "vmapped"), seeds)
        vmapped_wall = time.perf_counter() - start
        vmapped, vmapped_lines, differences = {}, {}, {}
        for seed, final in zip(seeds, finals, strict=True):
            workdir = seed_workdir(os.path.join(root, "vmapped"), seed)
            vmapped[seed] = _summary(workdir)
            vmapped_lines[seed] = _metrics_lines(workdir)
            differences[seed] = {
                "params": max_relative_difference(
                    jax.device_get(agent.policy_params(final)), alone_params[seed]
                ),
                **first_difference(alone_lines[seed], vmapped_lines[seed]),
            }
    per_call = config.pipeline.updates_per_call
    return {
        "alone": alone,
        "alone_wall_s": alone_wall,
        "vmapped": vmapped,
        "vmapped_wall_s": vmapped_wall,
        "differences": differences,
        # Per update of the fastest stretch of whole calls: each run alone, and the one
        # program (every seed's line is written after the same update).
        "alone_update_s": {
            s: fastest_stretch(alone_lines[s], config.log.every_updates, per_call) for s in seeds
        },
        "vmapped_update_s": fastest_stretch(
            vmapped_lines[seeds[0]], config.log.every_updates, per_call
        ),
        "steps_per_update": config.env.num_envs * config.agent.num_steps,
        "scaling": seed_scaling(config, seeds, repeats),
    }


def print_seeds(result: dict, seeds: list[int]) -> None:
    S = len(seeds)
    alone, vmapped = result["alone"], result["vmapped"]
    first = alone[seeds[0]]
    updates, steps = first["updates"], first["global_step"]
    spu = result["steps_per_update"]
    alone_update = sum(result["alone_update_s"].values())  # One update of every seed.
    vmapped_update = result["vmapped_update_s"]
    alone_wall, vmapped_wall = result["alone_wall_s"], result["vmapped_wall_s"]
    print(
        f"### {S} seeds ({', '.join(map(str, seeds))}) of the full config, {updates} updates "
        f"and {steps:,} env steps each\n"
    )
    print(
        "One after the other: `sebulba.train.train` per seed, in this process; one program: "
        "`sebulba.anakin.seeds.train_seeds`. Both after a warm-up run; every program "
        "compiles (no persistent cache). Steady state: one update of every seed, from "
        "metrics.jsonl's wall times, the fastest stretch of whole program calls between two "
        "metrics lines of each run.\n"
    )
    print(
        "| how | wall time (start-up, compiling, checkpoints included) | env steps/s, all "
        "seeds, wall | steady state: one update of every seed | env steps/s, all seeds, "
        "steady |"
    )
    print("|---|---|---|---|---|")
    for name, wall, update_s in (
        ("one after the other", alone_wall, alone_update),
        ("one vmapped program", vmapped_wall, vmapped_update),
    ):
        print(
            f"| {name} | {wall:.1f} s | {S * steps / wall:,.0f} | {update_s * 1e3:.2f} ms "
            f"| {S * spu / update_s:,.0f} |"
        )
    print(
        f"| speed-up of one program | {alone_wall / vmapped_wall:.2f}x | | "
        f"{alone_update / vmapped_update:.2f}x | |\n"
    )
    scaling = result["scaling"]
    print(
        f"Where the speed-up comes from: each part alone for one seed and vmapped over {S} "
        "seeds (rollout and update over copies of one seed's inputs; the program as "
        "`train_seeds` runs it), the six calls interleaved, the fastest of each:\n"
    )
    print(
        f"| per update | 1 seed | {S} seeds in one program | {S} seeds / 1 seed "
        f"| speed-up over {S} calls of 1 seed |"
    )
    print("|---|---|---|---|---|")
    for key, name in (
        ("collect", "rollout alone (`collect`)"),
        ("update", "update alone (`agent.update`)"),
        ("program", "act-and-learn program"),
    ):
        one, many = scaling[(key, 1)], scaling[(key, S)]
        print(
            f"| {name} | {one * 1e3:.2f} ms | {many * 1e3:.2f} ms | {many / one:.2f} "
            f"| {S * one / many:.2f}x |"
        )
    print()
    print(
        "| seed | mean return: alone, in one program | params_checksum: alone, in one "
        "program | metrics first differ (largest relative difference) | episode returns "
        "first differ | final parameters: max relative difference |"
    )
    print("|---|---|---|---|---|---|")
    for seed in seeds:
        a, v, d = alone[seed], vmapped[seed], result["differences"][seed]
        same = a["params_checksum"] == v["params_checksum"]
        checksums = f"`{a['params_checksum'][:12]}`, `{v['params_checksum'][:12]}`"
        metrics = "never" if d["metrics"] is None else f"update {d['metrics']} ({d['largest']:.1g})"
        returns = "never" if d["returns"] is None else f"update {d['returns']}"
        print(
            f"| {seed} | {a['mean_return']:.1f}, {v['mean_return']:.1f} "
            f"| {checksums}{' (same)' if same else ''} | {metrics} | {returns} "
            f"| {d['params']:.2g} |"
        )
    print()


# Main -------------------------------------------------------------------------------------


def main() -> None:
    parser = benchmark_parser(__doc__, default=DEFAULT_CONFIG)
    parser.add_argument(
        "--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}"
    )
    parser.add_argument(
        "--batch_sizes", default="64,256,1024,4096", help="ceiling: env batches beside the config's"
    )
    parser.add_argument("--repeats", type=int, default=100, help="timed calls per measurement")
    parser.add_argument("--updates", type=int, default=300, help="end_to_end: train.train's")
    parser.add_argument("--seeds", default="1,2,3,4,5", help="seeds: trained both ways")
    args = parser.parse_args()
    sections = args.sections.split(",")
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        parser.error(f"--sections: unknown {sorted(unknown)}; choose from {SECTIONS}")
    config = load_config(args.config)
    apply_overrides(config, args.set)
    config = quiet_config(config)
    setup = train.prepare(config)
    if setup.jax_env is None:
        parser.error(f"env.id {config.env.id!r} is not a JAX env (SUITE:TASK): not Anakin")
    B, T = setup.sizes.num_envs, setup.sizes.num_steps
    devices = jax.devices()
    print(
        f"{config.agent.name} {config.env.id}, {B} envs x {T} steps per update, "
        f"{setup.sizes.num_updates} updates; policy_lag {config.pipeline.policy_lag}; "
        f"jax {jax.__version__}, {len(devices)} {jax.default_backend()} device(s), "
        f"{os.cpu_count()} cores\n"
    )
    if "ceiling" in sections:
        batches = sorted({B, *(int(b) for b in args.batch_sizes.split(",") if b)})
        rows = ceilings(setup.jax_env, batches, T, config.seed, args.repeats)
        print_ceiling(list(rows.values()))
    if "end_to_end" in sections:
        parts = parts_of_an_update(config, args.repeats)
        trained = train_steady_state(config, args.updates, parts["seconds"]["program"])
        print_end_to_end(config, parts, trained, args.updates)
    if "seeds" in sections:
        seeds = [int(s) for s in args.seeds.split(",")]
        warm_up = "end_to_end" not in sections
        result = seeds_comparison(config, seeds, warm_up, args.repeats)
        print_seeds(result, seeds)


if __name__ == "__main__":
    main()
