"""Documented results cannot go stale.

Every result README.md and docs/ quote is rendered from a record in docs/records/ that
the measuring script wrote (benchmarks/records.py). These tests fail when a block in the
docs differs from its record, and when a fresh run of a default config no longer gives
its record's numbers: a change that alters the README's default run must regenerate the
record (`python benchmarks/default_runs.py ...`) and the docs in the same commit.
"""

import os
import sys
import warnings

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import default_runs  # noqa: E402
import records  # noqa: E402
import render_docs  # noqa: E402

# The README's promise for its default configs: every recorded seed ends near 500.
LEARNED = 475.0


def test_every_record_block_in_the_docs_is_rendered_from_its_record():
    assert render_docs.stale_blocks() == [], "run: python benchmarks/render_docs.py"


def test_every_record_is_quoted_and_says_where_it_was_measured():
    quoted = set()
    for path in render_docs.documents():
        with open(path, encoding="utf-8") as f:
            quoted |= {m["name"] for m in render_docs.BLOCK.finditer(f.read())}
    assert set(records.names()) <= quoted, "a record nobody quotes"
    for name in records.names():
        record = records.read(name)
        assert len(record["commit"]) == 40 and not record["dirty"], name
        assert record["machine"]["cpu"] and record["versions"]["jax"], name
        assert record["command"].startswith("python "), name


def test_a_stale_block_is_found():
    record = records.read("ppo_cartpole")
    text = "<!-- record:ppo_cartpole line -->\nseeds 1 end at 1.0\n<!-- /record:ppo_cartpole -->"
    assert render_docs.rendered(text) != text
    assert str(round(record["values"]["seeds"]["1"]["mean_return"], 1)) in render_docs.rendered(
        text
    )


@pytest.mark.slow
@pytest.mark.parametrize("config", ["ppo_cartpole", "impala_cartpole"])
def test_the_default_run_gives_its_recorded_numbers(config):
    # The README's command for the record's first seed, in a process of its own with JAX's
    # default devices (as a user runs it): ~1 min (PPO) and ~30 s (IMPALA) on 2 cores.
    record = records.read(config)
    seed, recorded = next(iter(record["values"]["seeds"].items()))
    result = default_runs.run(config, int(seed))
    regenerate = (
        f"if the change is meant to alter the run, regenerate: python "
        f"benchmarks/default_runs.py --config={config} --seeds="
        f"{','.join(record['values']['seeds'])} && python benchmarks/render_docs.py"
    )
    # The learning claim holds everywhere.
    assert result["mean_return"] >= LEARNED, (result, regenerate)
    same, why = records.same_environment(record)
    if not same:
        warnings.warn(f"{config}: numbers not compared exactly here: {why}", stacklevel=1)
        return
    assert result["params_checksum"] == recorded["params_checksum"], (
        f"{config} seed {seed} no longer gives its recorded parameters; {regenerate}"
    )
    assert result["mean_return"] == recorded["mean_return"], regenerate
    assert result["updates"] == recorded["updates"]


def test_every_recorded_seed_of_the_default_configs_learned():
    for config in ("ppo_cartpole", "impala_cartpole"):
        seeds = records.read(config)["values"]["seeds"]
        assert len(seeds) >= 5, config
        returns = {seed: s["mean_return"] for seed, s in seeds.items()}
        assert min(returns.values()) >= LEARNED, (config, returns)


def test_same_environment_names_what_differs():
    record = {**records.environment(), "name": "x"}  # This machine, these versions...
    assert records.same_environment(record) == (True, "same CPU model and versions as the record")
    record["versions"] = {**record["versions"], "jax": "0.0.1"}  # ...but another jax.
    same, why = records.same_environment(record)
    assert not same and "jax" in why and "0.0.1" in why
    record["machine"]["cpu"] = "another CPU"
    assert "the record's 'another CPU'" in records.same_environment(record)[1]
