"""AlphaZero on a Pgx board game, trained per seed and played against baseline players.

    python benchmarks/alphazero_matches.py --config=alphazero_pgx:tic_tac_toe --seeds=1,2,3 \
        --opponents=exact,one_ply_greedy,random                              # ~4 min a seed
    python benchmarks/alphazero_matches.py --config=alphazero_pgx:connect_four --seeds=1 \
        --opponents=random,one_ply_greedy

Each seed is the README's command (`benchmarks/default_runs.py`'s `run`, each `--set
KEY=VALUE` added as `--config.KEY=VALUE`), then the final checkpoint's greedy policy
(`sebulba.load_policy(..., greedy=True)`: a search without noise) plays `--games` games
against each opponent of `sebulba.anakin.matches.OPPONENTS`, moving first in half of
them and second in the other half. Prints a markdown table and writes
`docs/records/NAME.json` (NAME: `--name`, else the config with `:` as `_`), rendered into
the docs as an `output` block by `python benchmarks/render_docs.py`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile

import default_runs
import records

sys.path.insert(0, records.ROOT)


def play(workdir: str, opponents: list[str], games: int, seed: int) -> dict[str, dict]:
    """The run's greedy policy against each opponent: `MatchResults.as_dict()` by name."""
    import sebulba
    from sebulba.anakin import matches

    policy = sebulba.load_policy(workdir, greedy=True)
    env = policy.jax_env

    def trained(obs, key):
        del key  # The greedy search is deterministic.
        return policy.agent.act_greedy(policy.params, obs)

    return {
        name: matches.play_matches(
            env, trained, matches.OPPONENTS[name](env), games, seed=seed
        ).as_dict()
        for name in opponents
    }


def side_text(side: dict) -> str:
    return f"{side['wins']}/{side['draws']}/{side['losses']}"


def table(results: dict[str, dict], opponents: list[str]) -> str:
    header = "| seed | self-play return | " + " | ".join(
        f"vs {name}: first / second (W/D/L)" for name in opponents
    )
    rows = [header + " | wall time | params_checksum |"]
    rows.append("|---" * (len(opponents) + 4) + "|")
    for seed, result in results.items():
        cells = [
            f"{side_text(result['matches'][name]['moving_first'])} / "
            f"{side_text(result['matches'][name]['moving_second'])}"
            for name in opponents
        ]
        rows.append(
            f"| {seed} | {result['mean_return']:.2f} | {' | '.join(cells)} | "
            f"{result['wall_time_s']:.0f} s | `{result['params_checksum'][:12]}` |"
        )
    return "\n".join(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="alphazero_pgx:tic_tac_toe")
    parser.add_argument("--seeds", default="1")
    parser.add_argument("--opponents", default="random,one_ply_greedy")
    parser.add_argument("--games", type=int, default=400, help="per opponent, both sides")
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE config override")
    parser.add_argument("--name", default="")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    opponents = args.opponents.split(",")
    started = records.environment()
    results = {}
    for seed in seeds:
        with tempfile.TemporaryDirectory() as workdir:
            command = default_runs.command(args.config, seed, workdir, tuple(args.set))
            default_runs._python(command[1:], f"{args.config} seed {seed}")
            summary = default_runs._read(workdir, "summary.json")
            figures = {key: summary[key] for key in default_runs.SUMMARY_KEYS}
            figures["matches"] = play(workdir, opponents, args.games, seed)
        results[str(seed)] = figures
        print(f"seed {seed}: {figures}", flush=True)
    output = table(results, opponents)
    print(output)
    name = args.name or args.config.replace(":", "_")
    trained = " ".join(default_runs.command(args.config, 0, "DIR", tuple(args.set))[1:])
    command = f"python {trained.replace('--config.seed=0', '--config.seed=SEED')}"
    values = {"output": output, "format": "markdown", "seeds": results}
    path = records.write(name, command, values, started=started)
    print(f"wrote {path}; now run: python benchmarks/render_docs.py")


if __name__ == "__main__":
    main()
