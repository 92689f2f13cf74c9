"""Deterministic GPU execution is decided before JAX starts, and recorded."""

import json
import os
import subprocess
import sys
import types

import pytest

from sebulba import train
from sebulba.errors import ConfigError
from sebulba.runtime import gpu_determinism
from tests import minimal_agent
from tests.helpers import agent_config, read_summary

FLAG = "--xla_gpu_deterministic_ops=true"


def test_the_flag_is_added_to_a_users_flags_and_never_twice():
    assert gpu_determinism.xla_flags_for(True, "") == FLAG
    user = "--xla_force_host_platform_device_count=8"
    assert gpu_determinism.xla_flags_for(True, user) == f"{user} {FLAG}"
    assert gpu_determinism.xla_flags_for(True, f"{user} {FLAG}") == f"{user} {FLAG}"
    assert gpu_determinism.xla_flags_for(False, user) == user


def test_flags_that_turn_it_off_are_refused_naming_the_key():
    with pytest.raises(ConfigError, match="debug.deterministic_gpu is True but XLA_FLAGS sets"):
        gpu_determinism.xla_flags_for(True, "--xla_gpu_deterministic_ops=false")
    assert gpu_determinism.xla_flags_for(False, "--xla_gpu_deterministic_ops=false")


def test_a_gpu_backend_started_without_the_flags_is_refused(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "")
    monkeypatch.setattr(gpu_determinism, "backend_started", lambda: True)
    monkeypatch.setitem(sys.modules, "jax", types.SimpleNamespace(default_backend=lambda: "gpu"))
    with pytest.raises(ConfigError, match="started its GPU backend before"):
        gpu_determinism.configure(True)
    gpu_determinism.configure(False)  # Nothing to set: no error.
    # A CPU backend has no use for the flags: started or not, nothing to refuse.
    monkeypatch.setitem(sys.modules, "jax", types.SimpleNamespace(default_backend=lambda: "cpu"))
    gpu_determinism.configure(True)
    assert os.environ["XLA_FLAGS"] == ""


def test_the_command_line_sets_the_flag_before_jax_starts_and_xla_accepts_it(tmp_path):
    # In a fresh process: configure, then start JAX's backend and compute with the flag.
    code = (
        "from sebulba.runtime import gpu_determinism\n"
        "assert not gpu_determinism.backend_started()\n"
        "gpu_determinism.configure(True)\n"
        "import jax, jax.numpy as jnp, os\n"
        "print(float(jnp.sum(jnp.ones(3))), os.environ['XLA_FLAGS'])\n"
    )
    env = {**os.environ, "XLA_FLAGS": "", "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["3.0", FLAG]


def test_the_summary_records_the_request_and_the_flags(tmp_path, monkeypatch):
    # The suite's JAX started long ago (on CPU, which ignores the flag): the summary
    # records what XLA_FLAGS held when it started.
    config = agent_config(minimal_agent, total_timesteps=8 * 16 * 2)
    train.train(config, str(tmp_path))
    summary = read_summary(str(tmp_path))
    assert summary["backend"] == "cpu"
    expected_flags = (
        {"xla_gpu_deterministic_ops": "true"} if FLAG in os.environ.get("XLA_FLAGS", "") else {}
    )
    assert summary["gpu_determinism"] == {"requested": True, "xla_flags": expected_flags}
    stored = json.load(open(os.path.join(tmp_path, "config.json")))
    assert stored["debug"]["deterministic_gpu"] is True


def test_deterministic_kernels_reads_what_configure_sets(monkeypatch):
    # What agent.max_pool=auto reads to choose the ResNet's max-pool on a GPU.
    monkeypatch.setenv("XLA_FLAGS", gpu_determinism.xla_flags_for(True, "--xla_dump_to=/tmp/d"))
    assert gpu_determinism.deterministic_kernels()
    monkeypatch.setenv("XLA_FLAGS", gpu_determinism.xla_flags_for(False, "--xla_dump_to=/tmp/d"))
    assert not gpu_determinism.deterministic_kernels()
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_deterministic_ops=false")
    assert not gpu_determinism.deterministic_kernels()
    monkeypatch.delenv("XLA_FLAGS")
    assert not gpu_determinism.deterministic_kernels()
