"""Like for like on MinAtar: purejaxql's pqn_minatar.py against `configs/pqn_minatar.py:GAME`.

    git -C PUREJAXQL_GIT archive HEAD purejaxql | tar -x -C /tmp/purejaxql  # a checkout
    python benchmarks/purejaxql_minatar.py --purejaxql=/tmp/purejaxql    # ~6 min, 2 cores

Both sides train PQN with purejaxql's MinAtar settings (`purejaxql/config/alg/
pqn_minatar.yaml`: 128 envs x 32 steps, 32 minibatches x 2 epochs, RAdam 5e-4 annealed,
lambda 0.65, epsilon 1 -> 0.05 over a tenth of the run, LayerNorm CNN), which
`configs/pqn_minatar.py` mirrors, on gymnax's MinAtar game for `--steps` env steps (the
decays over the same steps on both sides), each in a process of its own, started from a
temporary directory with no persistent compilation cache. The sides run one after the
other, in the order printed:

* purejaxql: `purejaxql/pqn_minatar.py`'s `make_train` loaded from the checkout given
  (nothing of it is copied here), called as its `single_run` calls it (one seed,
  `jax.jit(jax.vmap(make_train(config)))`), compiled ahead of time and called once; its
  greedy test episodes during training (`TEST_DURING_TRAINING`) stay on, as its config has
  them. Where `hydra`, `omegaconf` or `wandb` is not installed an empty module stands in
  (the script imports them for its command line and logging alone), and gymnax 1.x's
  step, which returns `terminated` and `truncated` apart, is given back as the one `done`
  purejaxql unpacks, without the info entries gymnax 1.x added.
* sebulba: `python -m sebulba.main --config=configs/pqn_minatar.py:GAME` as shipped (its
  "auto" minibatch loop is the rolled scan on a CPU: docs/benchmarks.md, "Compiling").

Per run: env steps/s in steady state (purejaxql: env steps / the compiled call's time;
sebulba: the run's summary, after update 1), compile time (sebulba: from its log), the
whole process's wall time, and the return (purejaxql: its last update's mean over envs of
each env's last finished episode; sebulba: the mean of the last 100 episodes). Prints a
markdown table; what the runs print goes to stderr.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
import time
import types

import peer_processes

STEPS_PER_UPDATE = 128 * 32  # pqn_minatar.yaml's NUM_ENVS x NUM_STEPS.
GYMNAX_1_INFO = ("terminated", "truncated", "final_observation")

# purejaxql's pqn_minatar.yaml, with the decays over the run's own steps.
PUREJAXQL_MINATAR = {
    "ALG_NAME": "pqn",
    "NUM_ENVS": 128,
    "NUM_STEPS": 32,
    "EPS_START": 1.0,
    "EPS_FINISH": 0.05,
    "EPS_DECAY": 0.1,
    "NUM_MINIBATCHES": 32,
    "NUM_EPOCHS": 2,
    "NORM_TYPE": "layer_norm",
    "LR": 0.0005,
    "MAX_GRAD_NORM": 10,
    "LR_LINEAR_DECAY": True,
    "GAMMA": 0.99,
    "LAMBDA": 0.65,
    "ENV_KWARGS": {},
    "TEST_DURING_TRAINING": True,
    "TEST_INTERVAL": 0.05,
    "TEST_NUM_ENVS": 128,
    "EPS_TEST": 0.0,
    "NUM_SEEDS": 1,
    "WANDB_MODE": "disabled",
}


def _stand_in_modules() -> None:
    """Empty modules for the command-line and logging packages pqn_minatar.py imports but
    `make_train` never calls, where they are not installed."""
    if importlib.util.find_spec("hydra") is None:
        hydra = types.ModuleType("hydra")
        hydra.main = lambda **kwargs: lambda function: function
        sys.modules["hydra"] = hydra
    if importlib.util.find_spec("omegaconf") is None:
        omegaconf = types.ModuleType("omegaconf")
        omegaconf.OmegaConf = None
        sys.modules["omegaconf"] = omegaconf
    if importlib.util.find_spec("wandb") is None:
        sys.modules["wandb"] = types.ModuleType("wandb")


def _done_step_log_wrapper() -> None:
    """gymnax's LogWrapper, its `step` returning (obs, state, reward, done, info) as the
    gymnax purejaxql was written for: gymnax 1.x returns `terminated` and `truncated`
    apart, and their `or` is the `done` it returned before (both auto-reset on it); the
    info entries gymnax 1.x added are left out."""
    import jax.numpy as jnp
    from gymnax.wrappers import purerl

    if getattr(purerl.LogWrapper, "done_step", False):
        return

    class LogWrapper(purerl.LogWrapper):
        done_step = True

        def step(self, key, state, action, params=None):
            obs, state, reward, terminated, truncated, info = super().step(
                key, state, action, params
            )
            # gymnax 1.x's info adds these; purejaxql averages every info entry.
            info = {k: v for k, v in info.items() if k not in GYMNAX_1_INFO}
            return obs, state, reward, jnp.logical_or(terminated, truncated), info

    purerl.LogWrapper = LogWrapper


def train_purejaxql(checkout: str, game: str, steps: int, seed: int) -> dict:
    """purejaxql's pqn_minatar.py on `game`, in this process; returns its numbers."""
    import jax

    _stand_in_modules()
    _done_step_log_wrapper()
    path = os.path.join(checkout, "purejaxql", "pqn_minatar.py")
    spec = importlib.util.spec_from_file_location("purejaxql_pqn_minatar", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    config = dict(
        PUREJAXQL_MINATAR,
        TOTAL_TIMESTEPS=steps,
        TOTAL_TIMESTEPS_DECAY=steps,
        ENV_NAME=f"{game}-MinAtar",
        SEED=seed,
    )
    rngs = jax.random.split(jax.random.PRNGKey(seed), config["NUM_SEEDS"])
    start = time.perf_counter()
    train = jax.jit(jax.vmap(module.make_train(config))).lower(rngs).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    out = jax.block_until_ready(train(rngs))
    train_s = time.perf_counter() - start
    env_steps = config["NUM_UPDATES"] * STEPS_PER_UPDATE
    returns = out["metrics"]["returned_episode_returns"]
    return {
        "env_steps": env_steps,
        "sps": env_steps / train_s,
        "compile_s": compile_s,
        "final_return": float(returns[0, -1]),
    }


def run_purejaxql(args) -> dict:
    return peer_processes.run_child(__file__, _shared_args(args))


def _compile_seconds(log: str) -> float:
    """The act-and-learn program's compile time from a run's progress line."""
    found = re.search(r"compiled the act-and-learn program in (\d+):(\d+):(\d+)", log)
    hours, minutes, seconds = (int(x) for x in found.groups())
    return 3600 * hours + 60 * minutes + seconds


def run_sebulba(args, *overrides: str) -> dict:
    summary, wall_s, log = peer_processes.run_sebulba(
        f"pqn_minatar.py:{args.game}", args.steps, args.seed, *overrides
    )
    return {
        "env_steps": summary["global_step"],
        "sps": summary["sps"],
        "compile_s": _compile_seconds(log),
        "final_return": summary["mean_return"],
        "wall_s": wall_s,
    }


def _shared_args(args) -> list[str]:
    return [
        f"--purejaxql={args.purejaxql}",
        f"--game={args.game}",
        f"--steps={args.steps}",
        f"--seed={args.seed}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--purejaxql", required=True, help="a checkout of mttga/purejaxql")
    parser.add_argument("--game", default="Breakout", help="a MinAtar game, e.g. Breakout")
    parser.add_argument("--steps", type=int, default=999_424, help="env steps per run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.purejaxql = os.path.abspath(args.purejaxql)
    if args.steps % STEPS_PER_UPDATE:
        parser.error(f"--steps must be a multiple of {STEPS_PER_UPDATE} (one update)")
    if args.child:
        result = train_purejaxql(args.purejaxql, args.game, args.steps, args.seed)
        peer_processes.print_result(result)
        return

    sides = {
        "purejaxql pqn_minatar.py": lambda: run_purejaxql(args),
        "sebulba, as shipped (minibatch_loop=auto: rolled)": lambda: run_sebulba(args),
    }
    rows = []
    for name, run in sides.items():
        result = run()
        print(f"{name}: {result}", file=sys.stderr, flush=True)
        rows.append((name, result))

    print(
        f"gymnax {args.game}-MinAtar, {args.steps:,} env steps per run, seed {args.seed}, "
        f"{os.cpu_count()} cores"
    )
    print()
    print(
        "| side | env steps | env steps/s (steady) | compile | process wall time "
        "| wall time / purejaxql's | return |"
    )
    print("|---|---|---|---|---|---|---|")
    reference = rows[0][1]["wall_s"]
    for name, result in rows:
        print(
            f"| {name} | {result['env_steps']:,} | {result['sps']:,.0f} | "
            f"{result['compile_s']:.0f} s | {result['wall_s']:.1f} s | "
            f"{result['wall_s'] / reference:.2f} | {result['final_return']:.1f} |"
        )


if __name__ == "__main__":
    main()
