"""Many seeds of one Anakin run as one program: the act-and-learn step `vmap`-ed over seeds.

    python -m sebulba.main --config=configs/ppo_cartpole_anakin.py --workdir=runs/cp \
        --seeds=1,2,3,4,5

trains seeds 1-5 together and writes `runs/cp/seed=1`, ..., `runs/cp/seed=5`, each the
complete workdir a run of that seed alone writes (config.json with its seed, metrics,
summary, checkpoints; `sebulba.evaluate` and `load_policy` read it as any other), the
same layout `python -m sebulba.sweep --seeds` gives a sweep's runs. Each seed keeps its
own random streams: the agent is rebuilt inside the traced program with the seed as a
traced value (an agent draws its randomness from `config.seed` through
`sebulba.random_streams`), and the runner's actor and env keys take it the same way. So
every seed draws the keys it draws alone and its first update matches a lone run's; the
batched matrix products then round differently, and over hundreds of updates a seed's
trajectory drifts from its lone run's as a rerun on other hardware would (same learning,
not the same bits: docs/benchmarks.md, "Anakin"). A vmapped run is itself reproducible:
the same seeds give the same checksums. A stop (SIGTERM, Ctrl-C) checkpoints every seed
after the same update, and the same command resumes them together.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging
from jax.sharding import PartitionSpec

from sebulba import checkpoint as ckpt_lib
from sebulba.agents import resolve_agent
from sebulba.anakin.runner import AnakinRunner, block_reports, repeat_updates, update_blocks
from sebulba.config import resume as resume_config
from sebulba.config.run_plan import plan
from sebulba.errors import ConfigError
from sebulba.mesh import BATCH_AXIS
from sebulba.pbt import settings as pbt_settings
from sebulba.preflight import memory
from sebulba.preflight.memory import update_compiler_options
from sebulba.runtime import compile_progress
from sebulba.runtime import workdir as workdir_lib


def seed_workdir(workdir: str, seed: int) -> str:
    """Where seed `seed` of a vmapped run writes: `WORKDIR/seed=<seed>`."""
    return os.path.join(workdir, f"seed={seed}")


def check_seeds(seeds: Sequence[int]) -> tuple[int, ...]:
    """The seeds as a tuple; raises ConfigError unless they are distinct integers."""
    seeds = tuple(seeds)
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise ConfigError(f"--seeds must be a list of integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds must be distinct, got {seeds!r}")
    return seeds


def _with_seed(
    config: ml_collections.ConfigDict, seed, hyperparameters: dict | None = None
) -> ml_collections.ConfigDict:
    # Not type-safe: inside the traced program the seed (and a population member's
    # hyperparameters, `agent.<name>`) are traced numbers.
    copy = ml_collections.ConfigDict(config.to_dict(), type_safe=False)
    copy.seed = seed
    for name, value in (hyperparameters or {}).items():
        copy.agent[name] = value
    return copy


class SeedBatch:
    """The act-and-learn step of one config, `vmap`-ed over a leading seed axis.

    Stacked learner states [S, ...] are placed as the agent places one seed's state
    (`Agent.partition_specs`) with the seed axis in front, so a replay buffer stays split
    along its env axis; behaviour parameters are replicated; stacked acting states are
    [S, B, ...], split along B over the learner mesh like a single run's.
    """

    def __init__(self, config: ml_collections.ConfigDict, setup, seeds: Sequence[int]):
        self.config, self.setup, self.seeds = config, setup, tuple(seeds)
        self.agent_module = resolve_agent(config.agent.name, config.agent)

    def _runner(self, seed, agent=None, hyperparameters=None) -> AnakinRunner:
        setup = self.setup
        if agent is None:
            agent = self.agent_module.make(
                _with_seed(self.config, seed, hyperparameters), setup.env_spec, setup.sizes
            )
        return AnakinRunner(
            agent,
            setup.layout,
            setup.sizes,
            setup.jax_env,
            setup.env_spec,
            seed=seed,
            policy_lag=self.config.pipeline.policy_lag,
            clip_rewards=self.config.env.clip_rewards,
        )

    def _acting_sharding(self, leaf) -> jax.sharding.NamedSharding:
        # [S, B, ...]: B split over the learner devices as a single run splits it, and a
        # joint run's task block that does not split evenly held whole by each, as the
        # single runner holds it (`AnakinRunner._env_sharding`).
        if leaf.shape[1] % self.setup.layout.learner_mesh.size:
            return self.setup.layout.replicated
        return self.setup.layout.sharding(PartitionSpec(None, BATCH_AXIS))

    def initial_acting_states(self):
        """Every seed's envs reset, stacked [S, B, ...]."""

        def initial(seed):
            return self._runner(seed)._initial_acting(None)

        seeds = jnp.asarray(self.seeds, jnp.int32)
        # Jitted and inlined, so that the shapes and the placed program reuse one trace of
        # every seed's resets (the program is the same as tracing them twice).
        reset_all = jax.jit(jax.vmap(initial), inline=True)
        out = jax.tree.map(self._acting_sharding, jax.eval_shape(reset_all, seeds))
        return jax.jit(reset_all, out_shardings=out)(seeds)

    def state_shardings(self, state):
        """Shardings of the stacked learner states, given one seed's state (or its shapes)."""
        layout = self.setup.layout
        return jax.tree.map(
            lambda spec: layout.sharding(PartitionSpec(None, *spec)),
            self.setup.agent.partition_specs(state),
        )

    def abstract_acting_state(self):
        """One seed's acting state (shapes and shardings), to restore its checkpoint."""
        return self._runner(self.seeds[0], self.setup.agent).abstract_acting_state()

    def _step(self, state, behaviour, acting, update, seed, hyperparameters):
        runner = self._runner(seed, hyperparameters=hyperparameters)
        return runner.act_and_learn(state, behaviour, acting, update)

    def lower(self, states, behaviours, actings, hyperparameters=None):
        """The vmapped step, traced and lowered for the stacked arguments (`compile` it).

        `hyperparameters` ({agent key: [S] float32}, a population's): each seed's agent
        reads its own values, traced, so new values need no new program.

        Raises:
          ConfigError: a hyperparameter the agent uses as a Python number (a shape, a
            branch), which no traced value can stand for.
        """
        hyperparameters = hyperparameters or {}
        # The block's loop runs outside the vmap: every seed runs the same updates.
        batched = repeat_updates(
            jax.vmap(self._step, in_axes=(0, 0, 0, None, 0, 0)),
            self.setup.config.pipeline.updates_per_call,
        )
        replicated = self.setup.layout.replicated
        shardings = (
            self.state_shardings(_one_seed_shapes(states)),
            jax.tree.map(lambda _: replicated, behaviours),
            jax.tree.map(self._acting_sharding, actings),
        )
        jitted = jax.jit(
            batched,
            in_shardings=(*shardings, replicated, replicated, replicated, replicated),
            out_shardings=(*shardings, replicated, replicated),
            donate_argnums=(0, 1, 2),
        )
        seeds = jnp.asarray(self.seeds, jnp.int32)
        one = jnp.int32(1)
        try:
            lowered = jitted.lower(states, behaviours, actings, one, one, seeds, hyperparameters)
        except _TRACED_VALUE_ERRORS:
            if not hyperparameters:
                raise
            self._name_untraceable(states, behaviours, actings, hyperparameters)
            raise
        return lowered

    def compile(self, lowered):
        """The program `lower` traced, compiled ahead of time."""
        options = update_compiler_options(self.setup.layout.local_learner_devices)
        return lowered.compile(compiler_options=options or None)

    def _name_untraceable(self, states, behaviours, actings, hyperparameters) -> None:
        """Raises ConfigError naming the first hyperparameter the agent cannot trace."""
        step = jax.vmap(self._step, in_axes=(0, 0, 0, None, 0, 0))
        seeds = jnp.asarray(self.seeds, jnp.int32)
        for name, values in hyperparameters.items():
            try:
                jax.eval_shape(step, states, behaviours, actings, 1, seeds, {name: values})
            except _TRACED_VALUE_ERRORS as error:
                reason = str(error).strip().splitlines()[0]
                raise ConfigError(
                    f"pbt.hyperparameters: agent.{name} cannot change inside the compiled "
                    f"program: agent {self.config.agent.name!r} uses it as a Python number "
                    f"({reason})"
                ) from None

    def exploit(self, tree, sources: np.ndarray):
        """`tree` (stacked [S, ...]) with seed i's slice replaced by seed `sources[i]`'s."""
        if tree is None:
            return None
        shardings = jax.tree.map(lambda x: x.sharding, tree)
        taken = _take_sources(tree, jax.device_put(sources, self.setup.layout.replicated))
        return jax.device_put(taken, shardings)


@functools.partial(jax.jit, donate_argnums=0)
def _take_sources(tree, sources):
    # A gather along the seed axis, which no device splits: nothing moves between devices.
    return jax.tree.map(lambda x: x[sources], tree)


# What tracing raises where an agent needs a Python number (a tracer made concrete).
_TRACED_VALUE_ERRORS = (jax.errors.ConcretizationTypeError, TypeError)


def _stack(trees, shardings):
    """The trees stacked along a new leading axis, placed with `shardings`: a tree like
    the stacked one, or one function of each stacked leaf."""
    if trees[0] is None:
        return None
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *trees)
    if callable(shardings):
        shardings = jax.tree.map(shardings, stacked)
    return jax.tree.map(jax.device_put, stacked, shardings)


def _one_seed_shapes(stacked):
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), stacked)


def _take(tree, index: int):
    return jax.tree.map(lambda x: x[index], tree)


def seeded_configs(
    config: ml_collections.ConfigDict, seeds: Sequence[int], workdirs: Sequence[str]
) -> list[ml_collections.ConfigDict]:
    """`config` once per seed, each checked against its workdir (writable, and a resume's
    stored config) before any work.

    Raises:
      ConfigError: a workdir that cannot hold a run, or a resume with another config.
    """
    configs = []
    for seed, path in zip(seeds, workdirs, strict=True):
        seeded = ml_collections.ConfigDict(config.to_dict())
        seeded.seed = seed
        workdir_lib.check_workdir(path)
        resume_config.check(seeded, path)
        configs.append(seeded)
    return configs


def train_seeds(
    config: ml_collections.ConfigDict,
    workdir: str,
    seeds: Sequence[int],
    stop_signals: ckpt_lib.StopSignals | None = None,
) -> list:
    """Trains `config` once per seed, as one vmapped program; returns the final states.

    Raises:
      ConfigError: before any work, for a config that is not an Anakin run, bad seeds, a
        bad seed workdir (one another run holds included), or seed workdirs that stopped
        after different updates.
    """
    started_at = time.perf_counter()  # Every seed's wall time counts start-up and compiling.
    seeds = check_seeds(seeds)
    if pbt_settings.in_one_program(config):
        raise ConfigError(
            "--seeds and pbt.population both make a batch of runs: a population's members "
            "take seeds seed, seed + 1, ...; drop --seeds (or set pbt.population=0)"
        )
    workdirs = [seed_workdir(workdir, seed) for seed in seeds]
    configs = seeded_configs(config, seeds, workdirs)
    # Process 0 holds them (from before compiling, in train_stacked).
    with workdir_lib.reserved(workdirs, check=jax.process_index() == 0):
        return train_stacked(config, workdir, seeds, configs, workdirs, stop_signals, started_at)


def train_stacked(
    config: ml_collections.ConfigDict,
    workdir: str,
    seeds: tuple[int, ...],
    configs: list[ml_collections.ConfigDict],
    workdirs: list[str],
    stop_signals: ckpt_lib.StopSignals | None,
    started_at: float,
    population: bool = False,
) -> list:
    """`train_seeds` once every seed's workdir and config have passed their first checks;
    with `population` the seeds are a population's members (`sebulba.anakin.population`)."""
    from sebulba import train as train_lib  # The run's phases; train imports anakin.

    with stop_signals or ckpt_lib.StopSignals() as signals:
        # The run's checks, then this command's own, before any env exists.
        first = plan(configs[0])
        if not first.is_anakin:
            raise ConfigError(
                f"--seeds trains the seeds in one program, which needs a JAX env (Anakin); "
                f"env.id {config.env.id!r} is an envpool task: use `python -m sebulba.sweep "
                "--seeds=...` to run its seeds one after the other"
            )
        setups = [train_lib.prepare(configs[0], first)]
        setups += [train_lib.prepare(seeded) for seeded in configs[1:]]
        batch = SeedBatch(config, setups[0], seeds)
        abstract_env_state = batch.abstract_acting_state()
        starts = [
            train_lib.restore_or_init(setup, path, abstract_env_state)
            for setup, path in zip(setups, workdirs, strict=True)
        ]
        first_updates = {start.first_update for start in starts}
        if len(first_updates) > 1:
            at = ", ".join(
                f"seed {s}: update {st.first_update - 1}"
                for s, st in zip(seeds, starts, strict=True)
            )
            raise ConfigError(
                f"the seeds' workdirs stopped after different updates ({at}): a vmapped run "
                "resumes its seeds together; run them separately to bring them level"
            )
        first_update = first_updates.pop()
        sizes = setups[0].sizes
        members = _population(config, sizes, starts) if population else None
        if first_update > sizes.num_updates:
            print(f"sebulba: nothing to do, every seed in {workdir} is complete", flush=True)
            return [start.state for start in starts]
        layout = setups[0].layout
        replicated = lambda _: layout.replicated  # noqa: E731 - a sharding chooser.
        states = _stack([start.state for start in starts], batch.state_shardings(starts[0].state))
        behaviours = None
        if config.pipeline.policy_lag:
            behaviours = _stack(
                [
                    start.previous_params
                    if start.previous_params is not None
                    # Updates 1 .. L + 1 collect with version 1 (stacking copies it).
                    else (setup.agent.policy_params(start.state),) * config.pipeline.policy_lag
                    for setup, start in zip(setups, starts, strict=True)
                ],
                replicated,
            )
        if starts[0].env_state is None:
            actings = batch.initial_acting_states()
        else:
            actings = _stack([start.env_state for start in starts], batch._acting_sharding)

        def hyperparameters():
            if members is None:
                return {}
            return jax.device_put(members.columns(), layout.replicated)

        what = f"the act-and-learn program of {len(seeds)} {'members' if population else 'seeds'}"
        with compile_progress.announced(what, show=jax.process_index() == 0):
            compiled = batch.compile(batch.lower(states, behaviours, actings, hyperparameters()))
        if not config.debug.skip_memory_check:
            # The whole batch's program: every seed's state, rollout and temporaries.
            memory.check_update_fits(compiled, (), layout.local_learner_devices, agent=config.agent)
        # A hyperparameter no member can change, or a batch that does not fit, has failed
        # by now with no workdir made.
        if jax.process_index() == 0:  # Every seed's workdir before any is written.
            for path in workdirs:
                workdir_lib.hold(path)
        logging.info("%d seeds in one program: %s", len(seeds), ", ".join(map(str, seeds)))
        outputs = [
            train_lib.open_outputs(
                setup, path, start, show_progress=index == 0, started_at=started_at
            )
            for index, (setup, path, start) in enumerate(zip(setups, workdirs, starts, strict=True))
        ]
        seeds_named = f"seeds {', '.join(map(str, seeds))}"
        outputs[0].print(
            train_lib.describe_run(config, sizes, workdir, seeds_named, member_dirs=population)
        )
        if members is not None:
            outputs[0].print(f"sebulba: population of {members.settings.describe()}")
        current = {"behaviours": behaviours, "actings": actings}
        checkpoints = [
            train_lib.RunCheckpoints(
                setup,
                path,
                metrics,
                signals,
                start,
                env_state=lambda i=i: _take(current["actings"], i),
                previous_params=(
                    (lambda i=i: _take(current["behaviours"], i))
                    if config.pipeline.policy_lag
                    else None
                ),
                extra_meta=None if members is None else lambda: {"pbt": members.state_dict()},
            )
            for i, (setup, path, metrics, start) in enumerate(
                zip(setups, workdirs, outputs, starts, strict=True)
            )
        ]
        seed_array = jax.device_put(np.asarray(seeds, np.int32), layout.replicated)
        policy_lag = config.pipeline.policy_lag
        step_due = (
            (lambda _: False)
            if members is None
            else (lambda update: members.settings.is_due(update, sizes.num_updates))
        )
        blocks = update_blocks(
            first_update,
            sizes.num_updates,
            config.pipeline.updates_per_call,
            lambda update: checkpoints[0].is_due(update) or step_due(update),
        )
        hyper = hyperparameters()
        try:
            for first, count in blocks:
                states, behaviours, actings, metrics, episodes = compiled(
                    states, behaviours, actings, np.int32(first), np.int32(count), seed_array, hyper
                )
                # [updates in the block, seeds, ...]
                metrics, episodes = jax.device_get((metrics, episodes))
                returned = time.perf_counter()  # Every seed's updates are timed by it.
                per_seed = [
                    list(block_reports(first, count, sizes, policy_lag, metrics, episodes, seed=i))
                    for i in range(len(seeds))
                ]
                last = first + count - 1
                if members is not None:
                    for i, reports in enumerate(per_seed):
                        for report in reports:  # The hyperparameters these updates used.
                            report.run_metrics = members.member_metrics(i)
                            members.record(i, report.episode_returns)
                    if step_due(last):
                        sources = members.step(last, last * sizes.steps_per_update)
                        if sources is not None:
                            states = batch.exploit(states, sources)
                            behaviours = batch.exploit(behaviours, sources)
                            hyper = hyperparameters()
                        outputs[0].print("sebulba: " + members.describe_step(last, sources))
                current.update(behaviours=behaviours, actings=actings)
                for index in range(count):
                    for i, saver in enumerate(checkpoints):
                        report = per_seed[i][index]
                        report.call_returned_at = returned
                        state = None  # Inside the block: see `RunCheckpoints.on_update`.
                        if index == count - 1:
                            state = lambda i=i, states=states: _take(states, i)  # noqa: E731
                        saver.on_update(report, state)
                if checkpoints[0].should_stop():
                    break
        finally:
            for metrics_logger, saver in zip(outputs, checkpoints, strict=True):
                metrics_logger.close()
                saver.saver.close()
    finals = [_take(states, i) for i in range(len(seeds))]
    summaries = []
    for i, setup in enumerate(setups):
        summaries.append(
            train_lib.finish_run(
                setup,
                workdirs[i],
                outputs[i],
                checkpoints[i],
                finals[i],
                signals,
                label=f"{'member ' + str(i) if population else 'seed ' + str(seeds[i])}, "
                f"{workdirs[i]}",
                summary_extra=None if members is None else {"pbt": members.member_summary(i)},
            )
        )
    if members is not None and all(summary is not None for summary in summaries):
        _write_population_summary(workdir, members, summaries, workdirs)
    return finals


def _population(config, sizes, starts):
    """The population to train: fresh, or as every member's checkpoint left it."""
    from sebulba.pbt.population import Population
    from sebulba.pbt.settings import settings_of

    settings = settings_of(config, sizes)
    saved = [start.meta.get("pbt") for start in starts]
    if any(state != saved[0] for state in saved):
        raise ConfigError(
            "the members' checkpoints hold different population states: they were not "
            "saved by one population run; start it again in a new --workdir"
        )
    return Population(settings, config.seed, saved[0])


def _write_population_summary(workdir, members, summaries, workdirs) -> None:
    """WORKDIR/population.json: every member's result and hyperparameters, and the lineage."""
    if jax.process_index() != 0:
        return
    from sebulba.runtime.metrics import write_json

    returns = [summary.get("mean_return") for summary in summaries]
    ranked = [m for m in range(len(returns)) if returns[m] is not None]
    best = max(ranked, key=lambda m: (returns[m], -m)) if ranked else None
    path = os.path.join(workdir, "population.json")
    write_json(
        path,
        {
            "population": members.settings.population,
            "best_member": best,
            "members": [
                {
                    "member": m,
                    "workdir": os.path.abspath(workdirs[m]),
                    "seed": members.seed + m,
                    "mean_return": returns[m],
                    "params_checksum": summaries[m]["params_checksum"],
                    "hyperparameters": members.hyperparameters(m),
                    "copied_from": members.copied_from[m],
                }
                for m in range(len(summaries))
            ],
            "generation": members.generation,
            "lineage": members.lineage,
        },
    )
    if best is not None:
        values = ", ".join(f"{k} {v:.3g}" for k, v in members.hyperparameters(best).items())
        print(
            f"sebulba: population done after {members.generation} pbt steps: best member "
            f"{best} ({returns[best]:.1f}; {values}); every member in {path}",
            flush=True,
        )
