"""A run holds its workdir: a second run on it is refused in one line naming the holder,
before any work and again at its first write, touching nothing; a dead holder frees it."""

import json
import os
import socket

import pytest

from sebulba import train
from sebulba.errors import ConfigError
from sebulba.runtime import workdir as workdir_lib
from tests import minimal_agent
from tests.helpers import agent_config, read_summary, workdir_held_by_another_process


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
        workdir_lib.hold(str(workdir))  # Holding it again is a no-op, and this process
        workdir_lib.check_not_in_use(str(workdir))  # does not refuse itself.
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
