"""SIGTERM and SIGINT as a request to stop a run cleanly: after the current update.

Standard library only, so the command line can install it before importing JAX.

A Python signal handler runs only when the main thread next executes Python code, and
the main thread of a run spends minutes inside XLA (compiling, or waiting for an update).
The command line therefore also hears signals through `signal.set_wakeup_fd`: the
interpreter's C-level handler writes each signal's number to a socket at once, and a
watcher thread reads it while the main thread is still blocked. With that:

* before the first update of the run has finished there is nothing worth a checkpoint,
  so a signal ends the process at once (SIGINT with status 130, SIGTERM with 0, as a
  stopped run would), and the same command starts the run again;
* a second signal ends the process at once with status 130, without a checkpoint,
  whatever XLA or any thread is doing.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import sys
import threading
from typing import Any

EXIT_INTERRUPTED = 130  # 128 + SIGINT: what shells report for a program stopped by Ctrl-C.
_EXIT_STATUS = {"SIGINT": EXIT_INTERRUPTED, "SIGTERM": 0}


class StopSignals:
    """Turns SIGTERM and SIGINT into a request to stop after the current update.

    `received` names the first signal once one has arrived. Handlers can only be
    installed from the main thread; elsewhere (a library user's thread) signals keep
    their previous behaviour. The previous handlers are restored on exit.

    Args:
      exit_at_once: the command line's behaviour (module docstring): signals are heard
        even while the main thread is blocked; one before `mark_saveable()` or a second
        one ends the process. Without it (a library caller, a notebook) a second signal
        raises KeyboardInterrupt in the main thread instead, and the process lives on.

    Entering again re-installs the handlers (and the matching exit undoes only that):
    `jax.distributed.initialize` installs a SIGTERM handler of its own, so a run entered
    before it enters again after it.
    """

    def __init__(self, exit_at_once: bool = False):
        self.received: str | None = None
        self.exit_at_once = exit_at_once
        self._saveable = False
        self._count = 0
        self._lock = threading.RLock()  # A handler can interrupt the main thread's drain.
        self._previous: list[dict[int, Any]] = []  # One entry per nested `with`.
        self._wakeup: tuple[socket.socket, socket.socket, int] | None = None

    def mark_saveable(self) -> None:
        """Says that a checkpoint is now worth saving: an update of this run has finished."""
        self._saveable = True

    @property
    def saveable(self) -> bool:
        """Whether a signal now stops the run with a checkpoint (`mark_saveable`)."""
        return self._saveable

    def _handle(self, signum: int, frame: Any) -> None:
        del frame
        if self._wakeup is not None:
            self._drain()  # The watcher may not have read the signal's byte yet.
            return
        with self._lock:
            self._on_signal(signum)

    def _on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        self._count += 1
        if self._count > 1:
            if self.exit_at_once:
                self._exit(f"second {name}: stopping at once, without a checkpoint", 130)
            raise KeyboardInterrupt(f"second {name}: stopping without a checkpoint")
        if self.exit_at_once and not self._saveable:
            self._exit(
                f"{name} received before the first update finished: stopping at once, "
                "with nothing to save (the same command starts the run again)",
                _EXIT_STATUS.get(name, EXIT_INTERRUPTED),
            )
        self.received = name
        _say(
            f"{name} received: finishing the current update, then saving a checkpoint "
            "(send it again to stop at once without saving)"
        )

    @staticmethod
    def _exit(message: str, status: int) -> None:
        _say(message)
        sys.stdout.flush()
        os._exit(status)  # Not sys.exit: the main thread may be blocked inside XLA.

    def _drain(self) -> None:
        """Handles every signal number the C-level handler has written so far."""
        reader = self._wakeup[0] if self._wakeup is not None else None
        if reader is None:
            return
        with self._lock:
            while True:
                try:
                    data = reader.recv(64)
                except (BlockingIOError, InterruptedError):
                    return
                except OSError:  # Closed by __exit__.
                    return
                if not data:
                    return
                for signum in data:
                    self._on_signal(signum)

    def _watch(self, reader: socket.socket) -> None:
        while self._wakeup is not None:
            try:
                readable, _, _ = select.select([reader], [], [], 1.0)
            except (OSError, ValueError):  # Closed by __exit__.
                return
            if readable:
                self._drain()

    def __enter__(self) -> StopSignals:
        previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, self._handle)
            if self.exit_at_once and self._wakeup is None:
                reader, writer = socket.socketpair()
                reader.setblocking(False)
                writer.setblocking(False)
                old_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
                self._wakeup = (reader, writer, old_fd)
                threading.Thread(
                    target=self._watch, args=(reader,), name="sebulba-stop-signals", daemon=True
                ).start()
        self._previous.append(previous)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for sig, handler in self._previous.pop().items():
            signal.signal(sig, handler)
        if not self._previous and self._wakeup is not None:
            reader, writer, old_fd = self._wakeup
            signal.set_wakeup_fd(old_fd)
            self._wakeup = None
            writer.close()
            reader.close()


def _say(message: str) -> None:
    print(f"sebulba: {message}", file=sys.stderr, flush=True)
