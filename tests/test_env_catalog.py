"""`python -m sebulba.environments.env_catalog [FAMILY]`: the tasks env.id accepts, by family."""

import os
import re

import pytest

from sebulba.environments import env_catalog, envpool_registry
from tests.helpers import run_python

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_listing(*args):
    return run_python(
        "-m", "sebulba.environments.env_catalog", *args, env=dict(os.environ, PYTHONPATH=ROOT)
    )


def test_without_argument_it_lists_every_family_with_its_count():
    result = run_listing()
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    total = len(envpool_registry.supported_env_ids())
    families = len(envpool_registry.SUPPORTED_FAMILIES)
    assert families >= 16  # Every family of envpool's registry (Procgen is added apart).
    assert lines[0] == f"env.id accepts {total} envpool tasks in {families} families:"
    rows = [re.fullmatch(r"  (.+?) +(\d+)  e\.g\. .+", line) for line in lines[1 : families + 1]]
    counts = {row.group(1): int(row.group(2)) for row in rows}
    assert set(counts) == set(envpool_registry.SUPPORTED_FAMILIES.values())
    assert sum(counts.values()) == total == len(envpool_registry.envpool_families())
    assert counts["Box2D"] == 8 and counts["MuJoCo"] == 33
    assert counts["toy text"] == 11 and counts["MyoSuite"] == 796 and counts["Jumanji"] == 52
    assert counts["ViZDoom"] == 21 and counts["pgx"] == 19 and counts["highway-env"] == 36
    assert counts["Gymnasium Robotics"] == 157 and counts["MetaWorld"] == 50
    assert counts["MuJoCo Playground"] == 58 and counts["Google Research Football"] == 18


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
    result = run_listing("nosuchfamily")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "'MiniGrid/BabyAI'" in result.stderr
    # JAX suites are listed too, and a near miss of one is named.
    result = run_listing("gymnaxx")
    assert result.returncode == 2 and "'gymnax'" in result.stderr
    assert "(did you mean 'gymnax'?)" in result.stderr and result.stderr.count("\n") == 1


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
        ("toy", "toy text"),
        ("robotics", "Gymnasium Robotics"),
        ("metaworld", "MetaWorld"),
        ("myo", "MyoSuite"),
        ("playground", "MuJoCo Playground"),
        ("jumanji", "Jumanji"),
        ("pgx", "pgx"),
        ("highway", "highway-env"),
        ("vizdoom", "ViZDoom"),
        ("football", "Google Research Football"),
        ("gfootball", "Google Research Football"),
        ("envpool.jumanji", "Jumanji"),
        ("nosuchfamily", None),
    ],
)
def test_families_are_named_loosely(text, family):
    assert env_catalog.family_named(text) == family


def test_a_family_lists_why_a_task_is_refused():
    # `pgx` alone lists the JAX suite of Anakin mode; the module names envpool's family.
    result = run_listing("envpool.pgx")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "pgx: 19 tasks"
    assert (
        "  Go9x9-v1: refused: is a two-player game: needs self-play, which sebulba runs on "
        "Pgx's JAX games only (agent.name 'alphazero', env.id 'pgx:GAME')" in lines
    )
    assert "  Play2048-v1: observation MultiBinary((4, 4, 31)); action Discrete(4)" in lines


def test_spaces_are_those_a_run_sees():
    # Atari under the Machado et al. settings: the full 18 actions, 4 stacked 84x84 frames.
    assert env_catalog.task_line("Breakout-v5") == (
        "Breakout-v5: observation Box (4, 84, 84) uint8; action Discrete(18)"
    )
    # ViZDoom's combined actions: one Discrete action per combination of the buttons.
    assert env_catalog.task_line("D1Basic-v1") == (
        "D1Basic-v1: observation Box (4, 84, 84) uint8; action Discrete(6)"
    )
    assert env_catalog.task_line("VizdoomCustom-v1").startswith(
        "VizdoomCustom-v1: refused: plays a scenario of your own: set env.kwargs.cfg_path"
    )
    assert env_catalog.task_line("MiniGrid-Empty-5x5-v0") == (
        "MiniGrid-Empty-5x5-v0: observation dict(direction: Discrete(4), image: Box (7, 7, 3) "
        "uint8, mission: Box (96,) uint8); action Discrete(7)"
    )
