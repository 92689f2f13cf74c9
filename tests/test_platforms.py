"""No libtpu noise on a machine without accelerators: JAX starts its CPU backend alone."""

import os

import pytest

from sebulba.runtime import platforms
from tests.helpers import run_python
from tests.test_cli import ROOT, TEST_CONFIG


def test_the_cpu_alone_is_chosen_only_where_no_accelerator_can_start(monkeypatch):
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    monkeypatch.setattr(platforms, "only_cpu_present", lambda: False)
    platforms.skip_absent_accelerators()
    assert "JAX_PLATFORMS" not in os.environ  # A GPU or TPU may start: JAX decides.
    monkeypatch.setattr(platforms, "only_cpu_present", lambda: True)
    monkeypatch.setenv("JAX_PLATFORMS", "cpu,tpu")
    platforms.skip_absent_accelerators()
    assert os.environ["JAX_PLATFORMS"] == "cpu,tpu"  # The user's choice stands.


def test_a_run_and_an_evaluation_print_no_tpu_errors_on_a_cpu_machine(tmp_path):
    if not platforms.only_cpu_present():
        pytest.skip("an accelerator device is present: JAX is left to find its devices")
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    workdir = tmp_path / "run"
    commands = [
        ["sebulba.main", f"--config={TEST_CONFIG}", f"--workdir={workdir}"],
        ["sebulba.evaluate", f"--workdir={workdir}", "--episodes=1"],
    ]
    for command in commands:
        result = run_python("-m", *command, env=env, timeout=180)
        assert result.returncode == 0, result.stderr[-2000:]
        for noise in ("TPU_ACCELERATOR_TYPE", "TPU_WORKER_HOSTNAMES", "E0000"):
            assert noise not in result.stderr, result.stderr[-2000:]


def test_library_callers_get_no_tpu_errors_on_a_cpu_machine():
    # train.train, load_policy and evaluation from Python start JAX through `sebulba`,
    # without the command lines' start-up: importing the package is what keeps it quiet.
    if not platforms.only_cpu_present():
        pytest.skip("an accelerator device is present: JAX is left to find its devices")
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    for imported in ("from sebulba import train", "import sebulba.policy", "import sebulba"):
        code = f"{imported}\nimport jax\nprint(jax.devices()[0].platform)"
        result = run_python("-c", code, env=env, timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout.strip() == "cpu"
        for noise in ("TPU_ACCELERATOR_TYPE", "TPU_WORKER_HOSTNAMES", "E0000"):
            assert noise not in result.stderr, (imported, result.stderr[-2000:])
    # A choice made in code before importing sebulba stands.
    code = "import jax\njax.config.update('jax_platforms', 'cpu')\nimport sebulba\nimport os\n"
    code += "print(os.environ.get('JAX_PLATFORMS'))"
    result = run_python("-c", code, env=env, timeout=120)
    assert result.stdout.strip() == "None", result.stderr[-2000:]
