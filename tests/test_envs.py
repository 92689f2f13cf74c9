"""envpool construction: the Atari options reach envpool."""

import pytest

from configs import impala_atari, ppo_atari, ppo_cartpole
from sebulba import envs


@pytest.mark.parametrize("use_fire_reset", [False, True])
def test_use_fire_reset_reaches_envpool(use_fire_reset):
    config = ppo_atari.get_config("smoke")
    config.env.use_fire_reset = use_fire_reset
    pool = envs.make_envs(config.env, 1, seed=0)
    assert pool.spec.config.use_fire_reset is use_fire_reset
    assert pool.spec.config.noop_max == 1  # Machado et al.: no no-op starts.
    assert not pool.spec.config.episodic_life
    pool.close()


def test_cleanba_configs_fire_on_reset_and_the_base_config_does_not():
    # envpool's default (True) is what Cleanba runs; Machado et al.'s protocol has none.
    assert ppo_atari.get_config().env.use_fire_reset
    assert impala_atari.get_config().env.use_fire_reset
    assert not ppo_cartpole.get_config().env.use_fire_reset
