"""A run holds its workdir: a second run on it is refused in one line naming the holder,
before any work and again at its first write, touching nothing; a dead holder frees it."""

import json
import os
import socket

import pytest

from sebulba import train
from sebulba.anakin import seeds as seeds_lib
from sebulba.errors import ConfigError
from sebulba.runtime import workdir as workdir_lib
from tests import minimal_agent
from tests.helpers import (
    ROOT,
    agent_config,
    read_summary,
    run_python,
    workdir_held_by_another_process,
)
from tests.test_anakin import anakin_config


def test_a_held_workdir_is_refused_naming_the_process_that_holds_it(tmp_path):
    workdir = tmp_path / "run"
    with workdir_held_by_another_process(workdir) as pid:
        with pytest.raises(ConfigError) as error:
            workdir_lib.check_not_in_use(str(workdir))
        message = str(error.value)
        assert "\n" not in message
        assert message.startswith(
            f"workdir {workdir} is in use by another run: pid {pid} on host "
            f"{socket.gethostname()} since "
        ), message
        assert "-c import sys, time from sebulba.runtime import workdir" in message
        with pytest.raises(ConfigError, match="is in use by another run"):
            workdir_lib.hold(str(workdir))
    # Killed without releasing it: the kernel dropped the lock with the process.
    workdir_lib.check_not_in_use(str(workdir))
    workdir_lib.hold(str(workdir))
    try:
        workdir_lib.hold(str(workdir))  # Holding it again is a no-op (one run, two opens).
        holder = json.loads((workdir / workdir_lib.LOCK_FILE).read_text())
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
    finally:
        workdir_lib.release(str(workdir))
    workdir_lib.release(str(workdir))  # Releasing what is not held: nothing.


def test_train_refuses_a_held_workdir_before_building_anything(tmp_path, monkeypatch):
    def must_not_run(config):
        raise AssertionError("train.prepare ran on a workdir another run holds")

    monkeypatch.setattr(train, "prepare", must_not_run)
    workdir = tmp_path / "run"
    with workdir_held_by_another_process(workdir):
        with pytest.raises(ConfigError, match="is in use by another run"):
            train.train(agent_config(minimal_agent), str(workdir))
    assert os.listdir(workdir) == [workdir_lib.LOCK_FILE]


def test_a_run_that_finds_its_workdir_taken_at_its_first_write_writes_nothing(
    tmp_path, monkeypatch
):
    # Two runs started together both pass the early check; the second to reach its first
    # write is refused there.
    monkeypatch.setattr(workdir_lib, "check_not_in_use", lambda workdir: None)
    workdir = tmp_path / "run"
    config = agent_config(minimal_agent)
    with workdir_held_by_another_process(workdir):
        with pytest.raises(ConfigError, match="is in use by another run"):
            train.train(config, str(workdir))
        assert os.listdir(workdir) == [workdir_lib.LOCK_FILE]
    # Once the holder is gone the same call trains, and releases the workdir at its end.
    train.train(config, str(workdir))
    assert read_summary(str(workdir))["updates"] > 0
    with workdir_held_by_another_process(workdir):
        pass


def _refused_by_another_process(workdir) -> bool:
    """Whether a fresh process finds `workdir` in use."""
    code = "import sys\nfrom sebulba.runtime import workdir\nworkdir.check_not_in_use(sys.argv[1])"
    result = run_python("-c", code, str(workdir), env=dict(os.environ, PYTHONPATH=ROOT))
    return result.returncode != 0 and "is in use by another run" in result.stderr


def test_a_second_run_in_the_same_process_is_refused_and_leaves_the_first_holding(tmp_path):
    # A thread or a library caller starting a run on a workdir a run of this process holds:
    # the flock alone would let it in (one process), and its end would drop the first's lock.
    workdir = tmp_path / "run"
    workdir_lib.hold(str(workdir))  # As the first run's open_outputs does.
    try:
        with pytest.raises(ConfigError, match=rf"pid {os.getpid()}, this process"):
            train.train(agent_config(minimal_agent), str(workdir))
        assert _refused_by_another_process(workdir)  # Still held.
    finally:
        workdir_lib.release(str(workdir))
    assert not _refused_by_another_process(workdir)


def test_a_lock_file_this_user_may_only_read_is_locked_read_only(tmp_path, monkeypatch):
    # Another user's run left the file (a group-shared workdir, a stricter umask): flock
    # works on a read-only descriptor, and the other user's holder line stays. (Root may
    # write any file, so the refused open is simulated.)
    workdir = tmp_path / "run"
    workdir.mkdir()
    (workdir / workdir_lib.LOCK_FILE).write_text('{"pid": 1}')
    real_open = os.open

    def open_read_only(path, flags, *args):
        if flags & os.O_RDWR:
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, flags, *args)

    monkeypatch.setattr(workdir_lib.os, "open", open_read_only)
    workdir_lib.check_not_in_use(str(workdir))
    workdir_lib.hold(str(workdir))
    try:
        assert _refused_by_another_process(workdir)
        assert (workdir / workdir_lib.LOCK_FILE).read_text() == '{"pid": 1}'
    finally:
        workdir_lib.release(str(workdir))


def test_a_seeds_run_holds_every_seeds_workdir_before_writing_any(tmp_path, monkeypatch):
    monkeypatch.setattr(workdir_lib, "check_not_in_use", lambda workdir: None)
    runs = tmp_path / "runs"
    with workdir_held_by_another_process(seeds_lib.seed_workdir(str(runs), 2)):
        with pytest.raises(ConfigError, match="is in use by another run"):
            seeds_lib.train_seeds(anakin_config(), str(runs), (1, 2))
    # Seed 1's workdir, taken before seed 2's was refused, was given back unwritten.
    assert not (runs / "seed=1" / "config.json").exists()
    assert not _refused_by_another_process(runs / "seed=1")
