"""Population-based training: the decisions, the `pbt` section's checks, and a population
trained as one Anakin program (reproducible lineage, exact resume, hyperparameters used)."""

import json
import math
import os
import shutil
import signal

import jax
import numpy as np
import pytest

from sebulba import plot, train
from sebulba.anakin import population as population_lib
from sebulba.anakin import seeds as seeds_lib
from sebulba.config.run_plan import plan
from sebulba.errors import ConfigError
from sebulba.pbt.population import Population
from sebulba.pbt.settings import settings_of
from tests.helpers import fork_the_commands_of, read_metrics, read_summary
from tests.test_anakin import NUM_UPDATES, _cli, _without_timing, anakin_config


@pytest.fixture(autouse=True)
def _forked_member_runs(monkeypatch):
    from sebulba import sweep  # The members' runs are started by its runner.

    fork_the_commands_of(monkeypatch, sweep)


STEPS_PER_UPDATE = 128  # anakin_config: 8 envs x 16 steps.


def population_config(**overrides):
    """anakin_config with a population of 3 mutating the step size and the entropy
    coefficient, with exploit/explore steps after updates 2 and 4."""
    overrides = {
        "pbt__population": 3,
        "pbt__hyperparameters": "learning_rate,ent_coef",
        "pbt__interval": 2 * STEPS_PER_UPDATE,
        **overrides,
    }
    return anakin_config(**overrides)


def _settings(**overrides):
    config = population_config(**overrides)
    return settings_of(config, plan(config, values_only=True).sizes)


# Decisions ------------------------------------------------------------------------------


def test_a_fresh_population_holds_the_config_and_draws_the_rest_inside_the_ranges():
    settings = _settings(pbt__population=8)
    members = Population(settings, seed=1)
    assert members.values[0] == [pytest.approx(2.5e-4), pytest.approx(0.01)]
    for row in members.values[1:]:
        for value, (_, low, high) in zip(row, settings.ranges(), strict=True):
            assert low <= value <= high
    assert len({tuple(row) for row in members.values}) == 8
    # Another seed, other draws; the same seed, the same.
    assert Population(settings, seed=2).values[1:] != members.values[1:]
    assert Population(settings, seed=1).values == members.values


def test_a_step_replaces_the_bottom_with_explored_copies_of_the_top():
    # No resampling and wide ranges: every copied value is multiplied or divided by 1.25.
    settings = _settings(pbt__population=8, pbt__resample_probability=0.0, pbt__spread=100.0)
    members = Population(settings, seed=1)
    before = [list(row) for row in members.values]
    for member, mean in enumerate([5.0, 1.0, 9.0, 3.0, 9.0, 0.5, 7.0, 2.0]):
        members.record(member, [mean - 1, mean + 1])
    sources = members.step(update=10, global_step=1280)
    # truncation 0.25: 2 replaced. Top: members 2 and 4 (9.0; the lower index first on a
    # tie); bottom: 1 and 5.
    assert [m for m in range(8) if sources[m] != m] == [1, 5]
    assert set(sources[[1, 5]]) <= {2, 4}
    for member in (1, 5):
        for h in range(2):
            ratio = members.values[member][h] / before[int(sources[member])][h]
            assert ratio == pytest.approx(1.25, rel=1e-6) or ratio == pytest.approx(0.8, rel=1e-6)
    for member in set(range(8)) - {1, 5}:
        assert members.values[member] == before[member]
    step = members.lineage[-1]
    assert step["generation"] == 1 and step["update"] == 10
    assert step["returns"] == [5.0, 1.0, 9.0, 3.0, 9.0, 0.5, 7.0, 2.0]
    assert [r["member"] for r in step["replaced"]] == [1, 5]
    assert members.copied_from[1] == sources[1] and members.copied_from[0] is None
    assert members.window_returns() == [None] * 8  # A new window.


def test_a_step_waits_while_a_member_has_finished_no_episode():
    members = Population(_settings(), seed=1)
    members.record(0, [1.0])
    members.record(1, [2.0])
    assert members.step(update=2, global_step=256) is None
    assert members.generation == 0 and members.lineage == []
    assert members.window_returns() == [1.0, 2.0, None]  # The window runs on.


def test_the_same_seed_and_returns_give_the_same_lineage_and_a_saved_state_continues_it():
    settings = _settings(pbt__population=6, pbt__resample_probability=0.5)
    rng = np.random.default_rng(0)
    returns = rng.normal(size=(5, 6, 3))

    def lineage(resume_after=None):
        members = Population(settings, seed=3)
        for generation, block in enumerate(returns):
            if generation == resume_after:  # Through JSON, as a checkpoint holds it.
                state = json.loads(json.dumps(members.state_dict()))
                members = Population(settings, seed=3, state=state)
            for member, episodes in enumerate(block):
                members.record(member, episodes)
            members.step(update=generation + 1, global_step=0)
        return members.lineage, members.values

    reference = lineage()
    assert lineage() == reference
    assert lineage(resume_after=2) == reference
    other = Population(settings, seed=4)
    for member, episodes in enumerate(returns[0]):
        other.record(member, episodes)
    other.step(update=1, global_step=0)
    assert other.lineage[0]["replaced"] != reference[0][0]["replaced"]


def test_resampled_values_are_drawn_inside_the_ranges():
    settings = _settings(pbt__population=4, pbt__resample_probability=1.0)
    members = Population(settings, seed=1)
    for generation in range(20):
        for member in range(4):
            members.record(member, [float(member)])
        members.step(update=generation + 1, global_step=0)
        for row in members.values:
            for value, (_, low, high) in zip(row, settings.ranges(), strict=True):
                assert low <= value <= high
    assert len({row[0] for row in members.values}) > 1


def test_values_stay_inside_the_agents_declared_bounds():
    # A discount's range is cut at 1, whatever the spread.
    settings = _settings(pbt__hyperparameters="gamma", pbt__spread=10.0)
    assert settings.high == (1.0,) and settings.low == (pytest.approx(0.099),)


# Checks ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"pbt__population": 1}, "pbt.population must be at least 2"),
        ({"pbt__hyperparameters": "learning_rat"}, "agent.learning_rat is not a key"),
        ({"pbt__hyperparameters": "num_minibatches"}, "is the integer 2: integers shape"),
        ({"pbt__hyperparameters": "anneal_lr"}, "agent.anneal_lr is True; PBT mutates numbers"),
        ({"pbt__hyperparameters": " , "}, "must name at least one agent key"),
        ({"pbt__hyperparameters": "ent_coef,ent_coef"}, "names a key twice"),
        ({"agent__ent_coef": 0.0, "pbt__hyperparameters": "ent_coef"}, "must start"),
        ({"pbt__truncation": 0.6}, r"pbt.truncation must be a number in \(0, 0.5\]"),
        ({"pbt__perturb": 1.0}, "pbt.perturb must be"),
        ({"pbt__spread": 0.5}, "pbt.spread must be"),
    ],
)
def test_a_bad_pbt_section_is_refused_naming_the_field(overrides, message):
    with pytest.raises(ConfigError, match=message):
        plan(population_config(**overrides), values_only=True)


def test_the_cli_refuses_a_population_on_envpool_and_beside_seeds_in_one_line(tmp_path):
    result = _cli(tmp_path / "runs", "pbt.population=2", "--seeds=1,2")
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--seeds and pbt.population both" in lines[0], lines
    assert not os.path.exists(tmp_path / "runs")
    with pytest.raises(ConfigError, match="pbt.population trains its members as one program"):
        config = anakin_config(pbt__population=2)
        config.env.id = "CartPole-v1"  # envpool's
        population_lib.train_population(config, str(tmp_path / "envpool"))
    with pytest.raises(ConfigError, match="trains a population, not one run"):
        train.train(anakin_config(pbt__population=2), str(tmp_path / "one"))


def test_a_hyperparameter_the_agent_reads_as_a_python_number_is_refused_with_no_workdir(
    tmp_path,
):
    # PPO's PopArt settings are read as Python numbers while it builds its functions.
    result = _cli(tmp_path / "runs", "pbt.population=2", "pbt.hyperparameters=popart_step_size")
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "agent.popart_step_size cannot change inside the compiled program" in lines[0]
    assert not os.path.exists(tmp_path / "runs")


# A population as one program ------------------------------------------------------------


def _lineage(workdir):
    with open(os.path.join(workdir, "population.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def population_run(tmp_path_factory):
    """An uninterrupted population run: its workdir and the members' final states."""
    workdir = str(tmp_path_factory.mktemp("population") / "run")
    states = population_lib.train_population(population_config(), workdir)
    return workdir, jax.device_get(states)


def test_a_population_writes_each_members_run_and_its_lineage(population_run):
    workdir, _ = population_run
    population = _lineage(workdir)
    assert population["population"] == 3 and population["generation"] == 2
    assert [step["update"] for step in population["lineage"]] == [2, 4]
    for member in range(3):
        path = os.path.join(workdir, f"member={member}")
        summary = read_summary(path)
        assert summary["updates"] == NUM_UPDATES
        assert summary["pbt"]["member"] == member
        assert summary["pbt"]["lineage"] == population["lineage"]
        assert summary["pbt"]["hyperparameters"] == population["members"][member]["hyperparameters"]
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            assert json.load(f)["seed"] == 1 + member
        lines = read_metrics(path)
        assert [line["pbt/generation"] for line in lines] == [0, 0, 1, 1, 2, 2]
        # Each line names the values its update used: a replaced member's change after
        # the step that replaced it.
        for step in population["lineage"]:
            for replaced in step["replaced"]:
                if replaced["member"] == member:
                    after = lines[step["update"]]
                    assert after["pbt/copied_from"] == replaced["copied_from"]
                    for name, value in replaced["hyperparameters"].items():
                        assert after[f"pbt/{name}"] == value
    assert population["best_member"] in range(3)
    # sebulba.plot draws the population: each member's return and values.
    out = os.path.join(workdir, "population.png")
    assert plot.main([workdir, f"--out={out}"]) == 0
    assert os.path.getsize(out) > 0


def test_one_and_two_learner_devices_give_the_same_population(population_run, tmp_path):
    # The member axis is never split; each member's envs are, as a single run's: the same
    # episodes, so the same lineage, and parameters equal to float reduction order.
    reference, reference_states = population_run
    workdir = str(tmp_path / "two")
    states = population_lib.train_population(
        population_config(mesh__learner_device_ids=[0, 1]), workdir
    )
    assert _lineage(workdir)["lineage"] == _lineage(reference)["lineage"]
    for member in range(3):
        one, two = reference_states[member].params, jax.device_get(states[member].params)
        for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(two), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-6)


def test_a_replaced_member_continues_from_its_sources_state(tmp_path):
    # Stopped right after the first step, the replaced member's checkpoint holds its
    # source's learner state (parameters, optimiser state, counters): the same checksum.
    from sebulba import checkpoint

    workdir = str(tmp_path / "run")
    _interrupted(population_config(), workdir, after_update=2)
    replaced = _lineage_from_checkpoint(workdir)["lineage"][0]["replaced"][0]
    checksums = {}
    for member in range(3):
        directory = checkpoint.checkpoints_dir(os.path.join(workdir, f"member={member}"))
        assert checkpoint.list_steps(directory) == [2]
        checksums[member] = checkpoint.read_meta(directory, 2)["checksums"]["state"]
    assert checksums[replaced["member"]] == checksums[replaced["copied_from"]]
    assert len(set(checksums.values())) == 2  # The third member kept its own.


def _interrupted(config, workdir, after_update):
    """Trains `config` until a SIGINT sent as update `after_update` reports."""
    original = seeds_lib.block_reports

    def interrupting(first, count, *args, **kwargs):
        if first <= after_update < first + count and kwargs.get("seed") == 0:
            os.kill(os.getpid(), signal.SIGINT)
        return original(first, count, *args, **kwargs)

    seeds_lib.block_reports = interrupting
    try:
        population_lib.train_population(config, workdir)
    finally:
        seeds_lib.block_reports = original


def _lineage_from_checkpoint(workdir):
    from sebulba import checkpoint

    directory = checkpoint.checkpoints_dir(os.path.join(workdir, "member=0"))
    return checkpoint.read_meta(directory, checkpoint.list_steps(directory)[-1])["pbt"]


@pytest.mark.parametrize("after_update", [3])
def test_an_interrupted_population_resumes_bit_identically(population_run, tmp_path, after_update):
    reference, reference_states = population_run
    workdir = str(tmp_path / "run")
    config = population_config()
    _interrupted(config, workdir, after_update)
    assert not os.path.exists(os.path.join(workdir, "population.json"))
    # Stopped between two steps: the window of episodes since the last one is saved.
    saved = _lineage_from_checkpoint(workdir)
    assert saved["generation"] == 1 and sum(saved["window_counts"]) > 0
    states = population_lib.train_population(config, workdir)
    assert _lineage(workdir)["lineage"] == _lineage(reference)["lineage"]
    for member in range(3):
        path, expected = (os.path.join(w, f"member={member}") for w in (workdir, reference))
        assert read_summary(path)["params_checksum"] == read_summary(expected)["params_checksum"]
        assert _without_timing(read_metrics(path)) == _without_timing(read_metrics(expected))
        for a, b in zip(
            jax.tree.leaves(reference_states[member]), jax.tree.leaves(states[member]), strict=True
        ):
            np.testing.assert_array_equal(a, jax.device_get(b))


def test_each_member_trains_with_its_own_hyperparameters(tmp_path):
    # No step in these 6 updates: member 1 is then a run of seed 2 with its drawn values.
    config = population_config(pbt__interval=100 * STEPS_PER_UPDATE)
    states = population_lib.train_population(config, str(tmp_path / "population"))
    values = _lineage(str(tmp_path / "population"))["members"][1]["hyperparameters"]
    assert values["learning_rate"] != config.agent.learning_rate
    alone = anakin_config(
        seed=2, agent__learning_rate=values["learning_rate"], agent__ent_coef=values["ent_coef"]
    )
    state = train.train(alone, str(tmp_path / "alone"))
    for a, b in zip(
        jax.tree.leaves(jax.device_get(state)), jax.tree.leaves(states[1]), strict=True
    ):
        np.testing.assert_allclose(a, jax.device_get(b), rtol=1e-5, atol=1e-6)
    assert not math.isclose(values["ent_coef"], config.agent.ent_coef)


# A population of runs (python -m sebulba.pbt) -------------------------------------------


def _population_of_runs(workdir):
    # The test-only minimal agent (one linear layer trained by SGD on envpool's CartPole,
    # 8 envs x 16 steps per update) as the members: each member round is a process of its
    # own, and this agent compiles in a fraction of PPO's time. Any config's runs form a
    # population (sebulba.pbt.runs); PPO's members train as one program in the tests above.
    from sebulba.pbt.runs import PopulationOfRuns

    steps_per_update = 8 * 16
    overrides = [
        "pbt.population=2",
        "pbt.hyperparameters=learning_rate",
        f"pbt.interval={3 * steps_per_update}",
        f"total_timesteps={4 * steps_per_update}",
    ]
    return PopulationOfRuns("tests/configs/minimal_cartpole.py", overrides, str(workdir))


def test_a_population_of_runs_resumes_after_its_controller_dies(tmp_path, monkeypatch):
    # Two members of 4 updates, a step after update 3. The controller dies once both have
    # finished round 1 but before its step; the same command then decides the step from
    # their metrics, resumes the replaced member from its source's checkpoint with new
    # values, and ends as a population that was never stopped.
    from sebulba.pbt import runs

    def finished(workdir):
        with open(os.path.join(workdir, "population.json"), encoding="utf-8") as f:
            return json.load(f)

    # The uninterrupted population's workdir as its controller enters the step is what a
    # controller that died there leaves (round 1 is the same runs, with the same seeds):
    # copied, it is the stopped population, without training round 1 twice.
    original = runs.PopulationOfRuns.step

    def copy_then_step(population, first, last):
        shutil.copytree(population.workdir, tmp_path / "stopped")
        return original(population, first, last)

    monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    monkeypatch.setattr(runs.PopulationOfRuns, "step", copy_then_step)
    assert runs.run_population(_population_of_runs(tmp_path / "whole"), parallel=2) == 0
    whole = finished(tmp_path / "whole")
    monkeypatch.setattr(runs.PopulationOfRuns, "step", original)
    assert not os.path.exists(tmp_path / "stopped" / "population.json")  # No step saved.
    assert runs.run_population(_population_of_runs(tmp_path / "stopped"), parallel=2) == 0
    resumed = finished(tmp_path / "stopped")

    assert resumed["lineage"] == whole["lineage"] and len(whole["lineage"]) == 1
    for a, b in zip(resumed["members"], whole["members"], strict=True):
        assert (a["params_checksum"], a["hyperparameters"]) == (
            b["params_checksum"],
            b["hyperparameters"],
        )
    step = whole["lineage"][0]["replaced"][0]
    member_dir = tmp_path / "whole" / f"member={step['member']}"
    lines = read_metrics(str(member_dir))
    assert [line["pbt/member"] for line in lines] == [step["member"]] * 4
    # Update 4 trained with the explored value, from the source's update-3 state.
    assert {line["pbt/learning_rate"] for line in lines[3:]} == {
        step["hyperparameters"]["learning_rate"]
    }
    with open(member_dir / "run.log", encoding="utf-8") as f:
        log = f.read()
    assert "stopped by ckpt.stop_after_update after update 3/4" in log
    assert f"resuming after update 3 from {member_dir}" in log
    summary = read_summary(str(member_dir))
    assert summary["pbt"]["replacements"][0]["copied_from"] == step["copied_from"]


def test_a_population_of_runs_refuses_a_bad_definition_in_one_line(tmp_path):
    from sebulba.pbt import runs

    assert runs.main(["--config=configs/ppo_cartpole.py", f"--workdir={tmp_path / 'p'}"]) == 2
    assert not os.path.exists(tmp_path / "p")
    with pytest.raises(ConfigError, match="pbt.member is set by python -m sebulba.pbt"):
        runs.PopulationOfRuns("configs/ppo_cartpole.py", ["pbt.population=2", "pbt.member=0"], "x")
