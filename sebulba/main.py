"""Command-line entry point: flags -> distributed init -> train.train().

    python -m sebulba.main --config=configs/ppo_cartpole.py --workdir=runs/cartpole
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

import difflib
import logging as std_logging
import re
import sys

from absl import app, flags, logging
from ml_collections import config_dict, config_flags

from sebulba import distributed, flag_errors
from sebulba.agents.defaults import check_builtin_ranges
from sebulba.config import check_run_config
from sebulba.errors import ConfigError, TrainingDivergedError
from sebulba.sizes import derive_sizes
from sebulba.stop_signals import StopSignals
from sebulba.workdir import check_workdir

# 128 + SIGINT, what shells report for a program stopped by Ctrl-C: `for s in 1 2; do
# python -m sebulba.main ...; done` then stops instead of starting the next run. SIGTERM
# (a scheduler's stop) exits 0 after its checkpoint: see the module docstring.
EXIT_INTERRUPTED = 130

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file, optionally with an argument: FILE[:ARG].", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for metrics, summaries, checkpoints.")
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed",
    False,
    "Join a multi-process run found by jax.distributed auto-detection (SLURM, Open MPI, "
    "Cloud TPU VM). Explicit flags below override what is detected.",
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
flags.mark_flags_as_required(["config", "workdir"])

# Errors of a cross-process collective, whose usual cause is a dead peer.
_COLLECTIVE = re.compile(r"gloo|nccl|collective|all-?reduce|all-?gather", re.IGNORECASE)
# The config override flags: --config.a.b=VALUE and --noconfig.a.b.
_OVERRIDE = re.compile(r"^--?(?:no)?config\.([^=\s]+)")


def _config_error(message: str) -> None:
    print(f"sebulba: config error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def _config_argument(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg.startswith(("--config=", "-config=")):
            return arg.split("=", 1)[1]
        if arg in ("--config", "-config") and i + 1 < len(argv):
            return argv[i + 1]
    return None


def _load_config(argv: list[str]) -> config_dict.ConfigDict | None:
    """The config file's config, without overrides; None if it cannot be loaded."""
    path = _config_argument(argv)
    if path is None:
        return None
    try:
        config = flags.FLAGS["config"].parser.parse(path)
    except Exception:  # noqa: BLE001 - the original parse error is reported instead.
        return None
    return config if isinstance(config, config_dict.ConfigDict) else None


def _leaf_paths(config: config_dict.ConfigDict, prefix: str = "") -> dict[str, object]:
    """Every field of `config` by dotted path, with its value."""
    paths = {}
    for key, value in config.items():
        if isinstance(value, config_dict.ConfigDict):
            paths.update(_leaf_paths(value, f"{prefix}{key}."))
        else:
            paths[f"{prefix}{key}"] = value
    return paths


def _unknown_override(argv: list[str]) -> str | None:
    """Describes the first `--config.KEY` override whose KEY is not in the config."""
    config = _load_config(argv)
    if config is None:
        return None
    for arg in argv[1:]:
        match = _OVERRIDE.match(arg)
        if match is None:
            continue
        node, walked = config, []
        for key in match.group(1).split("."):
            if isinstance(node, config_dict.ConfigDict) and key in node:
                node = node[key]
                walked.append(key)
                continue
            if not isinstance(node, config_dict.ConfigDict) or "[" in key:
                break  # Indexing into a value: left to ml_collections.
            close = difflib.get_close_matches(key, list(node.keys()), n=1)
            hint = f' (did you mean "{".".join([*walked, close[0]])}"?)' if close else ""
            return f"--config.{match.group(1)}: no such key{hint}"
    return None


def _config_flag_hint(argv: list[str], error: BaseException) -> str | None:
    """`--total_timesteps=1000` means `--config.total_timesteps=1000`: says so."""
    match = re.match(r"Unknown command line flag '([^']+)'", str(error))
    config = _load_config(argv) if match else None
    if config is None:
        return None
    name = match.group(1)
    names = [name, name[2:]] if name.startswith("no") else [name]  # --noKEY for booleans.
    fields = [
        path
        for path in _leaf_paths(config)
        if any(path == n or path.endswith(f".{n}") for n in names)
    ]
    if not fields:
        return None
    suggestions = " or ".join(f"--config.{path}" for path in fields)
    return f"--{name}: no such flag; did you mean {suggestions}?"


def _bad_override_value(argv: list[str], error: BaseException) -> str | None:
    """`--config.KEY=VALUE` whose VALUE does not parse: names the field and its type."""
    match = re.match(r"flag --(?:no)?config\.([^=]+)=", str(error))
    config = _load_config(argv) if match else None
    if config is None:
        return None
    expected = flag_errors.value_type_name(_leaf_paths(config).get(match.group(1)))
    described = flag_errors.bad_value(error, expected)
    return None if described is None else described[1]


def _one_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    if "Error whilst parsing config file" in lines[0]:
        return f"--config: get_config() raised {lines[-1]}"
    if isinstance(error, ImportError):
        return f"--config: cannot load the file: {lines[0]}"
    if lines[0].startswith(("Failed loading config file", "Configuration is not available")):
        return f"--config: cannot load the file: {lines[-1]}"
    return flag_errors.one_line(error)


def parse_flags(argv: list[str]) -> list[str]:
    """absl flag parsing that reports any flag or config error in one stderr line."""
    try:
        remaining = flags.FLAGS(argv)
        if not isinstance(_CONFIG.value, config_dict.ConfigDict):
            _CONFIG.value.to_dict()  # Raises the deferred error of an unloadable file.
    except SystemExit:
        raise
    except Exception as error:  # noqa: BLE001 - every parse error becomes one line.
        _config_error(
            _unknown_override(argv)
            or _config_flag_hint(argv, error)
            or _bad_override_value(argv, error)
            or _one_line(error)
        )
    return remaining


def _distributed_options() -> distributed.DistributedOptions:
    return distributed.DistributedOptions(
        auto_detect=_DISTRIBUTED.value,
        coordinator_address=_COORDINATOR.value,
        num_processes=_NUM_PROCESSES.value,
        process_id=_PROCESS_ID.value,
        initialization_timeout_s=_INIT_TIMEOUT.value,
        heartbeat_timeout_s=_HEARTBEAT_TIMEOUT.value,
        shutdown_timeout_s=_SHUTDOWN_TIMEOUT.value,
    )


def _fail_multi_process(monitor: distributed.RunMonitor, status: int, message: str) -> None:
    """Ends this process of a multi-process run and tells the others why, at once."""
    print(f"sebulba: {message}", file=sys.stderr, flush=True)
    monitor.report_failure(message)
    distributed.hard_exit(status)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        _config_error(f"unexpected arguments: {' '.join(argv[1:])}")
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
        if not options.enabled:
            # In a fraction of a second, before importing JAX or envpool: the config's
            # sizes and values (a built-in agent's too), then the workdir. Multi-process
            # runs check them in train.train (sizes need the process count), where a
            # failure on one process stops the others at once.
            derive_sizes(_CONFIG.value, num_processes=1)
            check_run_config(_CONFIG.value)
            check_builtin_ranges(_CONFIG.value.agent)
            check_workdir(_WORKDIR.value)
        source = distributed.initialize(options)
    except ConfigError as error:
        _config_error(str(error))
    import jax

    from sebulba import compile_cache, train
    from sebulba.metrics import params_checksum

    compile_cache.enable()  # Logged by train.train once the config is accepted.

    monitor = None
    if options.enabled:
        distributed.log_process_start(source)
        monitor = distributed.start_monitor(_WATCHDOG_TIMEOUT.value)
    try:
        state = train.train(
            _CONFIG.value,
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
            _config_error(str(error))
        _fail_multi_process(monitor, 2, f"config error: {error}")
    except TrainingDivergedError as error:
        if monitor is None:
            print(f"sebulba: training diverged: {error}", file=sys.stderr, flush=True)
            sys.exit(distributed.EXIT_FAILURE)
        _fail_multi_process(monitor, distributed.EXIT_FAILURE, f"training diverged: {error}")
    except Exception as error:
        if monitor is None:
            raise
        logging.exception("this process failed")
        name = f"process {jax.process_index()}/{jax.process_count()}"
        message = " ".join(f"{type(error).__name__}: {error}".split())
        if isinstance(error, jax.errors.JaxRuntimeError) or _COLLECTIVE.search(message):
            message += (
                " (a collective failed: another process has probably died; its log has the cause)"
            )
        _fail_multi_process(monitor, distributed.EXIT_FAILURE, f"{name} failed: {message}")
    if monitor is not None:
        monitor.stop()
        # Equal on every process: the learner state is replicated over all of them.
        logging.info("finished; learner state checksum %s", params_checksum(state))
        # Waits (up to --shutdown_timeout_s) until every process has finished.
        jax.distributed.shutdown()


if __name__ == "__main__":
    # Backend probing logs "Unable to initialize backend 'tpu'" at INFO on every
    # machine without a TPU; it would precede (and obscure) one-line config errors.
    std_logging.getLogger("jax._src.xla_bridge").setLevel(std_logging.WARNING)
    logging.set_verbosity(logging.INFO)
    app.run(main, flags_parser=parse_flags)
