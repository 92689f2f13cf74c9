"""Checks that only mean something on a GPU; they skip, saying why, where JAX has none.

Run them on a GPU machine with `python -m pytest tests/gpu -n 0`. Each runs the command
line in a subprocess that sees the GPUs (the suite's own process is pinned to 8 virtual
CPU devices), a few updates of the shipped Atari configs:

* scan rollouts give the step loop's data on a GPU, up to float rounding, with one actor
  thread of 128 envs; with 64 envs per thread, one thread or two, they do not
  (non-finite losses at update 1 on an H100 and on an H200), so those cases are expected
  failures and `pipeline.actor_loop=auto` does not choose them (docs/architecture.md,
  "The actor loop on GPUs");
* actors on the host's CPUs (`mesh.actor_platform="cpu"`) feed the GPU learner the same
  data in any layout;
* the shipped configs' first updates are finite and the same seed gives the same
  `params_checksum` twice (deterministic GPU execution, `debug.deterministic_gpu`);
* actors on one GPU and the learner on another give the numbers of both on one.
"""

import functools
import importlib.metadata
import json
import math
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UPDATES = 3


def _gpu_env() -> dict[str, str]:
    """The environment of a run that sees the machine's GPUs."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_FLAGS")}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["SEBULBA_COMPILATION_CACHE_DIR"] = ""
    return env


@functools.cache
def _gpu_count() -> tuple[int, str]:
    """How many GPUs JAX sees, and if none, why."""
    plugins = [
        dist.metadata["Name"]
        for dist in importlib.metadata.distributions()
        if (dist.metadata["Name"] or "").lower().replace("_", "-").startswith("jax-cuda")
    ]
    if not plugins:
        return 0, "no GPU: JAX has no CUDA plugin in this environment"
    probe = "import jax; print(sum(d.platform == 'gpu' for d in jax.devices()))"
    result = subprocess.run(
        [sys.executable, "-c", probe], env=_gpu_env(), capture_output=True, text=True, timeout=300
    )
    if result.returncode != 0:
        return 0, f"no GPU: JAX failed to start its CUDA backend ({result.stderr.strip()[-200:]})"
    count = int(result.stdout.strip().splitlines()[-1])
    return count, "" if count else "no GPU: JAX sees none"


def _require_gpus(n: int) -> None:
    count, why = _gpu_count()
    if count < n:
        pytest.skip(why or f"needs {n} GPUs, JAX sees {count}")


def _run(workdir, config: str, *overrides: str) -> dict:
    """A run of `config` for UPDATES updates on the GPU(s); its summary, with its metrics
    lines under "metrics"."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sebulba.main",
            f"--config={config}",
            f"--workdir={workdir}",
            "--config.log.tensorboard=False",
            "--config.ckpt.every_updates=0",
            *overrides,
        ],
        env=_gpu_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    with open(os.path.join(workdir, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        metrics = [json.loads(line) for line in f]
    assert summary["backend"] == "gpu"
    assert summary["updates"] == UPDATES
    for line in metrics:
        losses = {k: v for k, v in line.items() if "loss" in k}
        assert losses and all(v is not None and math.isfinite(v) for v in losses.values()), line
    return {**summary, "metrics": metrics}


def _steps(steps_per_update: int) -> str:
    return f"--config.total_timesteps={UPDATES * steps_per_update}"


def _unverified(reason: str):
    return pytest.mark.xfail(
        strict=True,
        reason=f"{reason}: non-finite losses at update 1 on an H200 (2026-11-26); once this "
        "passes, widen the GPU entry of scan_actor.VERIFIED_SCAN",
    )


@pytest.mark.parametrize(
    "threads, envs",
    [
        (1, 128),
        pytest.param(1, 64, marks=_unverified("one thread of 64 envs")),
        pytest.param(2, 64, marks=_unverified("two threads of 64 envs sharing the GPU")),
    ],
)
def test_scan_rollouts_give_the_step_loops_data_on_one_gpu(tmp_path, threads, envs):
    """On a GPU the policy runs in a different XLA program in each loop (inside the rollout's
    scan, or alone), and the two round differently in the last bits, even with autotuning
    off: update 1 learns from the same rollout up to that rounding (its losses agreed to
    2e-3 on an H200), and the runs then part as any two chaotic runs do, so the checksums
    are not compared. Data from the wrong place would move update 1's losses far more."""
    _require_gpus(1)
    # IMPALA Atari: `envs` per thread x 20 steps per update.
    config = "configs/impala_atari.py:Breakout-v5"
    overrides = (
        f"--config.pipeline.num_actor_threads={threads}",
        f"--config.env.num_envs={envs}",
        _steps(threads * envs * 20),
        "--config.log.every_updates=1",
    )
    step = _run(tmp_path / "step", config, *overrides, "--config.pipeline.actor_loop=step")
    scan = _run(tmp_path / "scan", config, *overrides, "--config.pipeline.actor_loop=scan")
    assert scan["actor_loop"] == "scan" and step["actor_loop"] == "step"
    first_scan, first_step = scan["metrics"][0], step["metrics"][0]
    assert first_scan["update"] == first_step["update"] == 1
    for name in ("policy_loss", "value_loss", "entropy"):
        assert first_scan[name] == pytest.approx(first_step[name], rel=1e-2), name


@pytest.mark.parametrize(
    "config, steps_per_update",
    [
        ("configs/ppo_atari.py:Breakout-v5", 128 * 128),
        ("configs/impala_atari.py:Breakout-v5", 128 * 20),
    ],
)
def test_shipped_atari_configs_train_finite_and_repeat_their_checksum(
    tmp_path, config, steps_per_update
):
    _require_gpus(1)
    overrides = (_steps(steps_per_update), "--config.log.every_updates=1")
    first = _run(tmp_path / "first", config, *overrides)
    second = _run(tmp_path / "second", config, *overrides)
    assert first["gpu_determinism"]["xla_flags"] == {"xla_gpu_deterministic_ops": "true"}
    assert first["params_checksum"] == second["params_checksum"]


def _same_checksum(tmp_path, config: str, common: tuple, layouts: tuple[tuple, tuple]) -> None:
    """Two runs of `config` (with `common` overrides) in two layouts end with one checksum."""
    one, other = (
        _run(tmp_path / name, config, *common, *layout)
        for name, layout in zip(("one", "other"), layouts, strict=True)
    )
    assert one["params_checksum"] == other["params_checksum"]


def test_actors_on_the_hosts_cpus_feed_a_gpu_learner_the_same_data_in_any_layout(tmp_path):
    """`mesh.actor_platform="cpu"`: the policy runs on the host's CPU devices, the learner
    on the GPU; parameters and rollouts cross between the two backends every update.
    One thread of 8 envs and two of 4 give the same checksum (layout invariance)."""
    _require_gpus(1)
    common = (_steps(8 * 128), "--config.mesh.actor_platform=cpu")
    one_thread = ("--config.env.num_envs=8",)
    two_threads = ("--config.env.num_envs=4", "--config.pipeline.num_actor_threads=2")
    _same_checksum(tmp_path, "configs/ppo_cartpole.py", common, (one_thread, two_threads))


def test_actors_and_learner_on_separate_gpus_give_the_numbers_of_one(tmp_path):
    _require_gpus(2)
    common = (_steps(128 * 128), "--config.log.every_updates=1")
    separate = ("--config.mesh.actor_device_ids=(0,)", "--config.mesh.learner_device_ids=(1,)")
    _same_checksum(tmp_path, "configs/ppo_atari.py:Breakout-v5", common, ((), separate))
