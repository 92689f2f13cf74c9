"""SIGTERM and SIGINT as a request to stop a run cleanly: after the current update.

Standard library only, so the command line can install it before importing JAX: a
Ctrl-C during start-up then stops the run after its first update, with a checkpoint,
instead of surfacing as a KeyboardInterrupt inside a JAX callback that swallows it.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any


class StopSignals:
    """Turns SIGTERM and SIGINT into a request to stop after the current update.

    A second signal aborts at once (KeyboardInterrupt). Handlers can only be installed
    from the main thread; elsewhere (a library user's thread) signals keep their
    previous behaviour. The previous handlers are restored on exit.

    Entering again re-installs the handlers (and the matching exit undoes only that):
    `jax.distributed.initialize` installs a SIGTERM handler of its own, so a run entered
    before it enters again after it.
    """

    def __init__(self):
        self.received: str | None = None
        self._previous: list[dict[int, Any]] = []  # One entry per nested `with`.

    def _handle(self, signum: int, frame: Any) -> None:
        del frame
        name = signal.Signals(signum).name
        if self.received is not None:
            raise KeyboardInterrupt(f"second {name}: stopping without a checkpoint")
        self.received = name
        print(
            f"sebulba: {name} received: finishing the current update, then saving a "
            "checkpoint (send it again to abort without saving)",
            file=sys.stderr,
            flush=True,
        )

    def __enter__(self) -> StopSignals:
        previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, self._handle)
        self._previous.append(previous)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for sig, handler in self._previous.pop().items():
            signal.signal(sig, handler)
