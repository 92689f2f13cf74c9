"""Range checks of config values: one line naming the field, its value and the range."""

import math

import pytest

from configs import ppo_cartpole
from sebulba.config import check_run_ranges
from sebulba.config.validation import (
    NON_NEGATIVE,
    POSITIVE,
    POSITIVE_INT,
    UNIT_INTERVAL,
    Range,
    check_ranges,
)
from sebulba.errors import ConfigError


def test_ranges_hold_their_bounds_and_refuse_nan_bools_and_non_numbers():
    assert 0.5 in POSITIVE and 0.0 not in POSITIVE and math.inf in POSITIVE
    assert 0.0 in NON_NEGATIVE and -1e-9 not in NON_NEGATIVE
    assert 0 in UNIT_INTERVAL and 1 in UNIT_INTERVAL and 1.01 not in UNIT_INTERVAL
    assert 0.99 in Range(0, 1, high_open=True) and 1.0 not in Range(0, 1, high_open=True)
    assert 1 in POSITIVE_INT and 0 not in POSITIVE_INT and 2.0 not in POSITIVE_INT
    for value in (math.nan, True, "1", None):
        assert value not in POSITIVE
    assert str(POSITIVE) == "a number > 0"
    assert str(POSITIVE_INT) == "an integer >= 1"
    assert str(UNIT_INTERVAL) == "a number in [0, 1]"
    assert str(Range(0, 1, low_open=True, high_open=True)) == "a number in (0, 1)"
    assert str(Range(high=2.5)) == "a number <= 2.5"


def test_check_ranges_names_the_first_bad_field_with_its_value_and_range():
    check_ranges({"lr": 0.1, "gamma": 1.0}, "agent", {"lr": POSITIVE, "gamma": UNIT_INTERVAL})
    with pytest.raises(ConfigError) as raised:
        check_ranges({"lr": -1.0}, "agent", {"lr": POSITIVE})
    assert str(raised.value) == "agent.lr must be a number > 0, got -1.0"


@pytest.mark.parametrize(
    "section, field, value, message",
    [
        (
            "env",
            "repeat_action_probability",
            1.5,
            "env.repeat_action_probability must be a number in [0, 1], got 1.5",
        ),
        ("env", "max_episode_frames", 0, "env.max_episode_frames must be an integer >= 1, got 0"),
        ("env", "num_threads", -1, "env.num_threads must be an integer >= 0, got -1"),
        ("", "seed", -3, "seed must be an integer in [0, 1073741824], got -3"),
    ],
)
def test_run_level_values_outside_their_range_are_refused(section, field, value, message):
    config = ppo_cartpole.get_config()
    check_run_ranges(config)  # The shipped config is fine.
    (config[section] if section else config)[field] = value
    with pytest.raises(ConfigError) as raised:
        check_run_ranges(config)
    assert str(raised.value) == message
