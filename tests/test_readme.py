"""Every command in README.md, docs/ and slurm/README.md works as written.

The commands are read from the documents' shell code blocks. Cheap ones (`:smoke`
configs on one process) run for real in a temporary workdir. The others (hours of
training, several hosts, GPUs) are validated the way a run starts: the command line's
config flags are parsed as `sebulba.main` parses them, then `train.prepare` checks
sizes, devices (8 virtual CPU devices stand in for the GPUs or TPU chips of one host),
env and agent, with the command's number of processes; only the env pools are cut to
one env, since building 128 Atari envs takes longer than the check.
"""

import dataclasses
import functools
import glob
import os
import re
import shlex

import pytest
from absl import flags
from ml_collections import config_flags

from sebulba import train
from sebulba.config import run_plan
from sebulba.environments import envpool_pools
from tests.helpers import assert_a_muzero_run_searches_and_learns, process_env, run_python

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCUMENTS = ["README.md", *sorted(glob.glob("docs/*.md", root_dir=ROOT)), "slurm/README.md"]
# Tokens that end a command inside a shell line.
_SEPARATORS = {"&&", "||", ";", "|", "&", "do", "done", ">", ">>", "2>&1"}
# Hosts of a TPU slice (`TPU_ACCELERATOR_TYPE`), for the processes of a `tpu.sh` run.
_TPU_HOSTS = {"v4-8": 1, "v4-16": 2, "v4-32": 4}
# Nodes of `slurm/sebulba.sbatch` when sbatch is not given --nodes (its #SBATCH default).
_SBATCH_DEFAULT_NODES = 2


@dataclasses.dataclass
class Command:
    """One `sebulba.main` run named by the docs: its flags and where it runs."""

    where: str  # document:line
    argv: list[str]  # --config=..., --workdir=..., other flags
    env: dict[str, str]
    num_processes: int

    @property
    def config(self) -> str:
        return next(a.split("=", 1)[1] for a in self.argv if a.startswith("--config="))

    @property
    def is_cheap(self) -> bool:
        return ":smoke" in self.config and self.num_processes == 1


def _shell_blocks(path: str):
    """(first line number, text) of each bash/sh/console code block of a document."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        text = f.read()
    for match in re.finditer(r"^ *```(bash|sh|console)\n(.*?)^ *```", text, re.S | re.M):
        lines = match.group(2).splitlines()
        if match.group(1) == "console":  # Only the "$ " lines and their continuations.
            kept, continued = [], False
            for line in lines:
                if line.startswith("$ ") or continued:
                    kept.append(line.removeprefix("$ "))
                    continued = line.endswith("\\")
                else:
                    kept.append("")
            lines = kept
        yield text[: match.start()].count("\n") + 2, "\n".join(lines)


def _shell_lines(block: str):
    """(offset, tokens) of each shell command line: continuations and open quotes joined."""
    pending, start = "", 0
    for i, line in enumerate(block.split("\n")):
        if not pending:
            start = i
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        text = pending + line
        try:
            tokens = shlex.split(text, comments=True)
        except ValueError:  # A quoted argument goes on over the next lines.
            pending += line + "\n"
            continue
        if text.count("(") > text.count(")"):  # A bash array goes on: args=(a b
            pending += line + " "
            continue
        yield start, tokens
        pending = ""


def _until_separator(tokens: list[str]) -> list[str]:
    for i, token in enumerate(tokens):
        if token in _SEPARATORS or token.startswith(">"):
            return tokens[:i]
    return tokens


def _commands_of(path: str):
    for first_line, block in _shell_blocks(path):
        exported: dict[str, str] = {}
        for offset, tokens in _shell_lines(block):
            where = f"{path}:{first_line + offset}"
            if tokens[:1] == ["export"]:
                exported.update(t.split("=", 1) for t in tokens[1:] if "=" in t)
            for i, token in enumerate(tokens):
                if tokens[i : i + 2] == ["-m", "sebulba.main"]:
                    args = _until_separator(tokens[i + 2 :])
                    env = dict(exported)
                    j = i - 2  # Assignments in front of the interpreter: X=1 python ...
                    while j >= 0 and re.match(r"^[A-Z_]+=", tokens[j]):
                        env.update([tokens[j].split("=", 1)])
                        j -= 1
                    processes = next(
                        (int(a.split("=")[1]) for a in args if a.startswith("--num_processes=")),
                        2 if "--distributed" in args else 1,
                    )
                    yield Command(where, args, env, processes)
                elif tokens[i : i + 2] == ["launch", "--"] and "tpu.sh" in tokens[0]:
                    config, workdir, *rest = _until_separator(tokens[i + 2 :])
                    hosts = _TPU_HOSTS[exported.get("TPU_ACCELERATOR_TYPE", "v4-16")]
                    argv = [f"--config={config}", f"--workdir={workdir}", *rest]
                    yield Command(where, argv, {}, hosts)
                elif token.endswith("slurm/sebulba.sbatch"):
                    args = _until_separator(tokens[i + 1 :])
                    if token.startswith("args=("):  # A bash array: args=(... last).
                        args[-1] = args[-1].removesuffix(")")
                    config, workdir, *rest = args
                    nodes = next(
                        (int(t.split("=")[1]) for t in tokens[:i] if t.startswith("--nodes=")),
                        _SBATCH_DEFAULT_NODES,
                    )
                    argv = [f"--config={config}", f"--workdir={workdir}", *rest]
                    yield Command(where, argv, {}, nodes)


# Templates such as `--config="$config"` are not commands one can run.
COMMANDS = [
    command for path in DOCUMENTS for command in _commands_of(path) if "$" not in command.config
]


def test_the_documents_name_their_commands():
    readme = [c for c in COMMANDS if c.where.startswith("README.md")]
    configs = {c.config for c in readme}
    assert len(readme) >= 6, readme
    assert {"configs/ppo_cartpole.py", "configs/ppo_atari.py:smoke"} <= configs
    assert any(c.num_processes > 1 for c in readme)  # The TPU and SLURM quick starts.


@pytest.fixture(scope="module")
def tutorial_dir(tmp_path_factory):
    """The docs' `my_lab` package (docs/agents.md), beside a link to `configs/`."""
    directory = tmp_path_factory.mktemp("tutorial")
    with open(os.path.join(ROOT, "docs", "agents.md"), encoding="utf-8") as f:
        agents_doc = f.read()
    for code in re.findall(r"```python\n(# (my_lab/\w+\.py)\n.*?)```", agents_doc, re.S):
        source, path = code
        (directory / path).parent.mkdir(exist_ok=True)
        (directory / path).write_text(source)
    (directory / "my_lab" / "__init__.py").write_text("")
    os.symlink(os.path.join(ROOT, "configs"), directory / "configs")
    return directory


def _parse_config(argv: list[str]):
    """The config `sebulba.main` would run: the file, its variant and the overrides."""
    config_args = ["sebulba.main", *(a for a in argv if a.startswith(("--config", "--noconfig")))]
    flag_values = flags.FlagValues()
    config_flags.DEFINE_config_file(
        "config", None, "", flag_values=flag_values, lock_config=True, sys_argv=config_args
    )
    flag_values(config_args)
    return flag_values.config


def _one_env_pools(config, sizes, first_update):
    del first_update
    return [envpool_pools.make_envs(config.env, 1, seed=config.seed)] * sizes.num_actor_threads


@pytest.mark.parametrize(
    "command", [c for c in COMMANDS if not c.is_cheap], ids=lambda c: f"{c.where}:{c.config}"
)
def test_documented_commands_pass_the_checks_a_run_starts_with(command, tutorial_dir, monkeypatch):
    monkeypatch.chdir(tutorial_dir)
    monkeypatch.syspath_prepend(str(tutorial_dir))
    config = _parse_config(command.argv)
    derive = functools.partial(run_plan.derive_sizes, num_processes=command.num_processes)
    monkeypatch.setattr(run_plan, "derive_sizes", lambda config, num_processes: derive(config))
    monkeypatch.setattr(train, "make_env_pools", _one_env_pools)
    setup = train.prepare(config)
    for pool in setup.envs_per_thread[:1]:  # One pool, shared by every thread (none: Anakin).
        pool.close()
    assert setup.sizes.num_processes == command.num_processes


def _distinct_runs(commands):
    """One command per distinct run (the docs repeat some, e.g. Atari's smoke test): the
    first place that documents it stands for the others; workdirs do not count."""
    runs = {}
    for command in commands:
        argv = tuple(a for a in command.argv if not a.startswith("--workdir="))
        runs.setdefault((argv, tuple(sorted(command.env.items()))), command)
    return list(runs.values())


# The shipped image configs of MuZero end to end, as documented: MinAtar in
# Anakin mode (the `minatar` torso), Atari on envpool (the Nature CNN, searched on the
# actor device). Their runs are the tests of those configs (tests/test_muzero.py does not
# train them again).
MUZERO_SMOKE_CONFIGS = ("configs/muzero_minatar.py:smoke", "configs/muzero_atari.py:smoke")


def test_the_muzero_smoke_configs_are_documented_commands():
    # Otherwise nothing trains them: their checks ride on the documented commands' runs.
    documented = {c.config for c in _distinct_runs(c for c in COMMANDS if c.is_cheap)}
    assert set(MUZERO_SMOKE_CONFIGS) <= documented


# The documented commands run as written; how XLA compiles them is the machine's, not the
# command's, and they compile as the tests' other command lines do (`process_env`: LLVM's
# optimizations off), which costs less for a few updates: CPU seconds on 2 cores, XLA's
# defaults against the tests' flags, configs/muzero_minatar.py:smoke 43 against 29,
# ppo_atari.py:smoke 31 against 17, impala_atari_multitask.py:smoke 30 against 21,
# ppo_cartpole.py:smoke 12 against 9. Not so the runs below, whose few updates are already
# long enough for the optimised program to win: muzero_atari.py:smoke 38 against 71
# (its search and unrolled model run the Nature CNN many times per step), and
# ppo_cartpole_anakin.py:smoke 7 against 9.
_COMPILED_WITH_XLA_DEFAULTS = (
    "configs/muzero_atari.py:smoke",
    "configs/ppo_cartpole_anakin.py:smoke",
)


@pytest.mark.parametrize(
    "command",
    _distinct_runs(c for c in COMMANDS if c.is_cheap),
    ids=lambda c: f"{c.where}:{c.config}",
)
def test_cheap_documented_commands_run_as_written(command, tmp_path):
    workdir = tmp_path / "run"
    argv = [f"--workdir={workdir}" if a.startswith("--workdir=") else a for a in command.argv]
    env = {**process_env(), **command.env}
    if command.config in _COMPILED_WITH_XLA_DEFAULTS:
        env["XLA_FLAGS"] = ""
    result = run_python("-m", "sebulba.main", *argv, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (workdir / "summary.json").exists()
    assert re.search(r"^update \d+/\d+ step ", result.stdout, re.M)  # Progress is visible.
    if command.config in MUZERO_SMOKE_CONFIGS:
        assert_a_muzero_run_searches_and_learns(str(workdir))


def _readme_library_example() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    section = readme.split("## As a library", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_readme_library_example_trains_quietly(tmp_path):
    # A library call logs like a library: a few progress lines, not one per update. Compiled
    # as the tests compile (CPU seconds on 2 cores: 7 against 13 with XLA's defaults).
    result = run_python(
        "-c", _readme_library_example(), env=process_env(), cwd=tmp_path, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    output = (result.stdout + result.stderr).splitlines()
    assert len(output) <= 15, "\n".join(output)
    assert output[-2].startswith("sebulba: done, 20,000 steps")
    assert (tmp_path / "runs" / "library_example" / "summary.json").exists()
