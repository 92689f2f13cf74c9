"""Multi-process start-up on JAX's multi-controller runtime (`jax.distributed`).

One process runs per host (TPU VM worker, SLURM node, MPI rank) and sees all of that
host's accelerators; the learner mesh then spans every process (Hessel et al. 2021,
"Podracer architectures for scalable reinforcement learning"). This module:

* starts `jax.distributed` from explicit flags or by JAX's own auto-detection (SLURM,
  Open MPI, Cloud TPU VM), with bounded start-up, heartbeat and shutdown timeouts;
* logs, on every process, its index, host and local devices, and tags every later log
  line with the process index so interleaved logs stay readable;
* keeps a failure from becoming a hang: a process whose run fails exits at once instead
  of waiting in the runtime's shutdown barrier for peers that are blocked waiting for
  it, and a watchdog ends a process whose learner stops making progress.

How a failure reaches the other processes:
  * a peer that dies closes its gloo/NCCL connections: the next collective of every
    other process fails within seconds and `exit_after_failure` ends it;
  * a peer that freezes (or whose host disappears) stops sending heartbeats: after
    `heartbeat_timeout_s` the coordination service fails every other process;
  * a peer whose Python code hangs keeps heartbeating, but no process finishes another
    update: the `Watchdog` of every process fires after `watchdog_timeout_s`.
"""

from __future__ import annotations

import copy
import dataclasses
import logging as std_logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable

from absl import logging

from sebulba.errors import ConfigError

# Exit status of a process that ends because its run failed or a peer failed.
EXIT_FAILURE = 1
# Exit status of a process ended by its watchdog (no learner progress).
EXIT_STALLED = 3


@dataclasses.dataclass(frozen=True)
class DistributedOptions:
    """How (and whether) to join a multi-process run.

    Attributes:
      auto_detect: let `jax.distributed.initialize()` find the cluster (SLURM, Open
        MPI, Cloud TPU VM). Explicit values below still take precedence.
      coordinator_address: HOST:PORT of process 0's coordination service.
      num_processes: processes in the run.
      process_id: this process's index in [0, num_processes).
      initialization_timeout_s: how long to wait for every process to join.
      heartbeat_timeout_s: a process silent this long is declared dead and the run
        fails on every other process.
      shutdown_timeout_s: how long a finished process waits for the others at exit.
    """

    auto_detect: bool = False
    coordinator_address: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    initialization_timeout_s: int = 300
    heartbeat_timeout_s: int = 60
    shutdown_timeout_s: int = 120

    @property
    def enabled(self) -> bool:
        """Whether `jax.distributed` is used at all."""
        return self.auto_detect or self.coordinator_address is not None

    def validate(self) -> None:
        """Raises ConfigError naming the flag that makes the options unusable."""
        explicit = {
            "--coordinator_address": self.coordinator_address,
            "--num_processes": self.num_processes,
            "--process_id": self.process_id,
        }
        missing = [name for name, value in explicit.items() if value is None]
        if not self.auto_detect and len(missing) not in (0, len(explicit)):
            raise ConfigError(
                f"{', '.join(missing)} missing: pass all of --coordinator_address, "
                "--num_processes and --process_id, or --distributed to auto-detect them"
            )
        if self.coordinator_address is not None:
            host, _, port = self.coordinator_address.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(
                    f"--coordinator_address={self.coordinator_address!r} must be HOST:PORT"
                )
        if self.num_processes is not None and self.num_processes < 1:
            raise ConfigError(f"--num_processes must be >= 1, got {self.num_processes}")
        if self.process_id is not None:
            upper = self.num_processes
            if self.process_id < 0 or (upper is not None and self.process_id >= upper):
                raise ConfigError(
                    f"--process_id={self.process_id} must be in [0, --num_processes={upper})"
                )
        for name in ("initialization_timeout_s", "heartbeat_timeout_s", "shutdown_timeout_s"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name} must be >= 1 second, got {getattr(self, name)}")


def detect_cluster() -> str:
    """Names the cluster environment `jax.distributed.initialize()` will detect.

    Mirrors the environment variables JAX's own detectors read; Cloud TPU VMs are
    detected by JAX from the GCE metadata server, which is not queried here.
    """
    if all(v in os.environ for v in ("SLURM_JOB_ID", "SLURM_PROCID", "SLURM_NTASKS")):
        return "SLURM"
    if "OMPI_MCA_orte_hnp_uri" in os.environ:
        return "Open MPI"
    return "JAX auto-detection (Cloud TPU VM metadata or another supported cluster)"


def initialize(options: DistributedOptions) -> str:
    """Joins the multi-process run described by `options`; returns how it was found.

    Must run before anything touches a JAX backend. Every process then sees all of its
    host's devices (one process per host), unless `JAX_LOCAL_DEVICE_IDS` restricts them.

    Raises:
      ConfigError: the options are inconsistent, or auto-detection found no cluster.
    """
    options.validate()
    if not options.enabled:
        return "single process"
    import jax

    # CPU collectives across processes (tests, CPU-only clusters) go over gloo.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    source = detect_cluster() if options.auto_detect else "explicit flags"
    # JAX's SLURM / Open MPI detectors default to one visible GPU per process (the
    # task's local rank); sebulba runs one process per host that owns every local
    # device. An empty list keeps them all visible; JAX_LOCAL_DEVICE_IDS still wins.
    local_device_ids = None if os.environ.get("JAX_LOCAL_DEVICE_IDS") else []
    try:
        jax.distributed.initialize(
            coordinator_address=options.coordinator_address,
            num_processes=options.num_processes,
            process_id=options.process_id,
            local_device_ids=local_device_ids,
            initialization_timeout=options.initialization_timeout_s,
            heartbeat_timeout_seconds=options.heartbeat_timeout_s,
            shutdown_timeout_seconds=options.shutdown_timeout_s,
        )
    except ValueError as error:
        # JAX's message when nothing was detected: "... should/must be defined."
        if options.auto_detect and "defined" in str(error):
            raise ConfigError(
                "--distributed found no SLURM, Open MPI or Cloud TPU VM environment "
                f"({error}); pass --coordinator_address, --num_processes and --process_id"
            ) from None
        raise
    return source


def log_process_start(source: str) -> None:
    """Logs this process's index, host and local devices; tags later log lines."""
    import jax

    index, count = jax.process_index(), jax.process_count()
    if count > 1:
        tag_log_lines(f"process {index}/{count}")
    devices = jax.local_devices()
    logging.info(
        "process %d/%d on host %s (pid %d) via %s: %d local %s device(s) %s; "
        "%d device(s) in the run",
        index,
        count,
        socket.gethostname(),
        os.getpid(),
        source,
        len(devices),
        devices[0].platform,
        [f"{i}:{d}" for i, d in enumerate(devices)],
        jax.device_count(),
    )


class _TaggedFormatter(logging.PythonFormatter):
    """absl's log format with a fixed tag in front of every message."""

    def __init__(self, tag: str):
        super().__init__()
        self._tag = tag

    def format(self, record: std_logging.LogRecord) -> str:
        record = copy.copy(record)
        record.msg = f"[{self._tag}] {record.getMessage()}"
        record.args = None
        return super().format(record)


def tag_log_lines(tag: str) -> None:
    """Prefixes every absl log message of this process with `[tag]`."""
    logging.get_absl_handler().setFormatter(_TaggedFormatter(tag))


def exit_after_failure(error: BaseException, multi_process: bool) -> None:
    """Ends a failed run.

    A single process re-raises (a normal traceback). In a multi-process run the process
    logs the error and exits at once: the normal interpreter exit would wait in the
    runtime's shutdown barrier for peers that are themselves blocked in a collective
    waiting for this process, so nobody would exit until the heartbeat timeout.
    """
    if not multi_process:
        raise error
    import jax

    logging.exception(
        "process %d/%d failed: %s: %s. The other processes stop at their next "
        "collective; see their logs for their own errors.",
        jax.process_index(),
        jax.process_count(),
        type(error).__name__,
        error,
    )
    hard_exit(EXIT_FAILURE)


def hard_exit(status: int) -> None:
    """Flushes output and exits without running exit handlers (no shutdown barrier)."""
    logging.flush()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


class Watchdog:
    """Ends the process when the learner stops finishing updates.

    A hung peer keeps heartbeating, so the runtime never declares it dead, and every
    other process blocks in the next collective. The watchdog arms on the first
    `beat()` (compilation before the first update may legitimately take long) and from
    then on exits the process with `EXIT_STALLED` if `timeout_s` pass without a beat.

    Args:
      timeout_s: longest allowed time between two finished updates; 0 disables.
      describe: returns the process description used in the exit message.
      on_stall: called instead of exiting (tests).
    """

    def __init__(
        self,
        timeout_s: float,
        describe: Callable[[], str] = lambda: "this process",
        on_stall: Callable[[str], None] | None = None,
    ):
        self.timeout_s = timeout_s
        self._describe = describe
        self._on_stall = on_stall
        self._last_beat: float | None = None
        self._beats = 0
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Watchdog:
        if self.timeout_s > 0 and self._thread is None:
            self._thread = threading.Thread(
                target=self._watch, name="sebulba-watchdog", daemon=True
            )
            self._thread.start()
        return self

    def beat(self, *unused_args) -> None:
        """Records progress; accepts (and ignores) any callback arguments."""
        with self._lock:
            self._last_beat = time.monotonic()
            self._beats += 1

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _watch(self) -> None:
        poll_s = min(1.0, self.timeout_s / 4)
        while not self._stopped.wait(poll_s):
            with self._lock:
                last, beats = self._last_beat, self._beats
            if last is None or time.monotonic() - last < self.timeout_s:
                continue
            message = (
                f"{self._describe()}: no learner update finished in the last "
                f"{self.timeout_s:.0f}s (after update {beats}); another process has "
                "probably hung or died, see its log. Exiting."
            )
            if self._on_stall is not None:
                self._on_stall(message)
                return
            logging.error("%s", message)
            print(f"sebulba: {message}", file=sys.stderr, flush=True)
            hard_exit(EXIT_STALLED)
