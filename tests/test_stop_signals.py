"""The command line's stop signals are heard while the main thread is blocked inside XLA.

A signal before a run has anything worth saving, or a second signal, ends the process at
once; Python alone would run its handler only after the XLA computation returns.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The main thread blocks in one XLA computation of many minutes (a long chain of
# matrix products) after saying it is ready.
_BLOCKED_IN_XLA = """
import sys
from sebulba.runtime.stop_signals import StopSignals

with StopSignals(exit_at_once=True) as signals:
    if sys.argv[1] == "saveable":
        signals.mark_saveable()
    import jax
    import jax.numpy as jnp

    def chain(x):
        return jax.lax.fori_loop(0, 10**7, lambda i, y: jnp.tanh(y @ y), x)

    compiled = jax.jit(chain).lower(jnp.ones((256, 256))).compile()
    print("blocked", flush=True)
    compiled(jnp.ones((256, 256))).block_until_ready()
print("finished", flush=True)
"""


def _start(mode):
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}
    process = subprocess.Popen(
        [sys.executable, "-c", _BLOCKED_IN_XLA, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdout.readline() == "blocked\n", process.stderr.read()
    time.sleep(0.5)  # Inside the computation by now.
    return process


def _wait(process, timeout=30):
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"still running {timeout} s after the signal, blocked in XLA")


def test_a_signal_before_anything_is_saveable_ends_the_process_at_once():
    process = _start("start-up")
    process.send_signal(signal.SIGINT)
    out, err = _wait(process)
    assert process.returncode == 130, err[-2000:]
    assert "SIGINT received before the first update finished: stopping at once" in err
    assert "finished" not in out


def test_sigterm_before_anything_is_saveable_exits_0():
    process = _start("start-up")
    process.send_signal(signal.SIGTERM)
    _, err = _wait(process)
    assert process.returncode == 0, err[-2000:]
    assert "SIGTERM received before the first update finished" in err


def test_a_second_signal_ends_the_process_at_once_whatever_xla_is_doing():
    process = _start("saveable")
    process.send_signal(signal.SIGINT)
    # The first one is heard at once too, though the main thread is blocked.
    deadline = time.monotonic() + 30
    err_lines = []
    while not any("finishing the current update" in line for line in err_lines):
        assert time.monotonic() < deadline and process.poll() is None
        err_lines.append(process.stderr.readline())
    process.send_signal(signal.SIGINT)
    out, err = _wait(process)
    assert process.returncode == 130, err[-2000:]
    assert "second SIGINT: stopping at once, without a checkpoint" in err
    assert "finished" not in out


def test_library_callers_keep_a_living_process(tmp_path):
    # Without exit_at_once (train.train called from Python) a second signal raises
    # KeyboardInterrupt in the main thread and the handlers are restored afterwards.
    from sebulba.runtime.stop_signals import StopSignals

    previous = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt, match="second SIGINT"):
        with StopSignals() as signals:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            assert signals.received == "SIGINT"
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
    assert signal.getsignal(signal.SIGINT) is previous
