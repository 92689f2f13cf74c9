"""Joint tasks whose spaces differ are refused naming only what differs."""

import ml_collections
import pytest

from sebulba.config import base_config
from sebulba.environments import envpool_pools, tasks
from sebulba.environments.spaces import ArraySpec, Box, Discrete, EnvSpec
from sebulba.errors import ConfigError


def _refusal(specs):
    with pytest.raises(ConfigError) as error:
        tasks.check_compatible(specs)
    return str(error.value)


def test_minigrid_and_babyai_name_the_one_entry_that_differs():
    env = base_config(ml_collections.ConfigDict()).env
    ids = ("MiniGrid-Empty-5x5-v0", "BabyAI-GoToRedBall-v0")
    message = _refusal(envpool_pools.task_env_specs(env, ids))
    assert message == (
        "env.ids: tasks 'MiniGrid-Empty-5x5-v0' and 'BabyAI-GoToRedBall-v0' have different "
        "observations ('mission' shape (96,) vs (512,)); jointly trained tasks must share "
        "their structure, shapes and dtypes"
    )


def test_each_difference_is_named_once_and_nothing_else():
    first = {
        "image": ArraySpec((7, 7, 3), "uint8"),
        "direction": ArraySpec((), "int32", 4),
        "goal": ArraySpec((2,), "float32"),
    }
    second = {
        "image": ArraySpec((7, 7, 3), "float32"),
        "direction": ArraySpec((), "int32", 5),
        "extra": ArraySpec((1,), "float32"),
    }
    message = _refusal(
        {"a": EnvSpec("a", first, Discrete(3)), "b": EnvSpec("b", second, Discrete(3))}
    )
    assert (
        "('goal' only in the first; 'extra' only in the second; 'image' dtype uint8 vs "
        "float32; 'direction' n 4 vs 5)"
    ) in message
    assert "ArraySpec" not in message and "(7, 7, 3)" not in message


def test_action_spaces_are_summarised():
    box = Box((6,), (-1.0,) * 6, (1.0,) * 6)
    observation = ArraySpec((4,), "float32")
    message = _refusal(
        {"a": EnvSpec("a", observation, Discrete(7)), "b": EnvSpec("b", observation, box)}
    )
    assert "(Discrete(7) vs Box (6,) in [-1, 1])" in message
    assert "low=" not in message
