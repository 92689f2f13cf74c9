"""PQN against PPO at the same env steps per update: is the value-based agent as fast?

    python benchmarks/agent_throughput.py                   # both pairs, ~20 min on 2 idle cores
    python benchmarks/agent_throughput.py --only=minatar --rounds=3

Two pairs, each the shipped configs with their batch made the same (PQN's, so PQN runs as
shipped):

* Sebulba, envpool CartPole-v1: `configs/ppo_cartpole.py` and `configs/pqn_cartpole.py`
  with 32 envs x 64 steps per update, one actor and one learner device (two virtual CPU
  devices, as `benchmarks/throughput.py`), policy lag 1.
* Anakin, gymnax Breakout-MinAtar: `configs/ppo_minatar.py:pgx` (pgx's minibatches) and
  `configs/pqn_minatar.py` with 128 envs x 32 steps per update, on-policy (both configs' schedule).

Each pair runs as shipped and with the same update. With the shipped updates each
agent keeps its own epochs, minibatches and network: PQN's configs take 4-5x the
gradient steps per env step of PPO's (CartPole: 4 x 16 minibatches against 4 x 4;
MinAtar: 2 x 32 against 3 x 4) on a wider network (CartPole: 256-256 against
64-64), so on a CPU, where the learner is the bottleneck, PQN runs slower by about that
ratio. With the same update, PQN takes PPO's
epochs, minibatches and (CartPole) layer widths: what is left is the cost of the agent
itself (its Q(lambda) targets, which need a forward pass of the current network over the
rollout; the epsilon that travels with the parameters; the LayerNorm after every layer
that PQN's method prescribes), the target: PQN at least 0.9 of PPO. On MinAtar a third
row takes the LayerNorms out as well, which separates their cost (XLA:CPU normalises
the convolution's [N, H, W, 32] features over their 32 channels slowly) from the rest
of the agent. The two runs of a row alternate for `--rounds` rounds in this process
(the machine is shared and noisy; alternating exposes both to the same load) and each
run's steps/s is its steady state: env steps over wall time from the first metrics line
(update 1 compiles) to the last. A row's figure is the best round of each agent; the
ratio is PQN's over PPO's.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import jax

# benchmarks/throughput.py asks for two virtual devices (XLA_FLAGS, read when JAX's backend
# starts: Sebulba's actor and learner on separate devices, as on accelerators) and loads
# configs by name.
from throughput import load_config

from sebulba import train
from sebulba.runtime import platforms

# libtpu's errors about a TPU it cannot find never show where no accelerator exists.
platforms.skip_absent_accelerators()


def steady_sps(config) -> float:
    """Env steps/s of one run from its first metrics line (after update 1) to its last."""
    with tempfile.TemporaryDirectory() as workdir:
        train.train(config, workdir)
        with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
            lines = [json.loads(line) for line in f]
    first, last = lines[0], lines[-1]
    return (last["global_step"] - first["global_step"]) / (
        last["wall_time_s"] - first["wall_time_s"]
    )


# The config variant each agent's shipped update comes from: PPO on MinAtar takes pgx's
# minibatches (3 epochs x 4), the update this comparison was made for.
VARIANTS_OF = {"ppo_minatar": "pgx"}


def run_config(name: str, updates: int, num_envs: int, num_steps: int, learner_device: int):
    """configs/NAME.py for `updates` updates of num_envs x num_steps, acting on device 0;
    metrics every 5 updates, no TensorBoard, no checkpoints."""
    config = load_config(name, VARIANTS_OF.get(name))
    config.env.num_envs = num_envs
    config.agent.num_steps = num_steps
    config.total_timesteps = num_envs * num_steps * updates
    config.mesh.actor_device_ids = (0,)
    config.mesh.learner_device_ids = (learner_device,)
    config.log.every_updates = 5
    config.log.tensorboard = False
    config.ckpt.every_updates = 0
    return config


def cartpole(name: str, updates: int):
    config = run_config(name, updates, num_envs=32, num_steps=64, learner_device=1)
    config.pipeline.policy_lag = 1
    return config


def minatar(name: str, updates: int):
    return run_config(name, updates, num_envs=128, num_steps=32, learner_device=0)


PAIRS = {
    "cartpole": ("Sebulba CartPole-v1, 32 envs x 64 steps", cartpole, 60),
    "minatar": ("Anakin Breakout-MinAtar, 128 envs x 32 steps", minatar, 60),
}


def same_update(pqn, ppo):
    """PQN given PPO's update shape: its epochs, minibatches and network widths."""
    pqn.agent.update_epochs = ppo.agent.update_epochs
    pqn.agent.num_minibatches = ppo.agent.num_minibatches
    if ppo.agent.network == "mlp":  # PPO's 64-64 actor torso; its critic's is the same size.
        pqn.agent.hidden_sizes = (64, 64)
    return pqn


def without_layer_norm(pqn, ppo):
    """`same_update` and no LayerNorm: what PQN's LayerNorms cost on this machine."""
    same_update(pqn, ppo).agent.norm = "none"
    return pqn


# How PQN's config is changed for each row of a pair (None: as shipped).
VARIANTS = {
    "cartpole": {"shipped updates": None, "same update": same_update},
    "minatar": {
        "shipped updates": None,
        "same update": same_update,
        "same update, no LayerNorm": without_layer_norm,
    },
}


def gradient_steps(config) -> int:
    return config.agent.update_epochs * config.agent.num_minibatches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(PAIRS), default=None)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    rows = []
    for key, (label, make, updates) in PAIRS.items():
        if args.only not in (None, key):
            continue
        for variant, change in VARIANTS[key].items():
            configs = {agent: make(f"{agent}_{key}", updates) for agent in ("ppo", "pqn")}
            if change is not None:
                change(configs["pqn"], configs["ppo"])
            update = ", ".join(
                f"{agent} {gradient_steps(c)} gradient steps" for agent, c in configs.items()
            )
            row_label = f"{label}; {variant} ({update})"
            best = {"ppo": 0.0, "pqn": 0.0}
            for round_ in range(args.rounds):
                for agent, config in configs.items():
                    sps = steady_sps(config.copy_and_resolve_references())
                    print(
                        f"{row_label}: {agent} round {round_ + 1}: {sps:,.0f} steps/s", flush=True
                    )
                    best[agent] = max(best[agent], sps)
            rows.append((row_label, best["ppo"], best["pqn"]))
    backend = f"jax {jax.__version__}, {jax.default_backend()}"
    print(f"\n{backend}; best of {args.rounds} alternating rounds\n")
    print("| pair | PPO steps/s | PQN steps/s | PQN / PPO |")
    print("|---|---|---|---|")
    for label, ppo, pqn in rows:
        print(f"| {label} | {ppo:,.0f} | {pqn:,.0f} | {pqn / ppo:.2f} |")


if __name__ == "__main__":
    main()
