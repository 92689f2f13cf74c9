"""sebulba.sweep: the product and its directories, resume, failures, SLURM arrays, the table."""

import json
import os
import shlex
import shutil
import signal
import subprocess

import numpy as np
import pytest

from sebulba import plot, sweep
from sebulba.errors import ConfigError
from sebulba.experiments import sweep_report, sweep_slurm
from sebulba.experiments.sweep_plan import parse_sweep, split_values
from tests.helpers import (
    fork_the_commands_of,
    popen_python,
    run_python,
    workdir_held_by_another_process,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MINIMAL = "tests/configs/minimal_cartpole.py"  # 6 updates of 128 steps: seconds per run.


def sweep_args(workdir):
    return ["-m", "sebulba.sweep", f"--config={MINIMAL}", f"--workdir={workdir}"]


def run_sweep(workdir, *args, timeout=240):
    # The sweep command is forked (tests/helpers.run_python); the runs it starts are new
    # interpreters, as a user's are.
    return run_python(*sweep_args(workdir), *args, env=dict(os.environ), timeout=timeout)


@pytest.fixture(autouse=True)
def _forked_runs_of_sweeps_run_here(monkeypatch):
    fork_the_commands_of(monkeypatch, sweep)


def started(output):
    return [line for line in output.splitlines() if "(started " in line]


# ----- the product and directory naming ---------------------------------------------


def test_runs_are_the_product_of_configs_settings_and_seeds_in_named_directories():
    plan = parse_sweep(
        "out",
        ["configs/ppo_cartpole.py", "configs/impala_cartpole.py:smoke"],
        "1,2",
        [
            "env.id=CartPole-v1,Acrobot-v1",
            "mesh.learner_device_ids=(0,),(0, 1)",
            "agent.num_minibatches=2",  # One value: applied to every run, not in the names.
        ],
    )
    runs = plan.runs()
    assert len(runs) == 2 * 2 * 2 * 2
    assert [run.index for run in runs] == list(range(16))
    # Configs slowest, then the --set keys in order, seeds fastest.
    assert [os.path.relpath(run.workdir, "out") for run in runs[:5]] == [
        "config=ppo_cartpole,env.id=CartPole-v1,mesh.learner_device_ids=0/seed=1",
        "config=ppo_cartpole,env.id=CartPole-v1,mesh.learner_device_ids=0/seed=2",
        "config=ppo_cartpole,env.id=CartPole-v1,mesh.learner_device_ids=0+1/seed=1",
        "config=ppo_cartpole,env.id=CartPole-v1,mesh.learner_device_ids=0+1/seed=2",
        "config=ppo_cartpole,env.id=Acrobot-v1,mesh.learner_device_ids=0/seed=1",
    ]
    assert runs[-1].workdir == os.path.join(
        "out",
        "config=impala_cartpole_smoke,env.id=Acrobot-v1,mesh.learner_device_ids=0+1",
        "seed=2",
    )
    assert len({run.workdir for run in runs}) == 16
    assert runs[3].main_arguments() == [
        "--config=configs/ppo_cartpole.py",
        f"--workdir={runs[3].workdir}",
        "--config.seed=2",
        "--config.env.id=CartPole-v1",
        "--config.mesh.learner_device_ids=(0, 1)",
        "--config.agent.num_minibatches=2",
    ]
    # Seeds only: the runs sit directly in the sweep's directory.
    only_seeds = parse_sweep("out", [MINIMAL], "3,1", None).runs()
    assert [run.workdir for run in only_seeds] == ["out/seed=3", "out/seed=1"]


def test_values_split_on_commas_outside_brackets_and_quotes():
    assert split_values("(0,1),(2,3)") == ["(0,1)", "(2,3)"]
    assert split_values("3e-4, 1e-3") == ["3e-4", "1e-3"]
    assert split_values("'a,b',[1,(2,3)]") == ["'a,b'", "[1,(2,3)]"]
    for bad in ("(0,1", "1,,2", "'a"):
        with pytest.raises(ConfigError):
            split_values(bad)


@pytest.mark.parametrize(
    "seeds, settings, message",
    [
        ("1,1", [], "--seeds=1,1: a seed is repeated"),
        ("1,x", [], "--seeds=1,x: expected integers"),
        ("1", ["seed=1,2"], "give seeds with --seeds"),
        ("1", ["env.id=a/b,a_b"], "would share the directory"),
        ("1", ["lr"], "--set lr: expected KEY=V1,V2"),
        # One number written two ways would train the same setting twice.
        ("1", ["agent.learning_rate=1e-3,0.001"], "a value is repeated"),
        ("1", ["agent.hidden_sizes=(64,64),(64, 64)"], "a value is repeated"),
    ],
)
def test_a_malformed_sweep_is_one_error(seeds, settings, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        parse_sweep("out", [MINIMAL], seeds, settings)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--set", "agent.learning_rat=0.1,0.2"], '(did you mean "agent.learning_rate"?)'),
        (["--set", "total_timesteps=768,lots"], "--set total_timesteps=lots: "),
        (["--set", "env=1,2"], "--set env: is a config section"),
        (["--config=configs/nowhere.py"], "--config=configs/nowhere.py: cannot load it"),
        # A run's own checks, before any run starts (sebulba.config.run_plan's values).
        (
            ["--set", "total_timesteps=1,768"],
            "run total_timesteps=1/seed=1: total_timesteps (1) is smaller than one update",
        ),
    ],
)
def test_a_bad_key_or_value_fails_in_one_line_before_any_run(tmp_path, capsys, args, message):
    workdir = tmp_path / "sweep"
    status = sweep.main([f"--config={MINIMAL}", f"--workdir={workdir}", *args])
    assert status == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("sebulba.sweep: error: "), err
    assert message in err
    assert not workdir.exists()


def test_a_built_in_agents_size_rule_fails_in_one_line_before_any_run(tmp_path, capsys):
    # A minibatch count that does not divide the rollout: refused before the first run
    # starts, not when that run builds its agent (the sweep's other runs done by then).
    workdir = tmp_path / "sweep"
    args = ["--config=configs/ppo_cartpole.py", f"--workdir={workdir}"]
    status = sweep.main([*args, "--set", "agent.num_minibatches=4,3"])
    assert status == 2
    err = capsys.readouterr().err
    assert err == (
        "sebulba.sweep: error: run agent.num_minibatches=3/seed=1: agent.num_steps (128) "
        "must be a positive multiple of agent.num_minibatches (3)\n"
    )
    assert not workdir.exists()


def test_a_workdir_holding_another_sweep_is_refused(tmp_path, capsys):
    workdir = tmp_path / "sweep"
    base = [f"--config={MINIMAL}", f"--workdir={workdir}", "--seeds=1,2"]
    assert sweep.main([*base, "--slurm"]) == 0  # Writes the definition, runs nothing.
    assert sweep.main([*base, "--slurm"]) == 0  # The same sweep: fine.
    capsys.readouterr()
    assert sweep.main([*base[:2], "--seeds=1", "--slurm"]) == 2  # Fewer seeds: another.
    err = capsys.readouterr().err
    assert "holds a different sweep (it has seeds [1, 2]; --seeds lacks [2]" in err
    assert len(err.splitlines()) == 1
    assert sweep.main([*base, "--set", "total_timesteps=768,1536", "--slurm"]) == 2
    assert "--set keys [] here, ['total_timesteps'] now" in capsys.readouterr().err
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    assert sweep.main([*base[:1], f"--workdir={tmp_path / 'other'}", "--slurm"]) == 2
    assert "is not empty and holds no sweep.json" in capsys.readouterr().err
    # Runs started by hand (tpu.sh) into a directory may still be reported on.
    assert sweep.main([*base[:1], f"--workdir={tmp_path / 'other'}", "--report"]) == 0
    assert (tmp_path / "other" / "sweep.json").exists()


def test_a_second_sweep_in_a_directory_in_use_is_refused_in_one_line(tmp_path, capsys):
    # Its runs would be refused one by one (each is in use) and counted failed.
    workdir = tmp_path / "sweep"
    with workdir_held_by_another_process(workdir) as pid:
        assert sweep.main([f"--config={MINIMAL}", f"--workdir={workdir}"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert err.startswith(
        f"sebulba.sweep: error: workdir {workdir} is in use by another run: pid {pid} "
    ), err
    assert os.listdir(workdir) == [".sebulba-lock"]  # No run started, no sweep.json.


# ----- running: resume, failures -------------------------------------------------------


def test_an_interrupted_sweep_resumes_and_skips_finished_runs(tmp_path):
    workdir = tmp_path / "sweep"
    process = popen_python(
        *sweep_args(workdir),
        "--seeds=1,2,3",
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    # Interrupt while run 2 is in progress, after run 1 has finished: once the sweep says
    # it started run 2 (its run.log appears a moment earlier, before the sweep counts it).
    printed = []
    for line in process.stdout:
        printed.append(line)
        if "(started seed=2)" in line:
            break
    process.send_signal(signal.SIGINT)
    rest, _ = process.communicate(timeout=120)
    output = "".join(printed) + rest
    assert process.returncode == 130, output
    assert "SIGINT received: stopping 1 running run(s)" in output
    assert (workdir / "seed=1" / "summary.json").exists()
    assert not (workdir / "seed=3").exists()
    first = sweep_report.build_report(parse_sweep(str(workdir), [MINIMAL], "1,2,3", None))["runs"]
    finished_first = [run["seed"] for run in first if run["status"] == "done"]
    assert len(started(output)) == 2 and 1 in finished_first and 3 not in finished_first

    again = run_sweep(workdir, "--seeds=1,2,3", "--parallel=2")
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"3 runs in {workdir}: {len(finished_first)} done already" in again.stdout
    # Exactly the unfinished runs started again; run 1 was not touched.
    assert len(started(again.stdout)) == 3 - len(finished_first)
    assert (workdir / "seed=1" / "run.log").read_text().count("# sebulba.sweep ") == 1
    assert (workdir / "seed=3" / "run.log").read_text().count("# sebulba.sweep ") == 1
    report = json.loads((workdir / "sweep.json").read_text())
    assert [run["status"] for run in report["runs"]] == ["done"] * 3
    assert report["settings"][0]["final_return"]["n"] == 3
    # Everything done: a rerun starts nothing.
    third = run_sweep(workdir, "--seeds=1,2,3")
    assert third.returncode == 0 and not started(third.stdout)


def test_a_failing_run_is_reported_and_the_others_finish(tmp_path):
    workdir = tmp_path / "sweep"
    # A misspelt task passes the sweep's checks (they leave env ids to the runs): that
    # run exits with a config error.
    result = run_sweep(workdir, "--seeds=1", "--set", "env.id=CartPol-v1,CartPole-v1")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAILED env.id=CartPol-v1/seed=1: exit 2: sebulba: config error: env.id" in (
        result.stdout
    )
    assert "1/2 done, 0 running, 1 failed, 0 pending" in result.stdout
    assert (workdir / "env.id=CartPole-v1" / "seed=1" / "summary.json").exists()
    table = result.stdout.split("| setting")[1]
    assert "| env.id=CartPol-v1 | 0/1 (1 failed) | - |" in table
    assert "| env.id=CartPole-v1 | 1/1 | " in table
    report = json.loads((workdir / "sweep.json").read_text())
    failed = report["runs"][0]
    assert failed["status"] == "failed" and "is not an envpool task" in failed["error"]
    assert report["runs"][1]["status"] == "done"


# ----- SLURM ---------------------------------------------------------------------------


def slurm_dry_run(path, cwd=None, **variables):
    """Runs a rendered sweep script with SEBULBA_DRY_RUN=1 and `variables` as its SLURM job."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SEBULBA_", "SLURM_"))}
    return subprocess.run(
        ["bash", str(path)],
        env={**env, "SEBULBA_DRY_RUN": "1", **variables},
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=30,
    )


def test_the_slurm_array_has_one_task_per_run_with_its_arguments(tmp_path, capsys):
    workdir = tmp_path / "sweep"
    args = [
        f"--config={MINIMAL}",
        f"--workdir={workdir}",
        "--seeds=1,2,3",
        "--set",
        "agent.learning_rate=0.01,0.1",
        "--set",
        "mesh.learner_device_ids=(0,),(0,1)",
    ]
    assert sweep.main([*args, "--slurm", "--dry-run", "--parallel=4"]) == 0
    script = capsys.readouterr().out
    assert not workdir.exists()  # --dry-run prints only.
    directives = [line for line in script.splitlines() if line.startswith("#SBATCH ")]
    assert "#SBATCH --array=0-11%4" in directives
    assert "#SBATCH --ntasks-per-node=1" in directives
    assert any(d.startswith("#SBATCH --signal=TERM@") for d in directives)

    assert sweep.main([*args, "--slurm"]) == 0
    path = workdir / "sweep.sbatch"
    assert "#SBATCH --array=0-11\n" in path.read_text()  # No cap without --parallel.
    runs = parse_sweep(str(workdir), [MINIMAL], "1,2,3", args[4::2]).runs()
    assert len(runs) == 12
    for run in runs:
        rendered = slurm_dry_run(
            path, cwd=tmp_path, SLURM_ARRAY_TASK_ID=str(run.index), SLURM_JOB_NUM_NODES="1"
        )
        assert rendered.returncode == 0, rendered.stderr
        assert shlex.split(rendered.stdout) == [
            "srun",
            "--nodes=1",
            "--ntasks=1",
            "--ntasks-per-node=1",
            "--label",
            "python",
            "-m",
            "sebulba.main",
            "--distributed",
            *run.main_arguments(),
        ]
    assert runs[7].main_arguments()[1:] == [
        f"--workdir={workdir}/agent.learning_rate=0.1,mesh.learner_device_ids=0/seed=2",
        "--config.seed=2",
        "--config.agent.learning_rate=0.1",
        "--config.mesh.learner_device_ids=(0,)",
    ]
    beyond = slurm_dry_run(path, SLURM_ARRAY_TASK_ID="12", SLURM_JOB_NUM_NODES="1")
    assert beyond.returncode == 2 and "no run for array task 12" in beyond.stderr
    # `sbatch --ntasks-per-node=8 --nodes=2 sweep.sbatch`: srun would inherit 16 tasks.
    two_nodes = slurm_dry_run(
        path, SLURM_ARRAY_TASK_ID="3", SLURM_NTASKS="16", SLURM_JOB_NUM_NODES="2"
    )
    assert shlex.split(two_nodes.stdout)[:4] == [
        "srun",
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
    ]
    outside_a_job = slurm_dry_run(path, SLURM_ARRAY_TASK_ID="3")
    assert outside_a_job.returncode == 2
    assert "SLURM_JOB_NUM_NODES is not set" in outside_a_job.stderr
    if shutil.which("shellcheck"):
        check = subprocess.run(["shellcheck", str(path)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout


def test_submit_without_sbatch_fails_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    workdir = tmp_path / "sweep"
    status = sweep.main([f"--config={MINIMAL}", f"--workdir={workdir}", "--slurm", "--submit"])
    assert status == 2
    err = capsys.readouterr().err
    assert err == (
        "sebulba.sweep: error: --submit: sbatch is not on PATH "
        "(render with --slurm and submit elsewhere)\n"
    )
    assert not workdir.exists()


def rendered_workdir(path, task):
    """The run directory that array task `task` of the sweep script at `path` starts."""
    result = slurm_dry_run(path, SLURM_ARRAY_TASK_ID=str(task), SLURM_JOB_NUM_NODES="1")
    assert result.returncode == 0, result.stderr
    (workdir,) = [w for w in shlex.split(result.stdout) if w.startswith("--workdir=")]
    return workdir.removeprefix("--workdir=")


def test_a_sweep_beyond_slurms_array_size_limit_is_several_arrays(tmp_path, capsys):
    # Slurm's default MaxArraySize (1001) refuses array task ids above 1000 at submission.
    workdir = tmp_path / "sweep"
    seeds = ",".join(str(seed) for seed in range(1, 2003))
    args = [f"--config={MINIMAL}", f"--workdir={workdir}", f"--seeds={seeds}", "--slurm"]
    assert sweep.main([*args, "--parallel=8"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        "sebulba.sweep: 2002 runs are 3 job arrays of at most 1000 tasks (Slurm's default "
        "MaxArraySize is 1001); --parallel=8 caps each"
    )
    expected = {"sweep-runs-0-999.sbatch": 0, "sweep-runs-1000-1999.sbatch": 1000}
    expected["sweep-runs-2000-2001.sbatch"] = 2000
    assert sorted(p.name for p in workdir.glob("*.sbatch")) == sorted(expected)
    assert out[1:] == [
        f"sebulba.sweep: wrote {workdir / name} ({min(1000, 2002 - first)} array tasks: runs "
        f"{first}-{min(first + 999, 2001)}); submit: sbatch {workdir / name}"
        for name, first in expected.items()
    ]
    runs = parse_sweep(str(workdir), [MINIMAL], seeds, []).runs()
    for name, first in expected.items():
        path = workdir / name
        tasks = min(1000, len(runs) - first)
        assert f"#SBATCH --array=0-{tasks - 1}%8\n" in path.read_text()
        # Its tasks are the runs from `first` on, in order, and none beyond.
        assert rendered_workdir(path, 0) == runs[first].workdir
        assert rendered_workdir(path, tasks - 1) == runs[first + tasks - 1].workdir
        assert slurm_dry_run(path, SLURM_ARRAY_TASK_ID=str(tasks)).returncode == 2
    if shutil.which("shellcheck"):
        check = subprocess.run(["shellcheck", str(path)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout
    # --dry-run prints every script, each under its path.
    assert sweep.main([*args, "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert [line for line in printed.splitlines() if line.startswith("# ==> ")] == [
        f"# ==> {workdir / name} <==" for name in expected
    ]
    assert printed.count("#!/bin/bash\n") == 3


def test_rerendering_a_sweep_replaces_the_scripts_of_its_old_split(tmp_path, monkeypatch):
    workdir = tmp_path / "sweep"
    args = [f"--config={MINIMAL}", f"--workdir={workdir}", "--seeds=1,2,3,4,5,6,7", "--slurm"]
    with monkeypatch.context() as patch:
        patch.setattr(sweep_slurm, "MAX_ARRAY_TASKS", 3)
        assert sweep.main(args) == 0
    (workdir / "mine.sbatch").write_text("# not the sweep's\n")
    assert sorted(p.name for p in workdir.glob("*.sbatch")) == [
        "mine.sbatch",
        "sweep-runs-0-2.sbatch",
        "sweep-runs-3-5.sbatch",
        "sweep-runs-6-6.sbatch",
    ]
    assert sweep.main(args) == 0  # Now one array: its old slices would run the runs twice.
    assert sorted(p.name for p in workdir.glob("*.sbatch")) == ["mine.sbatch", "sweep.sbatch"]


def test_submit_sends_every_array_to_sbatch_in_order(tmp_path, monkeypatch, capsys):
    calls = tmp_path / "sbatch-calls"
    fake = tmp_path / "bin" / "sbatch"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/bash\necho "$*" >> {shlex.quote(str(calls))}\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(sweep_slurm, "MAX_ARRAY_TASKS", 2)
    workdir = tmp_path / "sweep"
    args = [f"--config={MINIMAL}", f"--workdir={workdir}", "--seeds=1,2,3", "--slurm"]
    assert sweep.main([*args, "--submit", "--sbatch_args=-p gpu"]) == 0
    assert calls.read_text().splitlines() == [
        f"-p gpu {workdir}/sweep-runs-0-1.sbatch",
        f"-p gpu {workdir}/sweep-runs-2-2.sbatch",
    ]
    assert "3 runs are 2 job arrays of at most 2 tasks" in capsys.readouterr().out


# ----- the aggregate table and plots -----------------------------------------------------


def write_run(workdir, seed, env_id, mean_return, wall_time_s, sps):
    os.makedirs(workdir, exist_ok=True)
    summary = {
        "mean_return": mean_return,
        "wall_time_s": wall_time_s,
        "sps": sps,
        "global_step": 1000,
        "env_id": env_id,
    }
    with open(os.path.join(workdir, "summary.json"), "w") as f:
        json.dump(summary, f)
    config = {
        "seed": seed,
        "env": {"id": env_id},
        "agent": {"name": "ppo"},
        "pipeline": {"policy_lag": 1},
    }
    with open(os.path.join(workdir, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
        for step in (500, 1000):
            f.write(json.dumps({"global_step": step, "episodic_return": mean_return}) + "\n")


def test_the_table_is_computed_from_known_summaries(tmp_path, capsys):
    workdir = tmp_path / "sweep"
    args = ["--config=configs/ppo_atari.py", f"--workdir={workdir}", "--seeds=1,2,3"]
    args += ["--set", "env.id=Pong-v5,Breakout-v5"]
    plan = parse_sweep(str(workdir), ["configs/ppo_atari.py"], "1,2,3", args[-1:])
    sweep_report.write_report(plan, sweep_report.build_report(plan))  # As a sweep starts.
    runs = plan.runs()
    # Human-normalized: Pong (-20.7 random, 14.6 human), Breakout (1.7, 30.5).
    pong = [14.6, -20.7, -3.05]  # 1.0, 0.0, 0.5 human-normalized
    breakout = [30.5, 1.7]  # 1.0, 0.0; seed 3 has not finished.
    for run, score in zip(runs[:3], pong, strict=True):
        write_run(run.workdir, run.seed, "Pong-v5", score, 10.0 * run.seed, 100.0 * run.seed)
    for run, score in zip(runs[3:5], breakout, strict=True):
        write_run(run.workdir, run.seed, "Breakout-v5", score, 5.0, 50.0)
    assert sweep.main([*args, "--report"]) == 0
    out = capsys.readouterr().out
    report = json.loads((workdir / "sweep.json").read_text())

    pong_row, breakout_row = report["settings"]
    assert pong_row["setting"] == "env.id=Pong-v5" and pong_row["done"] == 3
    assert pong_row["final_return"]["mean"] == pytest.approx(np.mean(pong))
    assert pong_row["final_return"]["std"] == pytest.approx(np.std(pong, ddof=1))
    assert pong_row["wall_time_s"] == pytest.approx({"mean": 20.0, "std": 10.0, "n": 3})
    assert pong_row["sps"]["mean"] == pytest.approx(200.0)
    assert pong_row["human_normalized"]["mean"] == pytest.approx(0.5)
    assert breakout_row["done"] == 2 and breakout_row["runs"] == 3
    assert breakout_row["final_return"]["mean"] == pytest.approx(16.1)
    assert report["runs"][5]["status"] == "pending"
    # Each seed's return beside the mean: a seed that failed to learn shows.
    assert breakout_row["final_return_per_seed"] == {"1": 30.5, "2": 1.7}
    pong_cells = (
        "| -3.0 ± 17.6 | 1: 14.6, 2: -20.7, 3: -3.0 | 0.500 ± 0.500 | 20.0 ± 10.0 | 200 ± 100 |"
    )
    assert f"| env.id=Pong-v5 | 3/3 {pong_cells}" in out
    breakout_cells = "| 16.1 ± 20.4 | 1: 30.5, 2: 1.7 | 0.500 ± 0.707 | 5.0 ± 0.0 |"
    assert f"| env.id=Breakout-v5 | 2/3 {breakout_cells}" in out

    # Over games: 2 seeds each (Breakout's count), scores [[1, 1], [0, 0]] -> all 0.5.
    (aggregate,) = report["atari"].values()
    assert aggregate["games"] == 2 and aggregate["seeds"] == 2
    for name in ("iqm", "median", "mean"):
        point, low, high = aggregate[name]
        assert point == pytest.approx(0.5) and low <= point <= high
    assert "| ppo_atari | 2 × 2 | 0.500 [" in out


def test_plot_draws_a_sweep_and_flags_runs_with_the_same_seed(tmp_path, capsys):
    workdir = tmp_path / "sweep"
    plan = parse_sweep(str(workdir), [MINIMAL], "1,2", ["agent.learning_rate=0.1,0.2"])
    for run in plan.runs():
        lr = dict(run.setting)["agent.learning_rate"]
        write_run(run.workdir, run.seed, "CartPole-v1", 10.0 + run.seed, 1.0, 1.0)
        with open(os.path.join(run.workdir, "config.json")) as f:
            config = json.load(f)
        config["agent"]["learning_rate"] = float(lr)
        with open(os.path.join(run.workdir, "config.json"), "w") as f:
            json.dump(config, f)
    sweep_report.write_report(plan, sweep_report.build_report(plan))
    result = plot.plot([str(workdir)], str(tmp_path / "curves.png"))
    assert result["curves"] == {
        "sweep/agent.learning_rate=0.1": 2,
        "sweep/agent.learning_rate=0.2": 2,
    }
    assert result["repeated_seeds"] == []
    # The same run given twice (or two copies of one seed) is flagged, not merged silently.
    copy = tmp_path / "copy"
    shutil.copytree(plan.runs()[0].workdir, copy)
    result = plot.plot([str(workdir), str(copy)], str(tmp_path / "curves2.png"))
    assert result["repeated_seeds"] == [
        {
            "curve": "sweep/agent.learning_rate=0.1",
            "seed": 1,
            "runs": [plan.runs()[0].workdir, str(copy)],
        }
    ]
    assert "has 2 runs with seed 1" in capsys.readouterr().err


def test_a_joint_atari_run_is_scored_per_game_not_as_its_first_game(tmp_path):
    # Alien + Pong in one run: its mean return (mixed) is no score of either game. The
    # report takes each game's own return: Alien 7127.7 (human) -> 1.0, Pong -20.7
    # (random) -> 0.0; the run's own aggregate is their median, 0.5.
    workdir = tmp_path / "sweep"
    plan = parse_sweep(str(workdir), ["configs/impala_atari_multitask.py:smoke"], "1", [])
    (run,) = plan.runs()
    write_run(run.workdir, 1, "Alien-v5", 3553.5, 10.0, 100.0)
    summary_path = os.path.join(run.workdir, "summary.json")
    with open(summary_path) as f:
        summary = json.load(f)
    summary["tasks"] = {
        "Alien-v5": {"mean_return": 7127.7, "mean_length": 100.0, "episodes": 5},
        "Pong-v5": {"mean_return": -20.7, "mean_length": 100.0, "episodes": 5},
    }
    summary["atari_median_hns"] = 0.5
    with open(summary_path, "w") as f:
        json.dump(summary, f)
    record = sweep_report.run_record(run)
    assert record["task_human_normalized"] == {
        "Alien-v5": pytest.approx(1.0, abs=1e-3),
        "Pong-v5": pytest.approx(0.0, abs=1e-3),
    }
    assert record["human_normalized"] == pytest.approx(0.5)
    report = sweep_report.build_report(plan, reps=10)
    assert report["settings"][0]["human_normalized"]["mean"] == pytest.approx(0.5)
    (aggregate,) = report["atari"].values()
    assert aggregate["games"] == 2 and aggregate["median"][0] == pytest.approx(0.5, abs=1e-3)


def test_a_sweep_grows_by_seeds_and_values_and_keeps_its_runs(tmp_path, capsys):
    workdir = tmp_path / "sweep"
    base = [f"--config={MINIMAL}", f"--workdir={workdir}"]
    first = ["--seeds=1,2", "--set", "total_timesteps=768,1536", "--set", "env.num_envs=8"]
    assert sweep.main([*base, *first, "--slurm"]) == 0
    before = {run["workdir"] for run in json.loads((workdir / "sweep.json").read_text())["runs"]}
    grown = ["--seeds=1,2,3", "--set", "total_timesteps=768,1536,2304", "--set", "env.num_envs=8"]
    assert sweep.main([*base, *grown, "--slurm"]) == 0
    report = json.loads((workdir / "sweep.json").read_text())
    assert report["definition"]["seeds"] == [1, 2, 3]
    after = {run["workdir"] for run in report["runs"]}
    assert before < after and len(after) == 9  # Every run kept its directory.
    capsys.readouterr()
    # A key with one value is not in the directory names: more values would rename them.
    more = ["--seeds=1,2,3", "--set", "total_timesteps=768,1536,2304", "--set", "env.num_envs=8,16"]
    assert sweep.main([*base, *more, "--slurm"]) == 2
    assert "env.num_envs had the one value 8" in capsys.readouterr().err
