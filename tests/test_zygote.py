"""tests/zygote.py: a command forked from the tests' server behaves as the same command in a
new interpreter (what it prints, its exit status, its argv, path, working directory and
environment), and a new server takes its first command at once."""

import os
import signal
import subprocess
import sys

import pytest

from tests import zygote
from tests.helpers import ROOT, popen_python, process_env

_PROBE = """
import os, sys
print(sys.argv[1:], os.getcwd(), os.environ.get("SEBULBA_PROBE"), repr(sys.path[0]))
print("to stderr", file=sys.stderr)
"""

CASES = {
    "prints and exits 0": ["-c", _PROBE, "a", "b"],
    "SystemExit's code": ["-c", "import sys; sys.exit(3)"],
    "SystemExit's message": ["-c", "import sys; sys.exit('a message')"],
    "an uncaught exception": ["-c", "raise ValueError('boom')"],
    "a module in the working directory": ["-m", "probe_module", "x"],
    "a script": ["probe_module.py", "y"],
    "an atexit handler": ["-c", "import atexit; atexit.register(print, 'at exit')"],
    "a thread joined at exit": [
        "-c",
        "import threading, time; threading.Thread(target=lambda: (time.sleep(0.2), "
        "print('thread done'))).start()",
    ],
}


def _both(args, tmp_path):
    (tmp_path / "probe_module.py").write_text(_PROBE)
    env = {**process_env(), "SEBULBA_PROBE": "seen"}
    fresh = zygote.run(args, env=env, cwd=tmp_path, timeout=60, fork=False)
    forked = zygote.run(args, env=env, cwd=tmp_path, timeout=60)
    return fresh, forked


@pytest.mark.parametrize("case", CASES)
def test_a_forked_command_behaves_as_a_new_interpreter(case, tmp_path):
    fresh, forked = _both(CASES[case], tmp_path)
    assert forked.returncode == fresh.returncode
    assert forked.stdout == fresh.stdout
    if fresh.stderr.startswith("Traceback"):
        # The forked traceback has the server's frames above the command's.
        assert forked.stderr.splitlines()[-1] == fresh.stderr.splitlines()[-1]
    else:
        assert forked.stderr == fresh.stderr


def test_the_tests_commands_are_forked_and_a_signal_reaches_the_command(tmp_path):
    code = "import sys, time; print('started', flush=True); time.sleep(60)"
    process = popen_python(
        "-c", code, env=process_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert isinstance(process, zygote.ForkedProcess), "not forked: the server was refused"
    assert process.stdout.readline() == "started\n"
    assert process.poll() is None
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGINT  # As Python ends on a KeyboardInterrupt.
    assert err.splitlines()[-1] == "KeyboardInterrupt"


def test_a_new_server_takes_its_first_command_at_once(tmp_path):
    # A server of its own (an environment no other test uses), asked at once.
    env = {**process_env(), "SEBULBA_PROBE": str(tmp_path)}
    server = zygote._Server(env)  # noqa: SLF001
    try:
        assert server.usable, server.ready_line
        process = zygote.ForkedProcess(
            server, ["-c", "print('first')"], env, ROOT, None, subprocess.PIPE, None, True
        )
        out, _ = process.communicate(timeout=60)
        assert (out, process.returncode) == ("first\n", 0)
    finally:
        server.close()
    assert not os.path.exists(server.directory)


def test_a_new_environment_takes_the_place_of_an_idle_server_only(tmp_path, monkeypatch):
    # One server at most: a second environment gets a fresh interpreter while the first
    # server has a process running, and takes that server's place once it has none.
    monkeypatch.setattr(zygote, "_servers", {})  # This test's own servers.
    monkeypatch.setattr(zygote, "_MAX_SERVERS", 1)
    first, second = ({**process_env(), "SEBULBA_PROBE": f"{tmp_path}/{i}"} for i in (1, 2))
    wait_for_stdin = ["-c", "import sys; print(sys.stdin.read())"]
    streams = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        busy = zygote.popen(wait_for_stdin, env=first, cwd=tmp_path, **streams)
        assert isinstance(busy, zygote.ForkedProcess)
        fresh = zygote.popen(["-c", "print('fresh')"], env=second, cwd=tmp_path, **streams)
        assert isinstance(fresh, subprocess.Popen)
        assert fresh.communicate(timeout=60) == ("fresh\n", None)
        assert busy.communicate("still served", timeout=60) == ("still served\n", None)
        forked = zygote.popen(["-c", "print('forked')"], env=second, cwd=tmp_path, **streams)
        assert isinstance(forked, zygote.ForkedProcess)
        assert forked.communicate(timeout=60) == ("forked\n", None)
        assert [server.env for server in zygote._servers.values()] == [second]
    finally:
        for server in zygote._servers.values():
            server.close()


def test_library_code_run_here_forks_its_python_commands_in_a_session_of_their_own():
    # `fork_the_commands_of` (sebulba.sweep's runner, which signals each run's process
    # group): `[sys.executable, ...]` is forked, with Popen's `start_new_session`.
    process = zygote.FORKING_SUBPROCESS.Popen(
        [sys.executable, "-c", "import os; print(os.getsid(0) == os.getpid())"],
        env=process_env(),
        start_new_session=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert isinstance(process, zygote.ForkedProcess)
    assert process.communicate(timeout=60) == ("True\n", None)
    other = zygote.FORKING_SUBPROCESS.run(["true"], capture_output=True, text=True)
    assert other.returncode == 0 and zygote.FORKING_SUBPROCESS.PIPE == subprocess.PIPE
