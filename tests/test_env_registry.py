"""Every task of envpool's registry trains or is refused in one line, before any work.

The walk reads envpool's specs without creating envs (`envpool_pools.registry_env_spec`: the
refusals, family settings, `env.kwargs` checks and spaces of a run), then asks each
family's generic configs (`GENERIC_CONFIGS`) for the task (`:TASK,smoke`) and checks
their network takes its observation, as a run does before its first update. The smoke
runs train one task of each family added with the whole registry for 2 updates, and
check that the spec a run reads from a one-env pool is the spec the walk built.
"""

import collections
import dataclasses
import importlib.util
import json
import os
import re

import ml_collections
import pytest

from sebulba import evaluate, train
from sebulba.agents.networks import check_network_fits
from sebulba.config import base_config
from sebulba.environments import envpool_pools, envpool_registry, system_libraries
from sebulba.errors import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Each family -> the configs whose `:TASK` variant trains its tasks, tried in order.
GENERIC_CONFIGS = {
    "classic control": ("ppo_cartpole", "ppo_mujoco"),
    "Box2D": ("ppo_cartpole", "ppo_mujoco", "ppo_atari"),
    "toy text": ("ppo_toytext",),
    "MuJoCo": ("ppo_mujoco",),
    "dm_control": ("ppo_dmc",),
    "Gymnasium Robotics": ("ppo_mujoco", "ppo_dmc"),
    "MetaWorld": ("ppo_metaworld",),
    "MyoSuite": ("ppo_mujoco",),
    "MuJoCo Playground": ("ppo_mujoco", "ppo_dmc"),
    "MiniGrid/BabyAI": ("ppo_minigrid",),
    "Jumanji": ("ppo_minigrid",),
    "pgx": ("ppo_minigrid",),  # Every game but 2048 is refused (two or three players).
    "highway-env": ("ppo_highway",),
    "Atari": ("ppo_atari",),
    "ViZDoom": ("ppo_atari",),
    "Google Research Football": ("ppo_atari",),
    "Procgen": ("ppo_procgen",),
}


@dataclasses.dataclass
class Outcome:
    """What a run does with one task: trains with `config`, or is refused (`refusal`)."""

    family: str
    config: str | None = None
    refusal: str | None = None
    by_network: bool = False  # Refused by the network check, not by `check_env_id`.


def _config_module(name):
    path = os.path.join(ROOT, "configs", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_registry_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _env_config(env_id):
    env_config = base_config(ml_collections.ConfigDict()).env
    env_config.id = env_id
    return env_config


def _outcome(env_id, modules) -> Outcome:
    """A run of `env_id` under its family's generic configs, as `python -m sebulba.main`
    makes it: the config's own env settings give the spec, refused or taken by the network.

    Each task's spec is built once where a config takes it: an Atari spec takes envpool
    0.1 s to build (it reads the ROM), and building it for the bare task id as well, only
    to discard it, doubled the walk. A task no config offers is built bare, for the
    refusal a run of it makes.
    """
    family = envpool_registry.family_name(env_id) or envpool_registry.envpool_families()[env_id]
    refusals = []
    for name in GENERIC_CONFIGS[family]:
        try:
            config = modules[name].get_config(f"{env_id},smoke")
        except ConfigError as error:  # The task's env settings, refused as a run does.
            return Outcome(family, refusal=str(error))
        except ValueError as error:
            assert str(error).startswith(f"unknown variant {env_id!r} of {name} "), error
            continue
        assert config.env.id == env_id
        try:
            spec = envpool_pools.registry_env_spec(config.env)  # The config's env settings.
        except ConfigError as error:
            return Outcome(family, refusal=str(error))
        try:
            check_network_fits(config.agent.network, spec)
        except ConfigError as error:
            refusals.append(str(error))
            continue
        return Outcome(family, config=name)
    if refusals:
        return Outcome(family, refusal=refusals[0], by_network=True)
    try:
        envpool_pools.registry_env_spec(_env_config(env_id))
    except ConfigError as error:
        return Outcome(family, refusal=str(error))
    raise AssertionError(f"no generic config of {family} takes {env_id}: {GENERIC_CONFIGS[family]}")


@pytest.fixture(scope="module")
def registry_outcomes() -> dict[str, Outcome]:
    modules = {name: _config_module(name) for names in GENERIC_CONFIGS.values() for name in names}
    return {env_id: _outcome(env_id, modules) for env_id in envpool_registry.envpool_families()}


def test_every_family_has_generic_configs():
    assert set(GENERIC_CONFIGS) == set(envpool_registry.SUPPORTED_FAMILIES.values())
    assert set(envpool_registry.envpool_families().values()) == set(
        envpool_registry.SUPPORTED_FAMILIES
    )


def test_every_registered_task_trains_or_is_refused_in_one_line(registry_outcomes):
    assert len(registry_outcomes) == len(envpool_registry.envpool_families())
    for env_id, outcome in registry_outcomes.items():
        if outcome.refusal is not None:
            assert "\n" not in outcome.refusal, env_id
            assert f"{env_id!r}" in outcome.refusal, (env_id, outcome.refusal)
    counts = collections.Counter(
        (o.family, "trains" if o.config else "refused") for o in registry_outcomes.values()
    )
    # Most tasks train: the refusals are the few principled ones docs/environments.md lists.
    assert sum(n for (_, kind), n in counts.items() if kind == "trains") > 1500


def _documented_counts() -> dict[str, tuple[int, int, int]]:
    """docs/environments.md's table: family -> (tasks, trained, refused)."""
    with open(os.path.join(ROOT, "docs", "environments.md"), encoding="utf-8") as f:
        text = f.read()
    rows = re.findall(r"^\| (.+?) \| (\d+) \| (\d+) \| (\d+) \|", text, re.MULTILINE)
    return {family: (int(a), int(b), int(c)) for family, a, b, c in rows}


def test_the_documented_counts_are_the_registry_walks(registry_outcomes):
    walked = collections.defaultdict(lambda: [0, 0, 0])
    for outcome in registry_outcomes.values():
        counts = walked[outcome.family]
        counts[0] += 1
        counts[1 if outcome.config else 2] += 1
    walked = {family: tuple(counts) for family, counts in walked.items()}
    documented = _documented_counts()
    for env_id, outcome in registry_outcomes.items():
        try:
            system_libraries.check_system_libraries(env_id)
        except ConfigError:  # Procgen without the system's Qt: this machine's refusal.
            documented.pop(outcome.family, None)
            walked.pop(outcome.family, None)
    assert documented == walked, (
        "docs/environments.md's table of families (tasks, trained, refused) is stale"
    )


def test_the_refusals_say_what_is_missing(registry_outcomes):
    refusals = {i: o.refusal for i, o in registry_outcomes.items() if o.refusal}
    assert refusals["Go9x9-v1"] == (
        "env.id 'Go9x9-v1' is a two-player game: needs self-play, which sebulba runs on "
        "Pgx's JAX games only (agent.name 'alphazero', env.id 'pgx:GAME')"
    )
    assert "three-player game" in refusals["SparrowMahjong-v1"]
    assert "multi-agent training" in refusals["IntersectionMultiAgent-v0"]
    assert "multiplayer ViZDoom scenario" in refusals["Cig-v1"]
    assert "env.kwargs.cfg_path" in refusals["VizdoomCustom-v1"]
    # No task is refused by the network check: `multi_input` flattens the arrays of three
    # or more axes that are no image (grids, planes, masks).
    assert not [env_id for env_id, o in registry_outcomes.items() if o.by_network]
    for env_id, config in {
        "Racetrack-v0": "ppo_highway",  # [2, 12, 12] occupancy grid.
        "TwoWay-v0": "ppo_highway",  # [3, 3, 5] time-to-collision grid.
        "UTurn-v0": "ppo_highway",  # [3, 3, 16].
        "FlatPack-v0": "ppo_minigrid",  # `action_mask` [25, 4, 9, 9].
        "SearchAndRescue-v0": "ppo_minigrid",  # `searcher_views` [2, 3, 128].
        "Snake-v1": "ppo_minigrid",  # `grid` [12, 12, 5].
        "Play2048-v1": "ppo_minigrid",  # [4, 4, 31] planes.
    }.items():
        assert registry_outcomes[env_id].config == config, (env_id, registry_outcomes[env_id])
    # Families that train whole.
    for family in ("MetaWorld", "MyoSuite", "Gymnasium Robotics", "toy text", "Atari"):
        outcomes = [o for o in registry_outcomes.values() if o.family == family]
        assert outcomes and all(o.config for o in outcomes), family


# One task of each family that came with the whole registry (a nested dict, a MultiBinary
# mask, integer-Box actions, float64 actions, colour screens, ...), with its config.
SMOKE_RUNS = [
    ("ppo_toytext", "Taxi-v3"),
    ("ppo_highway", "Parking-v0"),
    ("ppo_minigrid", "BinPack-v2"),  # Maze-v0 trains, evaluates and loads in test_spaces.py.
    ("ppo_dmc", "FetchReach-v4"),
    ("ppo_dmc", "Go1Getup-v1"),
    ("ppo_mujoco", "myoElbowPose1D6MRandom-v0"),
    ("ppo_metaworld", "MetaWorld/Reach-v3"),
    ("ppo_atari", "Basic-v1"),
    ("ppo_atari", "gfootball/academy_empty_goal_close-v1"),
]


def _train_two_updates(config, workdir: str, num_envs: int = 2) -> dict:
    """Trains the smallest run that still updates twice; returns its summary.json."""
    config.env.num_envs = num_envs
    config.agent.num_steps = 4
    config.agent.num_minibatches = 1
    config.agent.update_epochs = 1
    config.total_timesteps = num_envs * 4 * 2
    train.train(config, workdir)
    with open(os.path.join(workdir, "summary.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("name, env_id", SMOKE_RUNS)
def test_a_task_of_each_new_family_trains(tmp_path, monkeypatch, name, env_id):
    monkeypatch.chdir(tmp_path)  # ViZDoom keeps its settings in the working directory.
    config = _config_module(name).get_config(f"{env_id},smoke")
    specs = envpool_pools.task_env_specs(config.env, [env_id])  # From a one-env pool.
    assert specs[env_id] == envpool_pools.registry_env_spec(config.env)
    summary = _train_two_updates(config, str(tmp_path / "run"))
    assert summary["updates"] == 2 and summary["env_id"] == env_id


def test_metaworld_mt10_trains_its_ten_tasks_jointly(tmp_path):
    module = _config_module("ppo_metaworld")
    config = module.get_config("MT10,smoke")
    assert tuple(config.env.ids) == module.MT10 and len(module.MT10) == 10
    summary = _train_two_updates(config, str(tmp_path / "run"), num_envs=10)
    assert summary["updates"] == 2 and sorted(summary["tasks"]) == sorted(module.MT10)
    # Evaluation reports Meta-World's success rate per task and its mean over the tasks.
    result = evaluate.evaluate(str(tmp_path / "run"), episodes=2, num_envs=2, max_steps=10)
    rates = [task["success_rate"] for task in result["tasks"].values()]
    assert len(rates) == 10 and all(0.0 <= rate <= 1.0 for rate in rates)
    assert result["success_rate"] == pytest.approx(sum(rates) / 10)
