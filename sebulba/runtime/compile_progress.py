"""Console lines while XLA compiles a program: which one, that it is still going, how long.

A large network's update can compile for minutes (PQN on MinAtar: about three on two CPU
cores), with nothing else to show for it. So each program a run (or `sebulba.check`)
compiles says when it starts, every `HEARTBEAT_S` seconds while it runs, and how long it
took. After two minutes XLA itself prints a boxed "Very slow compile? If you want to file
a bug, ..." on stderr; it is a note that compiling is long, not an error, and the
heartbeat before it says so.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import TextIO

from sebulba.runtime.progress import format_duration

# Seconds between "still compiling" lines (read at each compile: tests lower it).
HEARTBEAT_S = 30.0
# When XLA's slow-compile alarm (xla/service/slow_operation_alarm.cc) first fires.
XLA_ALARM_S = 120.0
_XLA_ALARM_EXPLAINED = threading.Event()  # Once per process, as XLA prints it.


def _say(stream: TextIO, text: str) -> None:
    print(text, file=stream, flush=True)


@contextlib.contextmanager
def announced(what: str, show: bool = True, stream: TextIO | None = None) -> Iterator[None]:
    """Says that `what` ("the learner update") compiles while the body runs.

    Prints `sebulba: compiling WHAT ...` on entry, `sebulba: still compiling WHAT
    (H:MM:SS)` every `HEARTBEAT_S` seconds from a thread of its own (the caller is inside
    XLA), and `sebulba: compiled WHAT in H:MM:SS` when the body returns; an error in the
    body is left to speak for itself. `show` False (processes other than 0) prints
    nothing; `stream` defaults to stdout.
    """
    if not show:
        yield
        return
    out = stream if stream is not None else sys.stdout
    began = time.perf_counter()
    _say(out, f"sebulba: compiling {what} ...")
    done = threading.Event()
    every_s = HEARTBEAT_S

    def heartbeat() -> None:
        while not done.wait(every_s):
            elapsed = time.perf_counter() - began
            line = f"sebulba: still compiling {what} ({format_duration(elapsed)})"
            if elapsed + every_s >= XLA_ALARM_S and not _XLA_ALARM_EXPLAINED.is_set():
                _XLA_ALARM_EXPLAINED.set()
                line += (
                    "; from 2 minutes on XLA prints 'Very slow compile? If you want to file a "
                    "bug, ...': a note that compiling is long, not an error"
                )
            _say(out, line)

    thread = threading.Thread(target=heartbeat, name="sebulba-compile-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
    _say(out, f"sebulba: compiled {what} in {format_duration(time.perf_counter() - began)}")
