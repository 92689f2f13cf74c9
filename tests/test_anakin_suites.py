"""The JAX env suites' adapters (`sebulba.anakin.suites`) under envpool's reset convention.

One representative task per suite: its spec, a batch of 4 envs stepped with random
actions through `reset_envs` / `step_envs` (jitted), an episode cut by the suite's time
limit (reported truncated, not terminated), the reset step after an episode's end, the
tasks each suite refuses, and the advice `check_env_id` gives. A suite that is not
installed skips its tests visibly (the `anakin` extra installs them all).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sebulba.anakin import suites
from sebulba.anakin.env_api import JaxEnv, reset_envs, step_envs
from sebulba.environments.spaces import ArraySpec, Box, Discrete, MultiDiscrete, map_observation
from sebulba.errors import ConfigError
from tests.helpers import ROOT, run_python

NUM_ENVS = 4


def _full(x: jax.Array, value: int) -> jax.Array:
    return jnp.full_like(x, value)


@dataclasses.dataclass(frozen=True)
class Case:
    """One suite's representative task and what its adapter must report.

    Attributes:
      env_id: the sebulba id.
      observation, action, max_episode_steps: the expected spec and time limit.
      num_steps: steps of the random rollout.
      ends_in_rollout: whether random actions end some episode within `num_steps` (then
        the rollout also checks the reset step after it).
      near_limit: batched env states -> the same states one step from the time limit.
      safe_action: batched observations -> actions that cannot end an episode in one step
        from a fresh start (so the step onto the limit only truncates).
      slow: whether its tests are marked slow (compiling the task takes long on CPU).
    """

    env_id: str
    observation: Any
    action: Any
    max_episode_steps: int | None
    num_steps: int = 40
    ends_in_rollout: bool = True
    near_limit: Callable[[Any], Any] | None = None
    safe_action: Callable[[Any], jax.Array] | None = None
    slow: bool = False

    @property
    def suite(self) -> str:
        return self.env_id.split(":")[0]


def _zeros_action(obs: Any) -> jax.Array:
    return jnp.zeros((NUM_ENVS,), jnp.int32)


def _brax_near_limit(state: tuple) -> tuple:
    brax_state, steps = state
    return brax_state, _full(steps, 999)


def _brax_zero_action(obs: Any) -> jax.Array:
    return jnp.zeros((NUM_ENVS, 1), jnp.float32)


CASES = [
    Case(
        "gymnax:CartPole-v1",
        ArraySpec((4,), "float32"),
        Discrete(2),
        500,
        near_limit=lambda state: state.replace(time=_full(state.time, 499)),
        safe_action=_zeros_action,
    ),
    Case(
        "xminigrid:MiniGrid-Empty-5x5",
        ArraySpec((7, 7, 2), "int32"),
        Discrete(6),
        100,
        ends_in_rollout=False,
        near_limit=lambda ts: ts.replace(
            state=ts.state.replace(step_num=_full(ts.state.step_num, 99))
        ),
        # Turning right never reaches the goal.
        safe_action=lambda obs: jnp.ones((NUM_ENVS,), jnp.int32),
    ),
    Case(
        "jumanji:Snake-v1",
        {
            "grid": ArraySpec((12, 12, 5), "float32"),
            "step_count": ArraySpec((), "int32"),
            "action_mask": ArraySpec((4,), "bool"),
        },
        Discrete(4),
        4000,
        near_limit=lambda state: state.replace(step_count=_full(state.step_count, 3999)),
        # A move the action mask allows cannot collide.
        safe_action=lambda obs: jnp.argmax(obs["action_mask"], axis=-1).astype(jnp.int32),
    ),
    # Brax's trivial test env: cheap to compile, and it never ends but by the time limit.
    Case(
        "brax:fast",
        ArraySpec((2,), "float32"),
        Box((1,), (-1.0,), (1.0,)),
        1000,
        ends_in_rollout=False,
        near_limit=_brax_near_limit,
        safe_action=_brax_zero_action,
    ),
    # A physics task, whose pole falls: ~15 s to compile on two CPU cores.
    Case(
        "brax:inverted_pendulum",
        ArraySpec((4,), "float32"),
        Box((1,), (-1.0,), (1.0,)),
        1000,
        near_limit=_brax_near_limit,
        safe_action=_brax_zero_action,
        slow=True,
    ),
    # Random moves in 2048 soon make an illegal one, which ends the game. No time limit.
    Case(
        "pgx:2048",
        {
            "observation": ArraySpec((4, 4, 31), "float32"),
            "legal_action_mask": ArraySpec((4,), "bool"),
        },
        Discrete(4),
        None,
    ),
]


def _params(cases: list[Case]) -> list:
    return [
        pytest.param(case, id=case.env_id, marks=[pytest.mark.slow] if case.slow else [])
        for case in cases
    ]


ALL = _params(CASES)
LIMITED = _params([case for case in CASES if case.near_limit is not None])


def _require_suite(suite: str) -> ModuleType:
    """The suite's adapter module; skips (visibly) where the suite is not installed."""
    module = importlib.import_module(suites.SUITES[suite])
    pytest.importorskip(module.PACKAGE)
    return module


def _require(case: Case) -> JaxEnv:
    _require_suite(case.suite)
    return suites.make_env(case.env_id)


@functools.cache
def _jitted(env_id: str) -> tuple[Callable, Callable]:
    env = suites.make_env(env_id)
    return jax.jit(functools.partial(reset_envs, env)), jax.jit(functools.partial(step_envs, env))


def _random_actions(action: Any, key: jax.Array) -> jax.Array:
    if isinstance(action, Discrete):
        return jax.random.randint(key, (NUM_ENVS,), 0, action.num_actions)
    if isinstance(action, MultiDiscrete):
        return jax.random.randint(key, (NUM_ENVS, len(action.nvec)), 0, np.asarray(action.nvec))
    return jax.random.uniform(key, (NUM_ENVS, *action.shape), minval=-1.0, maxval=1.0)


def _assert_matches_spec(spec: Any, obs: Any) -> None:
    """obs [B, ...] has exactly the spec's structure, shapes and dtypes."""
    assert jax.tree.structure(map_observation(lambda s: 0, spec)) == jax.tree.structure(obs)

    def check(s: ArraySpec, x: jax.Array) -> None:
        assert x.shape == (NUM_ENVS, *s.shape) and x.dtype == np.dtype(s.dtype), (s, x.shape)

    map_observation(check, spec, obs)


def _row(obs: Any, i: int) -> list[np.ndarray]:
    return [np.asarray(x[i]) for x in jax.tree.leaves(obs)]


@pytest.mark.parametrize("case", ALL)
def test_spec(case: Case) -> None:
    env = _require(case)
    assert env.spec.env_id == case.env_id
    assert env.spec.observation == case.observation
    assert env.spec.action == case.action
    assert env.max_episode_steps == case.max_episode_steps
    assert case.env_id.split(":", 1)[1] in suites.task_ids(case.suite)
    suites.check_env_id(case.env_id)  # Known: no error.


@pytest.mark.parametrize("case", ALL)
def test_random_rollout_follows_the_reset_convention(case: Case) -> None:
    """Observations match the spec every step; the step after an end resets, unlearned."""
    env = _require(case)
    reset, step = _jitted(case.env_id)
    key = jax.random.key(0)
    key, start = jax.random.split(key)
    envs = reset(jax.random.split(start, NUM_ENVS))
    _assert_matches_spec(env.spec.observation, envs.obs)
    ended_before = np.zeros(NUM_ENVS, bool)
    episodes = 0
    for _ in range(case.num_steps):
        key, action_key, env_key = jax.random.split(key, 3)
        keys = jax.random.split(env_key, NUM_ENVS)
        envs, out = step(envs, _random_actions(env.spec.action, action_key), keys)
        _assert_matches_spec(env.spec.observation, envs.obs)
        assert out.reward.dtype == jnp.float32 and out.terminated.dtype == jnp.bool_
        valid = np.asarray(out.valid)
        np.testing.assert_array_equal(valid, ~ended_before)
        if ended_before.any():
            fresh = reset(keys).obs  # What each env's reset with this step's key observes.
            for i in np.flatnonzero(ended_before):
                for got, want in zip(_row(envs.obs, i), _row(fresh, i), strict=True):
                    np.testing.assert_array_equal(got, want)
        ended_before = np.asarray(out.ended)
        episodes += int(ended_before.sum())
        if case.max_episode_steps is None:
            assert not np.asarray(out.truncated).any()
    if case.ends_in_rollout:
        assert episodes > 0, "no episode ended: the reset step went untested"


@pytest.mark.parametrize("case", LIMITED)
def test_time_limit_truncates_then_resets(case: Case) -> None:
    """The step onto the suite's time limit is truncated, not terminated; the next resets."""
    env = _require(case)
    reset, step = _jitted(case.env_id)
    envs = reset(jax.random.split(jax.random.key(1), NUM_ENVS))
    envs = envs.replace(env=case.near_limit(envs.env))
    keys = jax.random.split(jax.random.key(2), NUM_ENVS)
    envs, out = step(envs, case.safe_action(envs.obs), keys)
    assert np.asarray(out.truncated).all() and not np.asarray(out.terminated).any()
    assert np.asarray(out.valid).all()
    np.testing.assert_array_equal(np.asarray(out.episode_length), 1)  # Counted from the start.
    keys = jax.random.split(jax.random.key(3), NUM_ENVS)
    envs, out = step(envs, case.safe_action(envs.obs), keys)
    assert not np.asarray(out.valid).any() and not np.asarray(out.ended).any()
    np.testing.assert_array_equal(np.asarray(out.reward), 0.0)
    fresh = reset(keys).obs
    for got, want in zip(jax.tree.leaves(envs.obs), jax.tree.leaves(fresh), strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    _assert_matches_spec(env.spec.observation, envs.obs)


REFUSED = [
    ("xminigrid:XLand-MiniGrid-R1-9x9", "XLand meta-RL task"),
    ("jumanji:Connector-v3", "one reward per agent"),
    ("jumanji:MultiCVRP-v0", "unsupported action spec"),
    ("pgx:backgammon", "its dice are chance moves"),
    ("pgx:kuhn_poker", "the players' cards are hidden"),
    ("pgx:sparrow_mahjong", "three-player game: sebulba's self-play plays two-player games only"),
]


@pytest.mark.parametrize(("env_id", "reason"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_tasks_raise_one_line(env_id: str, reason: str) -> None:
    suite, task = suites.split_env_id(env_id)
    module = _require_suite(suite)
    assert task in module.task_ids()  # Listed, since the suite registers it.
    with pytest.raises(ConfigError) as error:
        module.make(task)
    message = str(error.value)
    assert "\n" not in message and f"env.id {env_id!r}" in message and reason in message


def test_jumanji_refuses_sokoban_without_its_levels(monkeypatch) -> None:
    """Sokoban's levels come from the Hugging Face Hub: refused, not downloaded, if absent."""
    module = _require_suite("jumanji")
    huggingface_hub = pytest.importorskip("huggingface_hub")
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda **kwargs: None)
    with pytest.raises(ConfigError, match=r"env.id 'jumanji:Sokoban-v0' needs .*hf_hub_download"):
        module.make("Sokoban-v0")


MISSPELT = [
    ("gymnax:CartPole-v2", "gymnax:CartPole-v1"),
    ("xminigrid:MiniGrid-DoorKey-5x6", "xminigrid:MiniGrid-DoorKey-5x5"),
    ("jumanji:Snake-v2", "jumanji:Snake-v1"),
    ("brax:half_cheetah", "brax:halfcheetah"),
    ("pgx:minatar-breakot", "pgx:minatar-breakout"),
]


@pytest.mark.parametrize(("env_id", "advice"), MISSPELT, ids=[m[0] for m in MISSPELT])
def test_check_env_id_suggests_close_matches(env_id: str, advice: str) -> None:
    _require_suite(env_id.split(":")[0])
    with pytest.raises(ConfigError) as error:
        suites.check_env_id(env_id)
    message = str(error.value)
    assert "\n" not in message and "did you mean" in message and repr(advice) in message


# Tasks that download data when made, which a test machine may have no network for:
# gymnax's MNIST bandit fetches MNIST (its adapter does not refuse it). jumanji's Sokoban
# is not among them: its adapter refuses it quickly unless its levels are cached.
@pytest.mark.slow
@pytest.mark.parametrize("suite", list(suites.SUITES))
def test_every_listed_task_is_made_or_refused_in_one_line(suite: str) -> None:
    """`make` builds each task the suite lists, or refuses it with one line naming it."""
    module = _require_suite(suite)
    made = 0
    for task in module.task_ids():
        try:
            env = module.make(task)
        except ConfigError as error:
            assert "\n" not in str(error) and f"env.id '{suite}:{task}'" in str(error)
            continue
        made += 1
        assert env.spec.env_id == f"{suite}:{task}"
        leaves = jax.tree.leaves(env.spec.observation, is_leaf=lambda x: isinstance(x, ArraySpec))
        assert all(s.dtype in ("float32", "int32", "uint8", "bool") for s in leaves)
        # A bool entry is the action mask, and the spec names it.
        bools = [name for name, s in _named_leaves(env.spec.observation) if s.dtype == "bool"]
        assert bools == ([env.spec.action_mask] if env.spec.action_mask else []), task
    assert made > 0


def _named_leaves(observation):
    if isinstance(observation, dict):
        return list(observation.items())
    return [(None, observation)]


def test_a_task_that_downloads_data_is_refused_before_any_download() -> None:
    _require_suite("gymnax")
    with pytest.raises(ConfigError, match="downloads the MNIST data set") as error:
        suites.make_env("gymnax:MNISTBandit-bsuite")
    assert "\n" not in str(error.value)


_START_UP_PROBE = """
import sys
from sebulba import train
from tests.helpers import load_config

setup = train.prepare(load_config("ppo_cartpole_anakin"))
assert setup.jax_env is not None, "not an Anakin run"
real = lambda name: type(sys.modules.get(name)).__name__ == "module"
loaded = [name for name in ("envpool", "seaborn") if real(name)]
print("loaded:", loaded)
import seaborn  # A user's own use of a deferred module gets the real one.
print("seaborn works:", callable(seaborn.color_palette))
"""


def test_an_anakin_run_starts_without_envpool_or_the_suites_plotting_modules():
    """Their imports were a large share of an Anakin run's start-up (docs/anakin.md)."""
    pytest.importorskip("gymnax")
    pytest.importorskip("seaborn")
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": ROOT}
    result = run_python("-c", _START_UP_PROBE, env=env, fresh_interpreter=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "loaded: []" in result.stdout and "seaborn works: True" in result.stdout


def test_a_deferred_module_loads_on_first_use_and_not_on_import():
    probe = (
        "import sys\n"
        "from sebulba.runtime.deferred_imports import defer_import\n"
        "assert 'netrc' not in sys.modules\n"
        "defer_import('netrc')\n"
        "import netrc\n"
        "kind = lambda: type(sys.modules['netrc']).__name__\n"
        "assert kind() == '_DeferredModule', kind()\n"
        "assert issubclass(netrc.NetrcParseError, Exception)\n"
        "assert kind() == 'module', kind()\n"
        "defer_import('not_a_module_anywhere')\n"
        "assert 'not_a_module_anywhere' not in sys.modules\n"
    )
    env = {**os.environ, "PYTHONPATH": ROOT}
    result = run_python("-c", probe, env=env, fresh_interpreter=True)
    assert result.returncode == 0, result.stderr[-2000:]
