"""`python -m sebulba.envs [FAMILY]`: the tasks env.id accepts, by family."""

import os
import re
import subprocess
import sys

import pytest

from sebulba import env_catalog, envs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_listing(*args):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run(
        [sys.executable, "-m", "sebulba.envs", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )


def test_without_argument_it_lists_every_family_with_its_count():
    result = run_listing()
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    total = len(envs.supported_env_ids())
    assert lines[0] == f"env.id accepts {total} envpool tasks in 6 families:"
    rows = [re.fullmatch(r"  (.+?) +(\d+)  e\.g\. .+", line) for line in lines[1:7]]
    counts = {row.group(1): int(row.group(2)) for row in rows}
    assert set(counts) == set(envs.SUPPORTED_FAMILIES.values())
    assert sum(counts.values()) == total
    assert counts["Box2D"] == 8 and counts["MuJoCo"] == 33


def test_a_family_lists_its_ids_with_their_spaces():
    result = run_listing("box2d")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "Box2D: 8 tasks"
    assert (
        "  BipedalWalker-v3: observation Box (24,) float32; action Box (4,) float32 in [-1, 1]"
        in lines
    )
    assert "  LunarLander-v2: observation Box (8,) float32; action Discrete(4)" in lines


def test_an_unknown_family_fails_in_one_line_naming_the_families():
    result = run_listing("procgen")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "'MiniGrid/BabyAI'" in result.stderr


@pytest.mark.parametrize(
    "text, family",
    [
        ("mujoco", "MuJoCo"),
        ("Box2D", "Box2D"),
        ("classic", "classic control"),
        ("babyai", "MiniGrid/BabyAI"),
        ("minigrid", "MiniGrid/BabyAI"),
        ("dm_control", "dm_control"),
        ("atari", "Atari"),
        ("procgen", None),
    ],
)
def test_families_are_named_loosely(text, family):
    assert env_catalog.family_named(text) == family


def test_spaces_are_those_a_run_sees():
    # Atari under the Machado et al. settings: the full 18 actions, 4 stacked 84x84 frames.
    assert env_catalog.task_line("Breakout-v5") == (
        "Breakout-v5: observation Box (4, 84, 84) uint8; action Discrete(18)"
    )
    assert env_catalog.task_line("MiniGrid-Empty-5x5-v0") == (
        "MiniGrid-Empty-5x5-v0: observation dict(direction: Discrete(4), image: Box (7, 7, 3) "
        "uint8, mission: Box (96,) uint8); action Discrete(7)"
    )
