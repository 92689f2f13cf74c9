"""Population-based training against the same budget without it, in Anakin on this CPU.

    python benchmarks/pbt.py --config=configs/ppo_minatar.py:Breakout,cpu \\
        --set total_timesteps=1000000 --population=8 \\
        --hyperparameters=learning_rate,ent_coef

Trains three batches of `--population` runs of the config, each batch as one vmapped
program, every run with the same env steps (`total_timesteps` each), seeds seed .. seed +
P - 1 (`--seed`, default 1):

  * `independent seeds`: the config's hyperparameters, seeds vmapped (`--seeds`);
  * `random search`: a population whose members draw their hyperparameters as PBT's do
    (member 0 the config's, the others log-uniformly from their ranges) and keep them:
    `pbt.interval` longer than the run, so no exploit/explore step;
  * `PBT`: the same population with its exploit/explore steps every `pbt.interval` env
    steps (`--interval`; default: the config's, a tenth of the run).

and prints a markdown row for each: every run's final return (mean of its last 100
episodes), their mean ± sd, the best run's and its hyperparameters, and the batch's wall
time. The three batches cost the same compute (the same programs, but for the
hyperparameter values and the steps' copies).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from config_spec import apply_overrides, load_config, quiet_training_run  # noqa: E402

from sebulba.anakin import population, seeds  # noqa: E402
from sebulba.runtime import platforms  # noqa: E402

# libtpu's errors about a TPU it cannot find never show where no accelerator exists.
platforms.skip_absent_accelerators()


def _summaries(run_dirs: list[str]) -> list[dict]:
    found = []
    for run_dir in run_dirs:
        with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as f:
            found.append(json.load(f))
    return found


def run_batch(config, arm: str, size: int, interval: int | None) -> tuple[list[dict], float]:
    """The summaries of one batch's runs, and its wall time in s."""
    config = config.copy_and_resolve_references()
    quiet_training_run(config)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir, contextlib.redirect_stdout(sys.stderr):
        if arm == "independent seeds":
            run_seeds = tuple(range(config.seed, config.seed + size))
            seeds.train_seeds(config, workdir, run_seeds)
            dirs = [seeds.seed_workdir(workdir, seed) for seed in run_seeds]
        else:
            config.pbt.population = size
            if arm == "random search":  # Drawn once, kept: no step within the run.
                config.pbt.interval = 10 * config.total_timesteps
            elif interval is not None:
                config.pbt.interval = interval
            population.train_population(config, workdir)
            dirs = [population.member_workdir(workdir, member) for member in range(size)]
        summaries = _summaries(dirs)
    return summaries, time.perf_counter() - start


def _row(arm: str, summaries: list[dict], wall_s: float, config) -> str:
    finals = [float(summary["mean_return"]) for summary in summaries]
    best = int(np.argmax(finals))
    values = summaries[best].get("pbt", {}).get("hyperparameters")
    if values is None:  # The config's own.
        names = [n.strip() for n in config.pbt.hyperparameters.split(",") if n.strip()]
        values = {name: config.agent[name] for name in names}
    shown = ", ".join(f"{name} {value:.3g}" for name, value in values.items())
    steps = summaries[0].get("pbt", {}).get("generation", 0)
    return (
        f"| {arm} | {np.mean(finals):.1f} ± {np.std(finals):.1f} | {finals[best]:.1f} "
        f"({shown}) | {', '.join(f'{x:.1f}' for x in finals)} | {steps} | {wall_s:.0f} s |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="configs/FILE.py[:ARG], an Anakin one")
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE override")
    parser.add_argument("--population", type=int, default=8, help="runs per batch")
    parser.add_argument("--hyperparameters", default="learning_rate", help="pbt.hyperparameters")
    parser.add_argument("--interval", type=int, default=None, help="pbt.interval (env steps)")
    parser.add_argument("--seed", type=int, default=1, help="the batches' first seed")
    parser.add_argument(
        "--arms", default="independent seeds,random search,PBT", help="which batches, in order"
    )
    args = parser.parse_args()
    config = load_config(args.config)
    apply_overrides(config, args.set)
    config.seed = args.seed
    config.pbt.hyperparameters = args.hyperparameters
    print(
        f"{args.config}{''.join(' --set ' + s for s in args.set)}; {args.population} runs "
        f"per batch, seeds {args.seed}..{args.seed + args.population - 1}, "
        f"{config.total_timesteps:,} env steps each; pbt.hyperparameters "
        f"{args.hyperparameters}; jax {jax.__version__}, {os.cpu_count()} cores\n"
    )
    print("| batch | final return (mean ± sd) | best run | every run | PBT steps | wall time |")
    print("|---|---|---|---|---|---|")
    for arm in args.arms.split(","):
        summaries, wall_s = run_batch(config, arm, args.population, args.interval)
        print(_row(arm, summaries, wall_s, config), flush=True)


if __name__ == "__main__":
    main()
