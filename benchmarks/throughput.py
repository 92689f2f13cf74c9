"""Throughput of the pipeline: env steps/s and where actors and learner wait.

    python benchmarks/throughput.py              # CartPole + small Atari, lag 0 and 1
    python benchmarks/throughput.py --only=cartpole
    python benchmarks/throughput.py --only=lstm  # feed-forward vs LSTM PPO, lag 1

Prints one row per run: steps/s (after the first, compiling update), and the fraction
of wall time the learner waited for rollouts and the actors waited for parameters —
the bottleneck diagnosis of the Cleanba paper. Numbers are for this machine's devices
(on a CPU-only machine actors and learner share the same cores).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

# Two virtual devices so actor and learner get separate devices, as on accelerators.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

import importlib.util  # noqa: E402

import jax  # noqa: E402

from sebulba import train  # noqa: E402
from sebulba.runtime import platforms  # noqa: E402

# libtpu's errors about a TPU it cannot find never show where no accelerator exists.
platforms.skip_absent_accelerators()

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_config(name: str, arg: str | None = None):
    path = os.path.join(ROOT, "configs", f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg)


def measure(label: str, config) -> dict:
    """Runs `config` and summarises steady-state throughput from metrics.jsonl."""
    with tempfile.TemporaryDirectory() as workdir:
        start = time.perf_counter()
        train.train(config, workdir)
        wall = time.perf_counter() - start
        with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
            lines = [json.loads(line) for line in f]
        with open(os.path.join(workdir, "summary.json"), encoding="utf-8") as f:
            bottleneck = json.load(f)["bottleneck"]
    # Update 1 includes compilation of the actor step; the bottleneck report skips it too.
    first, last = (lines[0], lines[-1]) if len(lines) > 1 else ({}, lines[-1])
    seconds = last["wall_time_s"] - first.get("wall_time_s", 0.0)
    steps = last["global_step"] - first.get("global_step", 0)
    row = {
        "run": label,
        "policy_lag": config.pipeline.policy_lag,
        "sps": steps / max(seconds, 1e-9),
        "learner_wait_frac": bottleneck.get("learner_wait_fraction", float("nan")),
        "actor_wait_frac": bottleneck.get("actor_wait_fraction", float("nan")),
        "limited_by": bottleneck["limited_by"],
        "updates": last["update"],
        "wall_s": wall,
    }
    print(
        f"{row['run']:<28} lag={row['policy_lag']} {row['sps']:>9,.0f} sps  "
        f"learner waits {100 * row['learner_wait_frac']:5.1f}%  "
        f"actors wait {100 * row['actor_wait_frac']:5.1f}%  "
        f"limited by {row['limited_by']:<8} "
        f"({row['updates']} updates, {row['wall_s']:.1f}s)",
        flush=True,
    )
    return row


def measured(config, policy_lag: int):
    """`config` acting on device 0 and learning on device 1 with `policy_lag`, logging every
    update, without TensorBoard."""
    config.mesh.actor_device_ids = (0,)
    config.mesh.learner_device_ids = (1,)
    config.pipeline.policy_lag = policy_lag
    config.log.every_updates = 1
    config.log.tensorboard = False
    return config


def cartpole(policy_lag: int):
    config = load_config("ppo_cartpole")
    config.total_timesteps = 8 * 128 * 40
    return measured(config, policy_lag)


def atari(policy_lag: int, network: str):
    config = load_config("ppo_atari", "smoke")
    config.env.num_envs = 16
    config.agent.num_steps = 32
    config.agent.num_minibatches = 4
    config.agent.update_epochs = 1
    config.agent.network = network
    config.total_timesteps = 16 * 32 * 6
    return measured(config, policy_lag)


def with_lstm(config, frame_stack: int | None = None):
    """The same run with an LSTM after the torso (and optionally another frame stack)."""
    config.agent.core = "lstm"
    if frame_stack is not None:
        config.env.frame_stack = frame_stack
    return config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["cartpole", "atari", "lstm"], default=None)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    rows = []
    if args.only in (None, "cartpole"):
        for lag in (0, 1):
            rows.append(measure("ppo CartPole-v1 mlp", cartpole(lag)))
    if args.only in (None, "atari"):
        for network in ("nature_cnn", "impala_resnet"):
            for lag in (0, 1):
                rows.append(measure(f"ppo Breakout-v5 {network}", atari(lag, network)))
    if args.only in (None, "lstm"):
        rows.append(measure("ppo CartPole-v1 mlp", cartpole(1)))
        rows.append(measure("ppo CartPole-v1 mlp+lstm", with_lstm(cartpole(1))))
        rows.append(measure("ppo Breakout-v5 nature_cnn", atari(1, "nature_cnn")))
        # As configs/ppo_lstm_atari.py: one frame per observation, the LSTM remembers.
        lstm_atari = with_lstm(atari(1, "nature_cnn"), frame_stack=1)
        rows.append(measure("ppo Breakout-v5 nature+lstm", lstm_atari))
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"\njax {jax.__version__}, {jax.default_backend()}; steady state, after update 1\n")
    print("| run | policy_lag | steps/s | learner waits | actors wait | limited by |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['run']} | {row['policy_lag']} | {row['sps']:,.0f} | "
            f"{100 * row['learner_wait_frac']:.1f}% | {100 * row['actor_wait_frac']:.1f}% | "
            f"{row['limited_by']} |"
        )


if __name__ == "__main__":
    main()
