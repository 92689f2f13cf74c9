"""The shipped configs as the README runs them, one run per seed, as a record.

    python benchmarks/default_runs.py --config=ppo_cartpole --seeds=1,2,3,4,5     # ~5 min
    python benchmarks/default_runs.py --config=impala_cartpole --seeds=1,2,3,4,5  # ~3 min
    python benchmarks/default_runs.py --config=ppo_memory --name=ppo_memory_feedforward \
        --set agent.core=none --seeds=1
    python benchmarks/default_runs.py --config=ppo_minatar:Asterix --name=ppo_minatar_asterix \
        --seeds=1
    python benchmarks/default_runs.py --config=ppo_procgen:Starpilot --name=ppo_procgen_starpilot \
        --set agent.network=nature_cnn --set total_timesteps=1500000 --seeds=1 --levels=train,test
    python benchmarks/default_runs.py --config=pqn_cartpole --seeds=1,2,3,4,5 --greedy  # ~3 min

Each seed is the README's command, `python -m sebulba.main --config=configs/NAME.py
--workdir=DIR --config.seed=S` (TensorBoard off; each `--set KEY=VALUE` added as
`--config.KEY=VALUE`), in its own process with JAX's default
devices, then `python -m sebulba.evaluate --workdir=DIR --episodes=20` (the sampled
policy of the final checkpoint; with `--levels=train,test`, Procgen's training and held-out
levels, 20 episodes each, and their generalisation gap; with `--greedy`, the greedy policy,
as value-based agents are evaluated). Prints one line per seed and writes
`docs/records/NAME.json` (or `--name`) with each seed's summary: the final mean return (last 100
episodes), `params_checksum`, steps/s, wall time, and the evaluation's mean and min.
Returns and checksums do not depend on the machine's load; times do. Then `python
benchmarks/render_docs.py` puts the new numbers in the docs, and tests/test_records.py
checks that a fresh run of the first seed still gives them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import records

SUMMARY_KEYS = ("mean_return", "params_checksum", "sps", "wall_time_s", "updates", "global_step")


def config_path(config: str) -> str:
    """ "ppo_minatar:Asterix" -> "configs/ppo_minatar.py:Asterix" (a variant after the colon)."""
    name, colon, variant = config.partition(":")
    return f"configs/{name}.py{colon}{variant}"


def command(config: str, seed: int, workdir: str, overrides: tuple[str, ...] = ()) -> list[str]:
    return [
        sys.executable,
        "-m",
        "sebulba.main",
        f"--config={config_path(config)}",
        f"--workdir={workdir}",
        f"--config.seed={seed}",
        "--config.log.tensorboard=False",
        *(f"--config.{override}" for override in overrides),
    ]


def _python(args: list[str], what: str) -> None:
    """Runs `python ARGS` from the repository with JAX's own devices; raises on failure."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = records.ROOT + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run(
        [sys.executable, *args], cwd=records.ROOT, env=env, capture_output=True, text=True
    )
    if result.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{result.stderr[-3000:]}")


def _read(workdir: str, name: str) -> dict:
    with open(os.path.join(workdir, name), encoding="utf-8") as f:
        return json.load(f)


def run(
    config: str,
    seed: int,
    eval_episodes: int = 0,
    overrides: tuple[str, ...] = (),
    levels: str = "",
    greedy: bool = False,
) -> dict:
    """One seed of the README's command; the summary's figures (and the evaluation's).

    `levels`: evaluate's `--levels` (Procgen's level sets, e.g. "train,test"), or "".
    `greedy`: evaluate the greedy policy (evaluate's `--greedy`) instead of sampling.
    """
    with tempfile.TemporaryDirectory() as workdir:
        _python(command(config, seed, workdir, overrides)[1:], f"{config} seed {seed}")
        summary = _read(workdir, "summary.json")
        figures = {key: summary[key] for key in SUMMARY_KEYS}
        if eval_episodes:
            evaluate = ["-m", "sebulba.evaluate", f"--workdir={workdir}"]
            evaluate.append(f"--episodes={eval_episodes}")
            if levels:
                evaluate.append(f"--levels={levels}")
            if greedy:
                evaluate.append("--greedy")
            _python(evaluate, f"evaluating {config} {seed}")
            evaluation = _read(workdir, "eval.json")
            # A multi-task evaluation reports a mean over tasks and no overall minimum.
            kept = ("episodes", "mean_return", "min_return")
            figures["eval"] = {k: evaluation[k] for k in kept if k in evaluation}
            if greedy:
                figures["eval"]["greedy"] = True
            if levels:  # Each level set's figures, and train minus test.
                played = evaluation["levels"].items()
                figures["eval"]["levels"] = {
                    name: {k: fields[k] for k in kept} for name, fields in played
                }
                if "generalization_gap" in evaluation:
                    figures["eval"]["generalization_gap"] = evaluation["generalization_gap"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config", required=True, help="configs/NAME.py, e.g. ppo_cartpole or ppo_minatar:Asterix"
    )
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE, config override")
    parser.add_argument("--name", default=None, help="the record's name (default: the config)")
    parser.add_argument("--seeds", default="1,2,3,4,5")
    parser.add_argument("--parallel", type=int, default=1, help="seeds run at once")
    parser.add_argument("--eval_episodes", type=int, default=20, help="0: no evaluation")
    parser.add_argument(
        "--levels", default="", help="evaluate's --levels (Procgen), e.g. train,test"
    )
    parser.add_argument(
        "--greedy", action="store_true", help="evaluate the greedy policy (value-based agents)"
    )
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    started = records.environment()  # The code the runs start on.
    with ThreadPoolExecutor(args.parallel) as pool:
        overrides = tuple(args.set)
        runs = pool.map(
            lambda s: run(args.config, s, args.eval_episodes, overrides, args.levels, args.greedy),
            seeds,
        )
        results = dict(zip(seeds, runs, strict=True))
    for seed, result in results.items():
        print(
            f"{args.config} seed {seed}: mean return {result['mean_return']:.1f}, "
            f"{result['sps']:,.0f} sps, {result['wall_time_s']:.0f} s, "
            f"checksum {result['params_checksum'][:12]}"
        )
    readme_command = " ".join(command(args.config, 0, "DIR", tuple(args.set))[1:]).replace(
        "--config.seed=0", "--config.seed=SEED"
    )
    path = records.write(
        args.name or args.config,
        f"python {readme_command}",
        {"seeds": {str(seed): result for seed, result in results.items()}},
        started=started,
    )
    print(f"wrote {path}; now run: python benchmarks/render_docs.py")


if __name__ == "__main__":
    main()
