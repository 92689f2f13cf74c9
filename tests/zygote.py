"""Test infrastructure: the `python ARGS` processes a test starts, forked from a server
process that has already imported what sebulba's commands import.

A sebulba command spends about 3 CPU-seconds importing JAX, envpool (whose Jumanji
registration imports matplotlib) and sebulba's run modules before it reads a flag; the
suite starts a few hundred of them. `popen` forks each from a server (one per pytest
process) that imported those modules once, and the child then runs `-m MODULE`, `-c CODE`
or `SCRIPT` as the interpreter would: a fresh `__main__`, `sys.argv`, `sys.path[0]`, the
working directory, environment and standard streams asked for, and Python's own handling
of the exit (an uncaught exception's traceback and exit status 1, `SystemExit`'s code,
death by SIGINT for an uncaught KeyboardInterrupt, atexit handlers).

What a fork cannot give a fresh interpreter, and so when `popen` starts one instead:

* Environment variables read while importing (JAX's `JAX_*` options, `PYTHONPATH`,
  `LD_PRELOAD`, `PYTHON*`) are the server's: a process whose environment differs from
  the server's in anything but `XLA_FLAGS` (XLA reads it when JAX starts its backends,
  after the fork) and `PYTEST_CURRENT_TEST` is started as a fresh interpreter.
* The server imports nothing that a command runs as `__main__` (`sebulba.main`,
  `sebulba.evaluate`, ...), starts no JAX backend and no thread of its own, and must
  print nothing while importing (a command's output would lack it): where it prints,
  every process is a fresh interpreter.
* `SEBULBA_TEST_ZYGOTE=0` turns it off: every process a fresh interpreter.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings

# What sebulba's commands import before their first flag is read; the modules they run as
# `__main__` are left out (a module imported before `runpy` runs it would be a second copy
# and Python warns about it).
PRELOADED = (
    "absl.app",
    "ml_collections.config_flags",
    "sebulba.train",
    "sebulba.policy",
    # The agents, and through them distrax, rlax, mctx and optax.
    "sebulba.agents.alphazero",
    "sebulba.agents.dqn",
    "sebulba.agents.impala",
    "sebulba.agents.muzero",
    "sebulba.agents.ppo",
    "sebulba.agents.pqn",
    "sebulba.agents.sac",
)
# Variables no import reads: XLA reads its flags when JAX starts its backends, which the
# server never does; pytest names the running test (so every test's environment differs).
_READ_AFTER_THE_FORK = frozenset({"XLA_FLAGS", "PYTEST_CURRENT_TEST"})

# Run with `-c` from a directory of its own (so that `sys.path[0]`, '', finds nothing), as
# a `-c` command is run: the tests' checkout is on the path only to import this module.
_SERVER = r"""
import sys
sys.path.insert(0, sys.argv[2])
from tests import zygote
del sys.path[0]
zygote.serve(sys.argv[1])
"""


def _key(env):
    return tuple(sorted((k, v) for k, v in env.items() if k not in _READ_AFTER_THE_FORK))


class _Server:
    """One forking server, its environment fixed at start."""

    def __init__(self, env):
        self.env = dict(env)
        self.directory = tempfile.mkdtemp(prefix="sebulba-zygote-")
        self.address = os.path.join(self.directory, "socket")
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVER, self.address, root],
            env=self.env,
            cwd=self.directory,
            stdin=subprocess.PIPE,  # Its end of the pipe closing tells the server to stop.
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        # The processes forked from it that have not been seen to end (`_servers_lock`):
        # a server is closed for another only while it has none.
        self.running = 0
        self.last_used = time.monotonic()
        # The first line: "ready", or why this server cannot stand in for an interpreter.
        self.ready_line = self.process.stdout.readline().rstrip("\n")
        self.usable = self.ready_line == "ready"
        if not self.usable:
            self.close()

    def log_tail(self):
        try:
            with open(self.address + ".log", encoding="utf-8", errors="replace") as log:
                return log.read()[-2000:] or "(its log is empty)"
        except OSError as error:
            return f"(no log: {error})"

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()
        try:
            shutil.rmtree(self.directory)
        except OSError:
            pass


def _drop(server):
    with _servers_lock:
        for key, value in list(_servers.items()):
            if value is server:
                del _servers[key]
    server.close()


_servers: dict = {}
_servers_lock = threading.Lock()


# The tests start most processes with one of a few environments (tests/helpers.py's
# `process_env`, the marked tests' pytest processes, a test file's own variables); a test
# file's processes share one. Each server holds about 340 MB: a new environment closes
# the server used least recently, or, where every server has processes running, is
# started as a fresh interpreter.
_MAX_SERVERS = 3


def _server_for(env):
    """The usable server for `env` with a process reserved on it (`_release` frees it),
    or None."""
    key = _key(env)
    with _servers_lock:
        server = _servers.get(key)
        if server is None:
            if len(_servers) >= _MAX_SERVERS:
                idle = [(s.last_used, k) for k, s in _servers.items() if s.running == 0]
                if not idle:
                    return None
                _servers.pop(min(idle)[1]).close()
            server = _servers[key] = _Server(env)
        if not server.usable:
            return None
        server.running += 1
        server.last_used = time.monotonic()
        return server


def _release(server):
    with _servers_lock:
        server.running -= 1


@atexit.register
def _close_servers():
    for server in _servers.values():
        server.close()


def _enabled():
    return os.environ.get("SEBULBA_TEST_ZYGOTE", "1") != "0" and hasattr(os, "fork")


def popen(
    args,
    *,
    env,
    cwd,
    stdin=None,
    stdout=None,
    stderr=None,
    text=False,
    start_new_session=False,
    fork=True,
):
    """`subprocess.Popen([sys.executable, *args], ...)` for `args` of `-m MODULE ...`,
    `-c CODE ...` or `SCRIPT ...`: forked from a server where it can be (module
    docstring) and `fork` is True, else a fresh interpreter. Returns a Popen or an object
    with Popen's `pid`, `returncode`, `stdout`, `stderr`, `poll`, `wait`, `communicate`,
    `send_signal`, `terminate` and `kill`."""
    runnable = args and (args[0] in ("-m", "-c") and len(args) > 1 or not args[0].startswith("-"))
    env = dict(os.environ if env is None else env)
    streams = {"stdin": stdin, "stdout": stdout, "stderr": stderr, "text": text}

    def start(server):
        if server is None:
            return subprocess.Popen(
                [sys.executable, *args],
                env=env,
                cwd=cwd,
                start_new_session=start_new_session,
                **streams,
            )
        return ForkedProcess(
            server, list(args), env, os.fspath(cwd), new_session=start_new_session, **streams
        )

    server = _server_for(env) if fork and runnable and _enabled() else None
    try:
        return start(server)
    except ConnectionError:
        # The server is gone: said as a warning, with its log, and a new one forks this.
        warnings.warn(f"the forking server for tests ended: {server.log_tail()}", stacklevel=2)
        _release(server)
        _drop(server)
        return start(_server_for(env))


def run(args, *, env, cwd, timeout=None, fork=True):
    """`subprocess.run([sys.executable, *args], capture_output=True, text=True, ...)`
    through `popen`."""
    process = popen(
        args,
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        fork=fork,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return subprocess.CompletedProcess([sys.executable, *args], process.returncode, out, err)


# What `popen` takes besides the command, its environment and working directory.
_POPEN_OPTIONS = frozenset({"stdin", "stdout", "stderr", "text", "start_new_session"})


class _ForkingSubprocess:
    """The `subprocess` module as library code that a test runs in its own process sees it
    (set as, say, `sebulba.sweep.subprocess` with monkeypatch): its `Popen` and `run` of
    `[sys.executable, *ARGS]` go through `popen` and `run` above, so that the runs a sweep
    or a population starts are forked too; everything else is the subprocess module's."""

    def __getattr__(self, name):
        return getattr(subprocess, name)

    @staticmethod
    def Popen(command, *, env=None, cwd=None, **options):  # noqa: N802 - subprocess's name.
        if list(command[:1]) != [sys.executable] or not set(options) <= _POPEN_OPTIONS:
            return subprocess.Popen(command, env=env, cwd=cwd, **options)
        return popen(list(command[1:]), env=env, cwd=cwd or os.getcwd(), **options)

    @staticmethod
    def run(command, *, env=None, cwd=None, capture_output=False, text=False, **options):
        forkable = capture_output and text and set(options) <= {"timeout"}
        if list(command[:1]) != [sys.executable] or not forkable:
            return subprocess.run(
                command, env=env, cwd=cwd, capture_output=capture_output, text=text, **options
            )
        return run(list(command[1:]), env=env, cwd=cwd or os.getcwd(), **options)


FORKING_SUBPROCESS = _ForkingSubprocess()


class ForkedProcess:
    """A process forked by a server, handled as a `subprocess.Popen`."""

    def __init__(self, server, args, env, cwd, stdin, stdout, stderr, text, new_session=False):
        self.args = [sys.executable, *args]
        self.returncode = None
        self.stdin = None
        self._server = server  # Reserved by `_server_for`; released once the end is read.
        self._connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._connection.connect(server.address)
        except OSError as error:
            self._connection.close()
            raise ConnectionError(error) from error
        parent_ends, child_fds = [], []
        for spec, fd in ((stdin, 0), (stdout, 1), (stderr, 2)):
            if spec == subprocess.PIPE:
                read, write = os.pipe()
                mine, theirs = (write, read) if fd == 0 else (read, write)
                parent_ends.append((fd, mine))
                child_fds.append(theirs)
            elif spec == subprocess.DEVNULL:
                child_fds.append(os.open(os.devnull, os.O_RDWR))
            elif spec == subprocess.STDOUT:
                child_fds.append(None)
            elif spec is None:  # Inherited; where this process has none, nothing.
                try:
                    child_fds.append(os.dup(fd))
                except OSError:
                    child_fds.append(os.open(os.devnull, os.O_RDWR))
            else:
                child_fds.append(os.dup(spec if isinstance(spec, int) else spec.fileno()))
        if child_fds[2] is None:
            child_fds[2] = os.dup(child_fds[1])
        request = {"args": args, "env": env, "cwd": cwd, "new_session": new_session}
        request = json.dumps(request).encode()
        socket.send_fds(self._connection, [request + b"\n"], child_fds)
        for fd in child_fds:
            os.close(fd)
        self._reader = self._connection.makefile("r")
        pid = self._reader.readline()
        if not pid:  # The server ended before it forked.
            for _, mine in parent_ends:
                os.close(mine)
            self._reader.close()
            self._connection.close()
            raise ConnectionError("the server closed the connection")
        self.pid = int(pid)
        self.stdout = self.stderr = None
        for fd, mine in parent_ends:
            mode = "w" if fd == 0 else "r"
            stream = open(mine, mode) if text else open(mine, mode + "b")
            setattr(self, ("stdin", "stdout", "stderr")[fd], stream)

    def poll(self):
        if self.returncode is None:
            ready, _, _ = select.select([self._connection], [], [], 0)
            if ready:
                self._read_status()
        return self.returncode

    def _read_status(self):
        line = self._reader.readline()
        # The server died (only if the test run is ending): the process's state is unknown.
        self.returncode = int(line) if line else -signal.SIGKILL
        self._reader.close()
        self._connection.close()
        _release(self._server)

    def wait(self, timeout=None):
        if self.returncode is None:
            ready, _, _ = select.select([self._connection], [], [], timeout)
            if not ready:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._read_status()
        return self.returncode

    def communicate(self, input=None, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.stdin is not None:
            if input:
                self.stdin.write(input)
            self.stdin.close()
        results, threads = {}, []
        for name in ("stdout", "stderr"):
            stream = getattr(self, name)
            if stream is not None and not stream.closed:

                def read(stream=stream, name=name):
                    results[name] = stream.read()

                threads.append(threading.Thread(target=read, daemon=True))
                threads[-1].start()
        for thread in threads:
            thread.join(None if deadline is None else max(deadline - time.monotonic(), 0))
            if thread.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        for name in ("stdout", "stderr"):
            stream = getattr(self, name)
            if stream is not None:
                stream.close()
        self.wait(None if deadline is None else max(deadline - time.monotonic(), 0))
        return results.get("stdout"), results.get("stderr")

    def send_signal(self, signum):
        # As Popen does: a process whose end the server has reported is not signalled (its
        # pid may be another process's by now).
        if self.poll() is None:
            os.kill(self.pid, signum)

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)


# The server side.


def serve(address):
    """Imports PRELOADED, then forks a child per request on `address` until its stdin
    closes; writes "ready" (or why it cannot serve) as its first line."""
    captured = tempfile.TemporaryFile()
    saved = os.dup(1), os.dup(2)
    os.dup2(captured.fileno(), 1)
    os.dup2(captured.fileno(), 2)
    problem = None
    threads_of_blas = None
    try:
        import importlib

        # numpy's and scipy's OpenBLAS each start a thread pool at import, and are fork-safe
        # (they stop and restart it around a fork); any thread past theirs is unknown.
        import numpy  # noqa: F401
        import scipy.linalg  # noqa: F401

        threads_of_blas = _threads()
        for name in PRELOADED:
            importlib.import_module(name)
        from sebulba.environments.envpool_registry import import_envpool

        import_envpool()
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception as error:  # noqa: BLE001 - any failure: the tests start interpreters.
        problem = f"importing failed: {error!r}"
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
    captured.seek(0)
    printed = captured.read().decode(errors="replace").strip()
    captured.close()
    if problem is None and printed:
        problem = "importing printed: " + printed.splitlines()[0]
    if problem is None:
        from jax._src import xla_bridge

        if xla_bridge._backends:  # noqa: SLF001 - a started backend cannot be forked.
            problem = "importing started a JAX backend"
    if problem is None and _threads() > threads_of_blas:
        problem = f"importing started {_threads() - threads_of_blas} threads besides BLAS's"
    if problem:
        print(problem, flush=True)
        return
    # The children's collections leave what was imported here alone, so that they do not
    # touch (and so copy) the pages that hold it.
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    # "ready" once the socket takes connections: the client connects as soon as it reads it.
    print("ready", flush=True)
    # From here on the server's own output (a failed request's traceback) goes to a log
    # beside its socket: nobody reads the pipe it said "ready" on.
    log = os.open(address + ".log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    waiting = {}  # pid -> the connection its status goes to
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [], 0.05 if waiting else 1.0)
        for pid in list(waiting):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                _send(waiting.pop(pid), os.waitstatus_to_exitcode(status), close=True)
        if sys.stdin in ready and not sys.stdin.buffer.read1(1):
            return  # The pytest process ended or closed the pipe.
        if listener in ready:
            connection, _ = listener.accept()
            try:
                request, fds = _receive(connection)
            except (OSError, ValueError):
                traceback.print_exc()
                connection.close()
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                listener.close()
                for other in waiting.values():
                    other.close()
                connection.close()
                _become(request, fds)
                _exit_as_python_does(_run, request["args"])
            for fd in fds:
                os.close(fd)
            if _send(connection, pid):
                waiting[pid] = connection
            else:  # The test is gone (its pytest process is ending): nobody waits.
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)


def _receive(connection):
    message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
    while not message.endswith(b"\n"):
        more = connection.recv(1 << 20)
        if not more:
            raise ValueError("the request ended early")
        message += more
    return json.loads(message), fds


def _send(connection, number, close=False):
    try:
        connection.sendall(f"{number}\n".encode())
        return True
    except OSError:
        traceback.print_exc()
        return False
    finally:
        if close:
            connection.close()


def _threads():
    return len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 1


def _become(request, fds):
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    if request["new_session"]:  # Popen's `start_new_session`.
        os.setsid()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.orig_argv = [sys.executable, *request["args"]]


def _exit_as_python_does(run, args):
    """Runs `run(args)` and ends the process as the interpreter would end it: an uncaught
    exception's traceback and status 1, `SystemExit`'s code or message, death by SIGINT
    after an uncaught KeyboardInterrupt; non-daemon threads joined, then atexit handlers.
    It then skips the interpreter's teardown of every module, which in a forked child
    copies the whole inherited heap page by page (a second per process)."""
    import threading

    status, interrupted = 0, False
    try:
        run(args)
    except SystemExit as error:
        status = _exit_status(error.code)
    except BaseException as error:  # noqa: BLE001 - reported as the interpreter does.
        interrupted = isinstance(error, KeyboardInterrupt)
        sys.excepthook(type(error), error, error.__traceback__)
        status = 1
    try:
        threading._shutdown()  # noqa: SLF001 - what the interpreter runs at exit.
        atexit._run_exitfuncs()  # noqa: SLF001
    except SystemExit as error:
        status = _exit_status(error.code)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(status)


def _exit_status(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _run(args):
    """Runs `args` as `python ARGS` does, in this process."""
    import runpy
    import types

    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    if args[0] == "-m":
        sys.argv = ["-m", *args[2:]]
        sys.path[0] = os.getcwd()
        sys.modules.pop(args[1], None)
        runpy._run_module_as_main(args[1])  # noqa: SLF001 - what `python -m` itself runs.
    elif args[0] == "-c":
        sys.argv = ["-c", *args[2:]]
        sys.path[0] = ""
        exec(compile(args[1], "<string>", "exec"), main.__dict__)  # noqa: S102
    else:
        sys.argv = list(args)
        sys.path[0] = os.path.dirname(os.path.realpath(args[0]))
        runpy.run_path(args[0], run_name="__main__")
