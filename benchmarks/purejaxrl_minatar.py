"""Like for like on MinAtar: PureJaxRL's ppo.py against `configs/ppo_minatar.py:GAME,purejaxrl`.

    git -C PUREJAXRL_GIT archive HEAD purejaxrl | tar -x -C /tmp/purejaxrl  # a checkout
    python benchmarks/purejaxrl_minatar.py --purejaxrl=/tmp/purejaxrl --steps=1000000

Both sides train PPO with the same network (separate 64-64 ReLU actor and critic on the
flattened grid) and hyperparameters (PureJaxRL's `examples/brax_minatar.ipynb`: 64 envs x
128 steps, 8 minibatches x 4 epochs, Adam 5e-3 annealed) on gymnax's MinAtar game for
`--steps` env steps, each in a process of its own, started from a temporary directory with
no persistent compilation cache, the two sides taking turns (`--rounds` of each, the order
swapped every round) so that the shared machine's load falls on both alike:

* PureJaxRL: `purejaxrl/ppo.py`'s `make_train` imported from the checkout given (nothing
  of it is copied here), its debug printing off, compiled ahead of time and called once:
  every update is one `lax.scan` inside that call.
* sebulba: `python -m sebulba.main --config=configs/ppo_minatar.py:GAME,purejaxrl`, one
  program call per update (one update per call) and a host loop between them.

Per run: env steps/s in steady state (PureJaxRL: env steps / the compiled call's time;
sebulba: the run's summary, after update 1), the whole process's wall time (start-up,
compiling, training, sebulba's checkpoint), and the final return: the mean over the last
100 finished episodes. Prints a markdown table; what the runs print goes to stderr.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
import types

import peer_processes

# PureJaxRL's MinAtar settings (`examples/brax_minatar.ipynb`), which the `:purejaxrl`
# variant of configs/ppo_minatar.py mirrors.
PUREJAXRL_MINATAR = {
    "LR": 5e-3,
    "NUM_ENVS": 64,
    "NUM_STEPS": 128,
    "UPDATE_EPOCHS": 4,
    "NUM_MINIBATCHES": 8,
    "GAMMA": 0.99,
    "GAE_LAMBDA": 0.95,
    "CLIP_EPS": 0.2,
    "ENT_COEF": 0.01,
    "VF_COEF": 0.5,
    "MAX_GRAD_NORM": 0.5,
    "ACTIVATION": "relu",
    "ANNEAL_LR": True,
    "DEBUG": False,
}


def _last_episodes_mean(returns, finished, count: int = 100) -> float:
    """Mean of the last `count` finished episodes' returns; arrays [updates, T, B]."""
    import numpy as np

    finished_returns = np.asarray(returns)[np.asarray(finished).astype(bool)]
    return float(finished_returns[-count:].mean())


def _five_tuple_step(env, env_params):
    """gymnax's env and params, its `step` returning (obs, state, reward, done, info).

    PureJaxRL's wrappers unpack the five values older gymnax returned; gymnax 1.x returns
    `terminated` and `truncated` apart. Their `or` is the `done` older gymnax returned,
    and both auto-reset on it.
    """
    import jax.numpy as jnp

    class FiveTupleStep:
        def __getattr__(self, name):
            return getattr(env, name)

        def step(self, key, state, action, params=None):
            obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)
            return obs, state, reward, jnp.logical_or(terminated, truncated), info

    return FiveTupleStep(), env_params


def train_purejaxrl(checkout: str, game: str, steps: int, seed: int) -> dict:
    """PureJaxRL's ppo.py on `game`, in this process; returns its numbers."""
    sys.path.insert(0, os.path.join(checkout, "purejaxrl"))  # ppo.py imports `wrappers`.
    if importlib.util.find_spec("navix") is None:
        # wrappers.py imports navix for its NavixGymnaxWrapper alone, which ppo.py never
        # uses; an empty module stands in where navix is not installed.
        sys.modules["navix"] = types.ModuleType("navix")
    import gymnax
    import jax
    from ppo import make_train

    make_env = gymnax.make
    gymnax.make = lambda *args, **kwargs: _five_tuple_step(*make_env(*args, **kwargs))

    config = dict(PUREJAXRL_MINATAR, TOTAL_TIMESTEPS=steps, ENV_NAME=f"{game}-MinAtar")
    start = time.perf_counter()
    train = jax.jit(make_train(config)).lower(jax.random.PRNGKey(seed)).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    out = jax.block_until_ready(train(jax.random.PRNGKey(seed)))
    train_s = time.perf_counter() - start
    env_steps = config["NUM_UPDATES"] * config["NUM_STEPS"] * config["NUM_ENVS"]
    metrics = out["metrics"]
    return {
        "env_steps": env_steps,
        "sps": env_steps / train_s,
        "compile_s": compile_s,
        "final_return": _last_episodes_mean(
            metrics["returned_episode_returns"], metrics["returned_episode"]
        ),
    }


def run_purejaxrl(args) -> dict:
    return peer_processes.run_child(__file__, _shared_args(args))


def run_sebulba(args) -> dict:
    summary, wall_s, _ = peer_processes.run_sebulba(
        f"ppo_minatar.py:{args.game},purejaxrl", args.steps, args.seed
    )
    return {
        "env_steps": summary["global_step"],
        "sps": summary["sps"],
        "final_return": summary["mean_return"],
        "wall_s": wall_s,
    }


def _shared_args(args) -> list[str]:
    return [
        f"--purejaxrl={args.purejaxrl}",
        f"--game={args.game}",
        f"--steps={args.steps}",
        f"--seed={args.seed}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--purejaxrl", required=True, help="a checkout of luchris429/purejaxrl")
    parser.add_argument("--game", default="Breakout", help="a MinAtar game, e.g. Breakout")
    parser.add_argument("--steps", type=int, default=1_000_000, help="env steps per run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2, help="runs of each side, alternating")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.purejaxrl = os.path.abspath(args.purejaxrl)
    if args.child:
        result = train_purejaxrl(args.purejaxrl, args.game, args.steps, args.seed)
        peer_processes.print_result(result)
        return

    sides = {"PureJaxRL ppo.py": run_purejaxrl, "sebulba": run_sebulba}
    rows = []
    for round_index in range(args.rounds):
        order = list(sides) if round_index % 2 == 0 else list(reversed(sides))
        for name in order:
            result = sides[name](args)
            print(f"{name}: {result}", file=sys.stderr, flush=True)
            rows.append((round_index + 1, name, result))

    print(
        f"gymnax {args.game}-MinAtar, {args.steps:,} env steps per run, seed {args.seed}, "
        f"{os.cpu_count()} cores; sebulba: one update per program call"
    )
    print()
    print("| round | side | env steps | env steps/s (steady) | process wall time | final return |")
    print("|---|---|---|---|---|---|")
    for round_index, name, result in rows:
        print(
            f"| {round_index} | {name} | {result['env_steps']:,} | {result['sps']:,.0f} | "
            f"{result['wall_s']:.1f} s | {result['final_return']:.2f} |"
        )
    print()
    for key, label in (("sps", "env steps/s"), ("wall_s", "wall time")):
        ratios = [sebulba[key] / purejaxrl[key] for purejaxrl, sebulba in _pairs(rows)]
        print(f"* sebulba / PureJaxRL {label}, per round: {', '.join(f'{r:.2f}' for r in ratios)}")


def _pairs(rows):
    """Each round's PureJaxRL result and sebulba result, in that order."""
    by_round = {}
    for round_index, name, result in rows:
        by_round.setdefault(round_index, {})[name] = result
    for results in by_round.values():
        yield results["PureJaxRL ppo.py"], results["sebulba"]


if __name__ == "__main__":
    main()
