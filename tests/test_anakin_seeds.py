"""`--seeds`: many seeds of an Anakin run as one program, each named in what it prints."""

import os

import pytest

from sebulba import plot
from sebulba.policy import PolicyError, load_run_config
from tests.helpers import read_summary
from tests.test_anakin import _cli


def test_each_seeds_final_line_names_its_seed_and_workdir(tmp_path):
    # Blocks of 2 updates: a steady state after the first call.
    result = _cli(tmp_path / "runs", "--seeds=1,2", "pipeline.updates_per_call=2")
    assert result.returncode == 0, result.stderr[-2000:]
    done = [line for line in result.stdout.splitlines() if line.startswith("sebulba: done")]
    assert [line.split(",")[0] for line in done] == [
        "sebulba: done (seed 1",
        "sebulba: done (seed 2",
    ]
    for seed, line in zip((1, 2), done, strict=True):
        assert os.path.join(str(tmp_path / "runs"), f"seed={seed}") in line
        assert os.path.exists(tmp_path / "runs" / f"seed={seed}" / "summary.json")
    # One program ran every seed's updates: each seed's steady rate is that program's
    # (recording and saving seed 1 is not counted as seed 2's time), and its whole-run
    # rate counts the command's start-up and compiling, so it is the lower.
    summaries = [read_summary(str(tmp_path / "runs" / f"seed={seed}")) for seed in (1, 2)]
    assert summaries[0]["sps"] == summaries[1]["sps"]
    for summary in summaries:
        assert summary["sps_including_compile"] < summary["sps"]
        assert summary["sps_including_compile"] == pytest.approx(
            summary["global_step"] / summary["wall_time_s"]
        )
    # The parent directory: plot draws its seeds as one curve; a tool that needs one run
    # names the runs inside.
    out = tmp_path / "curves.png"
    assert plot.main([str(tmp_path / "runs"), f"--out={out}"]) == 0
    assert out.exists()
    with pytest.raises(PolicyError, match=r"it holds the runs seed=1, seed=2 \(a --seeds"):
        load_run_config(str(tmp_path / "runs"))


def test_a_config_seed_beside_seeds_is_refused_in_one_line(tmp_path):
    result = _cli(tmp_path / "runs", "seed=7", "--seeds=1,2")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--config.seed and --seeds both name seeds" in lines[0], lines
    assert not os.path.exists(tmp_path / "runs")


def test_a_seed_out_of_range_is_refused_naming_the_flag(tmp_path):
    result = _cli(tmp_path / "runs", "--seeds=-1,5")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [
        "sebulba: config error: --seeds=-1,5: seed -1 must be an integer in [0, 1073741824], got -1"
    ], lines
    assert not os.path.exists(tmp_path / "runs")


# Seeds in blocks of updates end as with one update per call: checked in
# tests/test_anakin.py::test_several_updates_per_call_give_the_runs_of_one_per_call,
# whose process compiling with XLA's defaults it shares.


def test_seeds_with_a_lag_of_three_learn_as_each_seed_alone(tmp_path):
    # Each seed carries its own three lagged versions through the vmapped program and its
    # checkpoints: the seeds' states are the single runs' (to float tolerance, as the
    # vmapped program may fuse differently).
    import jax
    import numpy as np

    from sebulba import train
    from sebulba.anakin import seeds as seeds_lib
    from tests.helpers import read_metrics
    from tests.test_anakin import anakin_config

    config = anakin_config(pipeline__policy_lag=3, ckpt__every_updates=3)
    states = seeds_lib.train_seeds(config, str(tmp_path / "seeds"), (1, 2))
    alone = train.train(anakin_config(pipeline__policy_lag=3, seed=2), str(tmp_path / "alone"))
    for a, b in zip(
        jax.tree.leaves(jax.device_get(alone)), jax.tree.leaves(states[1]), strict=True
    ):
        np.testing.assert_allclose(a, jax.device_get(b), rtol=1e-5, atol=1e-6)
    lines = read_metrics(str(tmp_path / "seeds" / "seed=2"))
    assert [line["actor_policy_version"] for line in lines] == [1, 1, 1, 1, 2, 3]
