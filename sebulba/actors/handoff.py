"""Thread coordination for the pipeline: stop flag, first error, versioned parameters.

Every blocking wait polls the run's stop flag, so no thread can wait forever once any
thread has failed.
"""

from __future__ import annotations

import collections
import queue
import threading
from typing import Any

# How often blocked threads wake up to check whether the run is stopping.
_POLL_S = 0.05


class RunStopped(Exception):
    """Raised inside a thread whose run was stopped by another thread's failure."""


class RunControl:
    """The stop flag and the first error of a run, shared by all its threads."""

    def __init__(self):
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.error: BaseException | None = None

    def fail(self, error: BaseException) -> None:
        with self._lock:
            if self.error is None:
                self.error = error
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def raise_if_stopped(self) -> None:
        if self._stop.is_set():
            raise RunStopped()


class StartGate:
    """Holds every actor thread until all of them are ready (their programs compiled).

    On a GPU, XLA's compiler runs candidate kernels on the device while it autotunes; a
    rollout program already running there would share the device with it. The gate keeps
    compiling and running apart. Waits poll the stop flag, so a thread that fails while
    compiling stops the others instead of leaving them waiting.
    """

    def __init__(self, parties: int, control: RunControl):
        self._waiting = parties
        self._cond = threading.Condition()
        self._control = control

    def arrive_and_wait(self) -> None:
        with self._cond:
            self._waiting -= 1
            self._cond.notify_all()
            while self._waiting > 0:
                self._control.raise_if_stopped()
                self._cond.wait(_POLL_S)


class ParamsStore:
    """The `keep` newest parameter versions (two by default), one copy per actor device."""

    def __init__(self, num_actor_devices: int, control: RunControl, keep: int = 2):
        self._versions: collections.OrderedDict[int, list[Any]] = collections.OrderedDict()
        self._cond = threading.Condition()
        self._control = control
        self._num_devices = num_actor_devices
        self._keep = max(2, keep)

    def publish(self, version: int, params_per_device: list[Any]) -> None:
        assert len(params_per_device) == self._num_devices
        with self._cond:
            self._versions[version] = params_per_device
            while len(self._versions) > self._keep:
                self._versions.popitem(last=False)
            self._cond.notify_all()

    def get(self, version: int, device_index: int) -> Any:
        """Blocks until `version` is published; raises RunStopped if the run stops."""
        with self._cond:
            while version not in self._versions:
                if self._versions and min(self._versions) > version:
                    raise RuntimeError(f"policy version {version} was dropped before use")
                self._control.raise_if_stopped()
                self._cond.wait(_POLL_S)
            return self._versions[version][device_index]


def put_or_stop(q: queue.Queue, item: Any, control: RunControl) -> None:
    """Puts `item` into the bounded queue, giving up with RunStopped if the run stops."""
    while True:
        control.raise_if_stopped()
        try:
            q.put(item, timeout=_POLL_S)
            return
        except queue.Full:
            continue


def get_or_stop(q: queue.Queue, control: RunControl) -> Any:
    """Takes an item; once none is left, re-raises another thread's error, or RunStopped
    if the run stops.

    An item handed over before a failure is still taken, so what the learner does before
    an actor's error stops it does not depend on when the error arrives: an actor that
    fails on rollout k has already handed over rollout k - 1, and the learner learns it.
    With several actor threads that holds for the failing thread only: the error stops
    the others at once, and one still collecting rollout k - 1 never hands it over, so
    update k - 1 then runs or not by timing (update k - 2 always does).
    """
    while True:
        try:
            return q.get_nowait()
        except queue.Empty:
            pass
        if control.error is not None:
            raise control.error
        control.raise_if_stopped()
        try:
            return q.get(timeout=_POLL_S)
        except queue.Empty:
            continue
