"""sebulba's Anakin PPO beside PureJaxRL's, same hyperparameters, same machine, one run.

    git clone https://github.com/luchris429/purejaxrl /tmp/purejaxrl
    pip install --no-deps --target /tmp/gymnax0 "gymnax==0.0.9"   # the gymnax it was written for
    python benchmarks/purejaxrl_comparison.py --purejaxrl=/tmp/purejaxrl \\
        --purejaxrl_path=/tmp/gymnax0                                  # ~3 min on 2 cores
    python benchmarks/purejaxrl_comparison.py --purejaxrl=/tmp/purejaxrl \\
        --purejaxrl_path=/tmp/gymnax0 --repeats=1 --set pipeline.updates_per_call=1

Both sides train PPO on gymnax's CartPole-v1 with PureJaxRL's CartPole settings (its
`ppo.py`'s own: 4 envs x 128 steps, 976 updates of 4 minibatches x 4 epochs, Adam at
2.5e-4 annealed, clip 0.2, entropy 0.01, tanh 64-64 MLPs), which are
`configs/ppo_cartpole_anakin.py`'s. Each repeat runs, in fresh processes, one after the
other:

* PureJaxRL: its `purejaxrl/ppo.py` imported from the checkout (never copied here), its
  `make_train` with those settings and `DEBUG` off, jitted and called twice. It steps
  gymnax's envs through gymnax 0.0.x's five-value `step` (gymnax 1.0, which sebulba
  uses, returns six), so `--purejaxrl_path` puts a gymnax 0.0.9 first on its path. Whole
  process: from starting the process to the end of the first call (imports, compiling,
  training), as `python ppo.py` spends it. Steady state: env steps / the second call.
  Twice: as JAX lowers it, and with the Threefry hash written out on CPU as sebulba
  lowers it (`sebulba.runtime.threefry_lowering`), so that the comparison also shows
  sebulba against PureJaxRL given the same lowering.
* sebulba: `python -m sebulba.main --config=configs/ppo_cartpole_anakin.py` (plus
  `--set KEY=VALUE` overrides), twice with one new persistent compilation cache: the
  first run compiles every program, as PureJaxRL does; the second loads them from the
  cache, as a user's second run does (sebulba's cache is on by default). Whole process:
  the command's wall time (start-up, compiling, training, checkpoints and outputs).
  Steady state: `summary.json`'s `sps` (env steps per second after update 1, host work
  included).

Prints one markdown table per repeat and the best of each column over the repeats (the
fastest run is the one the machine's neighbours disturbed least).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = "configs/ppo_cartpole_anakin.py"
TOTAL_TIMESTEPS = 500_000  # PureJaxRL's ppo.py and the config: 976 updates of 512 steps.

# PureJaxRL's CartPole settings, the values its ppo.py runs with (debug printing off).
PUREJAXRL_SETTINGS = {
    "LR": 2.5e-4,
    "NUM_ENVS": 4,
    "NUM_STEPS": 128,
    "TOTAL_TIMESTEPS": TOTAL_TIMESTEPS,
    "UPDATE_EPOCHS": 4,
    "NUM_MINIBATCHES": 4,
    "GAMMA": 0.99,
    "GAE_LAMBDA": 0.95,
    "CLIP_EPS": 0.2,
    "ENT_COEF": 0.01,
    "VF_COEF": 0.5,
    "MAX_GRAD_NORM": 0.5,
    "ACTIVATION": "tanh",
    "ENV_NAME": "CartPole-v1",
    "ANNEAL_LR": True,
    "DEBUG": False,
}

# Runs in a fresh process with PureJaxRL's folder first on sys.path: its make_train,
# jitted, called twice; prints when the first call ended and how long the second took.
# Its wrappers module imports navix for a NAVIX wrapper that CartPole never uses: an
# empty stand-in module spares installing it (and whatever jax it would pin).
_PUREJAXRL_DRIVER = """
import importlib.util, json, sys, time, types
settings = json.loads(sys.argv[1])
if importlib.util.find_spec("navix") is None:
    sys.modules["navix"] = types.ModuleType("navix")
import jax
if sys.argv[2] == "written_out":
    from sebulba.runtime.threefry_lowering import use_unrolled_threefry_on_cpu
    assert use_unrolled_threefry_on_cpu()
import ppo
train = jax.jit(ppo.make_train(settings))
out = jax.block_until_ready(train(jax.random.PRNGKey(30)))
first_done = time.time()
start = time.perf_counter()
out = jax.block_until_ready(train(jax.random.PRNGKey(30)))
second_s = time.perf_counter() - start
returns = out["metrics"]["returned_episode_returns"]
print(json.dumps({"first_done": first_done, "second_s": second_s,
                  "last_return": float(returns[-1].mean())}))
"""


def _environment(*paths: str, cache_dir: str = "") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PYTHONPATH")}
    env["SEBULBA_COMPILATION_CACHE_DIR"] = cache_dir  # "": off.
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(path for path in paths if path)
    return env


def run_purejaxrl(checkout: str, extra_path: str, threefry: str = "jax") -> dict:
    """One PureJaxRL process: whole-process seconds and steady-state env steps/s.

    `threefry="written_out"` lowers its Threefry hash as sebulba does on CPU
    (`sebulba.runtime.threefry_lowering`); "jax": JAX's own lowering.
    """
    folder = os.path.join(checkout, "purejaxrl")
    if not os.path.isfile(os.path.join(folder, "ppo.py")):
        raise SystemExit(f"--purejaxrl {checkout!r} has no purejaxrl/ppo.py: clone PureJaxRL")
    start = time.time()
    result = subprocess.run(
        [sys.executable, "-c", _PUREJAXRL_DRIVER, json.dumps(PUREJAXRL_SETTINGS), threefry],
        env=_environment(folder, extra_path),
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if result.returncode != 0:
        raise SystemExit(f"PureJaxRL failed:\n{result.stderr[-3000:]}")
    report = json.loads(result.stdout.strip().splitlines()[-1])
    return {
        "whole_process_s": report["first_done"] - start,
        "steady_sps": TOTAL_TIMESTEPS / report["second_s"],
        "return": report["last_return"],
    }


def run_sebulba(overrides: list[str], cache_dir: str) -> dict:
    """One `python -m sebulba.main` process: its wall time and summary.json's sps."""
    with tempfile.TemporaryDirectory() as workdir:
        command = [
            sys.executable,
            "-m",
            "sebulba.main",
            f"--config={CONFIG}",
            f"--workdir={workdir}",
            *(f"--config.{item}" for item in overrides),
        ]
        start = time.time()
        result = subprocess.run(
            command,
            env=_environment(cache_dir=cache_dir),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
        )
        wall_s = time.time() - start
        if result.returncode != 0:
            raise SystemExit(f"sebulba failed:\n{result.stderr[-3000:]}")
        with open(os.path.join(workdir, "summary.json"), encoding="utf-8") as f:
            summary = json.load(f)
    return {
        "whole_process_s": wall_s,
        "steady_sps": summary["sps"],
        "return": summary["mean_return"],
    }


def _table(rows: dict[str, dict]) -> str:
    lines = [
        "| side | steady state (env steps/s) | whole process (s) | return at the end |",
        "|---|---|---|---|",
    ]
    for side, row in rows.items():
        lines.append(
            f"| {side} | {row['steady_sps']:,.0f} | {row['whole_process_s']:.1f} "
            f"| {row['return']:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--purejaxrl", required=True, help="a checkout of PureJaxRL")
    parser.add_argument(
        "--purejaxrl_path", default="", help="put first on PureJaxRL's path (gymnax 0.0.x)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="sebulba config override"
    )
    args = parser.parse_args()
    sides = (
        "PureJaxRL ppo.py",
        "PureJaxRL ppo.py, Threefry written out as sebulba's",
        f"sebulba {CONFIG}",
        "sebulba, its second run (cache warm)",
    )
    runs = {side: [] for side in sides}
    for repeat in range(1, args.repeats + 1):
        with tempfile.TemporaryDirectory() as cache_dir:
            rows = dict(
                zip(
                    sides,
                    (
                        run_purejaxrl(args.purejaxrl, args.purejaxrl_path),
                        run_purejaxrl(args.purejaxrl, args.purejaxrl_path, "written_out"),
                        run_sebulba(args.set, cache_dir),
                        run_sebulba(args.set, cache_dir),
                    ),
                    strict=True,
                )
            )
        for side, row in rows.items():
            runs[side].append(row)
        print(f"repeat {repeat}\n\n{_table(rows)}\n", flush=True)
    best = {
        side: {
            "steady_sps": max(row["steady_sps"] for row in rows),
            "whole_process_s": min(row["whole_process_s"] for row in rows),
            "return": rows[-1]["return"],
        }
        for side, rows in runs.items()
    }
    print(f"best of {args.repeats} (return: the last repeat's)\n\n{_table(best)}")
    pure, pure_written_out, cold, warm = best.values()
    for name, reference in (("PureJaxRL", pure), ("PureJaxRL written out", pure_written_out)):
        print(
            f"\nsebulba / {name}: steady state "
            f"{cold['steady_sps'] / reference['steady_sps']:.2f}x; whole process "
            f"{cold['whole_process_s'] / reference['whole_process_s']:.2f}x the time compiling, "
            f"{warm['whole_process_s'] / reference['whole_process_s']:.2f}x with the cache warm"
        )


if __name__ == "__main__":
    main()
