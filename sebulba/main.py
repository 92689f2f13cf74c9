r"""Command-line entry point: flags -> distributed init -> train.train().

    python -m sebulba.main --config=configs/ppo_cartpole.py --workdir=runs/cartpole
    # The config a run would use (defaults and overrides applied), without running it:
    python -m sebulba.main --config=configs/ppo_atari.py:Pong-v5 --print_config
    python -m sebulba.main --config=configs/ppo_atari.py:smoke --workdir=/tmp/x \
        --config.seed=2
    # One process per host; SLURM, Open MPI and Cloud TPU VMs are detected:
    python -m sebulba.main --config=... --workdir=... --distributed
    # Any other cluster, or several local processes:
    python -m sebulba.main --config=... --workdir=... \
        --coordinator_address=HOST:PORT --num_processes=N --process_id=I

Bad flags, a bad config or an unusable --workdir exit with status 2 and one line on
stderr naming the field. A run stopped by Ctrl-C (SIGINT) saves a checkpoint and exits
130, so shell loops over runs stop too; one stopped by SIGTERM (TPU preemption, a SLURM
time limit, `tpu.sh stop`) saves and exits 0, so SLURM job chains continue and the
same command resumes. A signal before the first update has finished, or a second
signal, ends the process at once without a checkpoint (docs/checkpointing.md). See
docs/multihost.md for multi-process runs and their failure behaviour.
"""

from __future__ import annotations

import json
import logging as std_logging
import re
import sys

from absl import app, flags, logging

from sebulba.config import RUN_RANGES
from sebulba.config import flag as config_flag
from sebulba.config.run_plan import plan
from sebulba.config.validation import FINITE_NON_NEGATIVE, Range, check_range
from sebulba.errors import ConfigError, InvalidRolloutError, TrainingDivergedError
from sebulba.pbt.settings import in_one_program as trains_a_population
from sebulba.runtime import distributed, gpu_determinism, platforms
from sebulba.runtime.stop_signals import StopSignals
from sebulba.runtime.workdir import check_not_in_use, check_workdir

# 128 + SIGINT, what shells report for a program stopped by Ctrl-C: `for s in 1 2; do
# python -m sebulba.main ...; done` then stops instead of starting the next run. SIGTERM
# (a scheduler's stop) exits 0 after its checkpoint: see the module docstring.
EXIT_INTERRUPTED = 130

_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for metrics, summaries, checkpoints.")
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed",
    False,
    "Join a multi-process run found by jax.distributed auto-detection (SLURM, Open MPI, "
    "Cloud TPU VM); a SLURM step of one task runs alone, without a coordinator. Explicit "
    "flags below override what is detected.",
)
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None, "HOST:PORT of process 0 for an explicit multi-process run."
)
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes in the run.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index.")
_INIT_TIMEOUT = flags.DEFINE_integer(
    "initialization_timeout_s", 300, "Fail if not every process has joined after this long."
)
_HEARTBEAT_TIMEOUT = flags.DEFINE_integer(
    "heartbeat_timeout_s",
    60,
    "A process that sends no heartbeat for this long (dead, frozen, unreachable host) "
    "fails the run on every other process.",
)
_SHUTDOWN_TIMEOUT = flags.DEFINE_integer(
    "shutdown_timeout_s", 120, "How long a finished process waits for the others at exit."
)
_WATCHDOG_TIMEOUT = flags.DEFINE_float(
    "watchdog_timeout_s",
    600.0,
    "Multi-process runs: exit if no learner update finishes for this long after the "
    "first one (a hung peer). 0 disables.",
)
_SHARED_WORKDIR_TIMEOUT = flags.DEFINE_float(
    "shared_workdir_timeout_s",
    60.0,
    "Multi-process runs: how long every process may take to see a file process 0 "
    "created in --workdir before the run fails as having no shared workdir.",
)
_SEEDS = flags.DEFINE_list(
    "seeds",
    None,
    "Anakin runs only: train these seeds together as one vmapped program, each into "
    "WORKDIR/seed=<seed> (config.seed is then ignored).",
)
_PRINT_CONFIG = flags.DEFINE_bool(
    "print_config",
    False,
    "Print the resolved config (the file's defaults with every --config.KEY=VALUE "
    "applied) as the run's config.json would hold it, and exit without training or "
    "touching --workdir (which it does not need).",
)
flags.mark_flags_as_required(["config"])  # --workdir too, unless --print_config.
# --config (and its --config.KEY=VALUE overrides) is defined in sebulba.config.flag: listed
# by --help with this module's flags, not only by --helpfull.
flags.declare_key_flag("config")

# Errors of a cross-process collective, whose usual cause is a dead peer.
_COLLECTIVE = re.compile(r"gloo|nccl|collective|all-?reduce|all-?gather", re.IGNORECASE)


def _distributed_options() -> distributed.DistributedOptions:
    options = distributed.DistributedOptions(
        auto_detect=_DISTRIBUTED.value,
        coordinator_address=_COORDINATOR.value,
        num_processes=_NUM_PROCESSES.value,
        process_id=_PROCESS_ID.value,
        initialization_timeout_s=_INIT_TIMEOUT.value,
        heartbeat_timeout_s=_HEARTBEAT_TIMEOUT.value,
        shutdown_timeout_s=_SHUTDOWN_TIMEOUT.value,
    )
    # Decided before anything reads options.enabled: a lone task is a single-process run
    # throughout (its checks, its workdir lock, no coordinator or monitor).
    return distributed.without_lone_slurm_task(options)


def _fail_multi_process(monitor: distributed.RunMonitor, status: int, message: str) -> None:
    """Ends this process of a multi-process run and tells the others why, at once."""
    print(f"sebulba: {message}", file=sys.stderr, flush=True)
    monitor.report_failure(message)
    distributed.hard_exit(status)


def _parse_seeds(values: list[str] | None) -> tuple[int, ...] | None:
    """`--seeds=1,2,3` as integers; ConfigError naming the flag otherwise."""
    if values is None:
        return None
    try:
        seeds = tuple(int(value) for value in values)
    except ValueError:
        raise ConfigError(f"--seeds must be comma-separated integers, got {values!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds must be distinct integers, got {values!r}")
    for seed in seeds:  # The range config.seed has, named by this flag.
        check_range(seed, f"--seeds={','.join(values)}: seed {seed}", RUN_RANGES["seed"])
    if any(arg.split("=")[0] == "--config.seed" for arg in sys.argv[1:]):
        raise ConfigError(
            "--config.seed and --seeds both name seeds: --seeds trains each of its seeds "
            "(config.seed is not used), so drop --config.seed"
        )
    return seeds


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        config_flag.config_error(f"unexpected arguments: {' '.join(argv[1:])}")
    if _PRINT_CONFIG.value:
        print(json.dumps(config_flag.CONFIG.value.to_dict(), indent=2, sort_keys=True))
        return
    if _WORKDIR.value is None:
        config_flag.config_error("--workdir is required")
    # Installed before JAX is imported or started, so that a Ctrl-C during start-up is
    # not swallowed by a JAX callback: before the first update has finished it ends the
    # process at once (nothing is worth saving yet), exit 130; so does a second signal.
    with StopSignals(exit_at_once=True) as signals:
        _run(signals)
    if signals.received == "SIGINT":
        sys.exit(EXIT_INTERRUPTED)


def _run(signals: StopSignals) -> None:
    """Start-up, training and the exit status of every failure; `main` owns the signals."""
    options = _distributed_options()
    try:
        options.validate()  # Before the config's checks below use --num_processes.
        # In a fraction of a second, before importing JAX or envpool (and before a
        # multi-process run waits for its peers to join, up to
        # --initialization_timeout_s): the config's values (sizes, run-level values, a
        # built-in agent's ranges), then the workdir. train.train checks them again with
        # the rest of the plan. The sizes count the processes: a run that auto-detects
        # them checks everything only there, where a failure on one process stops the
        # others at once. Only process 0 writes, so only a single process checks here
        # that no other run holds the workdir.
        num_processes = options.num_processes if options.enabled else 1
        if num_processes is not None:
            plan(config_flag.CONFIG.value, num_processes=num_processes, values_only=True)
            check_workdir(_WORKDIR.value)
        if not options.enabled:
            check_not_in_use(_WORKDIR.value)
        seeds = _parse_seeds(_SEEDS.value)
        # NaN or infinity would disable the watchdog silently; 0 would leave no time to
        # see the shared workdir (a misleading collective failure, a stray probe file).
        check_range(_WATCHDOG_TIMEOUT.value, "--watchdog_timeout_s", FINITE_NON_NEGATIVE)
        finite_positive = Range(0, low_open=True, high_open=True)
        check_range(_SHARED_WORKDIR_TIMEOUT.value, "--shared_workdir_timeout_s", finite_positive)
        # XLA reads its flags when JAX starts a backend, which initialize may do.
        gpu_determinism.configure(config_flag.CONFIG.value.debug.deterministic_gpu)
        platforms.skip_absent_accelerators()
        source = distributed.initialize(options)
    except ConfigError as error:
        config_flag.config_error(str(error))
    import jax

    from sebulba import train
    from sebulba.runtime import compile_cache
    from sebulba.runtime.metrics import params_checksum

    compile_cache.enable()  # Logged by train.train once the config is accepted.

    monitor = None
    if options.enabled:
        distributed.log_process_start(source)
        monitor = distributed.start_monitor(_WATCHDOG_TIMEOUT.value)
    try:
        if trains_a_population(config_flag.CONFIG.value) and seeds is None:
            from sebulba.anakin import population

            states = population.train_population(
                config_flag.CONFIG.value, _WORKDIR.value, stop_signals=signals
            )
            state = states[0]
        elif seeds is not None:
            from sebulba.anakin import seeds as seeds_lib

            states = seeds_lib.train_seeds(
                config_flag.CONFIG.value, _WORKDIR.value, seeds, stop_signals=signals
            )
            state = states[0]
        else:
            state = train.train(
                config_flag.CONFIG.value,
                _WORKDIR.value,
                shared_workdir_timeout_s=_SHARED_WORKDIR_TIMEOUT.value,
                stop_signals=signals,
            )
    except KeyboardInterrupt as error:  # A second Ctrl-C: stopped without a checkpoint.
        message = f"interrupted: {error or 'KeyboardInterrupt'}"
        if monitor is None:
            print(f"sebulba: {message}", file=sys.stderr, flush=True)
            sys.exit(EXIT_INTERRUPTED)
        _fail_multi_process(monitor, EXIT_INTERRUPTED, message)
    except ConfigError as error:
        if monitor is None:
            config_flag.config_error(str(error))
        _fail_multi_process(monitor, 2, f"config error: {error}")
    except (TrainingDivergedError, InvalidRolloutError) as error:
        what = "training diverged" if isinstance(error, TrainingDivergedError) else "bad data"
        if monitor is None:
            print(f"sebulba: {what}: {error}", file=sys.stderr, flush=True)
            sys.exit(distributed.EXIT_FAILURE)
        _fail_multi_process(monitor, distributed.EXIT_FAILURE, f"{what}: {error}")
    except Exception as error:
        if monitor is None:
            raise
        logging.exception("this process failed")
        name = f"process {jax.process_index()}/{jax.process_count()}"
        message = " ".join(f"{type(error).__name__}: {error}".split())
        if isinstance(error, jax.errors.JaxRuntimeError) or _COLLECTIVE.search(message):
            message = (
                f"{name} failed: {message} (a collective failed: another process has "
                "probably died; its log has the cause)"
            )
            # Said before asking the coordination service: with the coordinator dead, the
            # runtime aborts this process while that call waits.
            print(f"sebulba: {message}", file=sys.stderr, flush=True)
            cause = monitor.peer_failure()
            if cause is not None:  # The peer posted why before the exit that broke this.
                _fail_multi_process(monitor, distributed.EXIT_FAILURE, cause)
            monitor.report_failure(message)
            distributed.hard_exit(distributed.EXIT_FAILURE)
        _fail_multi_process(monitor, distributed.EXIT_FAILURE, f"{name} failed: {message}")
    if monitor is not None:
        monitor.stop()
        # Equal on every process: the replicated leaves (all but a replay buffer split
        # along envs, whose shards differ between processes).
        replicated = [
            leaf
            for leaf in jax.tree.leaves(state)
            if not isinstance(leaf, jax.Array) or leaf.sharding.is_fully_replicated
        ]
        logging.info("finished; learner state checksum %s", params_checksum(replicated))
        # Waits (up to --shutdown_timeout_s) until every process has finished.
        jax.distributed.shutdown()


if __name__ == "__main__":
    # Backend probing logs "Unable to initialize backend 'tpu'" at INFO on every
    # machine without a TPU; it would precede (and obscure) one-line config errors.
    std_logging.getLogger("jax._src.xla_bridge").setLevel(std_logging.WARNING)
    logging.set_verbosity(logging.INFO)
    app.run(main, flags_parser=config_flag.parse_flags)
