"""PPO on Atari with the Cleanba paper's hyperparameters (Huang et al. 2023, table 4).

IMPALA ResNet, 50M env steps, 128 envs x 128 steps, Machado et al. (2018) protocol, and
Cleanba's choices where they differ from baselines: lecun_normal convolutions, advantages
normalised once per rollout, no value clipping, fire on reset; otherwise baselines' PPO
settings, the agent's defaults (Adam 2.5e-4 annealed, gamma 0.99, GAE lambda 0.95,
4 minibatches x 4 epochs, clip 0.1, entropy 0.01, value coefficient 0.5, gradient norm
0.5). docs/agents.md lists what still differs from Cleanba.
`:GAME-v5` selects the game (default Breakout-v5); `:smoke` (or `:smoke,GAME-v5`) is a
tiny end-to-end run for CPUs and tests.

The same settings train the other envpool tasks seen through screens (untuned there):
any ViZDoom scenario (`:D1Basic-v1`, `:HealthGathering-v1`, ...; envpool's combined
actions, 4 stacked grey screens, or a single screen where the scenario renders colour,
as the CNNs take 4 channels at most), any Google Research Football scenario
(`:gfootball/academy_empty_goal-v1`: its 72x96 minimap of 4 planes) and Box2D's
`:CarRacing-v2`; rewards are sign-clipped for learning as on Atari.
"""

from sebulba.agents import defaults
from sebulba.config import atari_game, base_config, parse_variant, smoke_run

# The other families whose tasks observe screens (uint8 [C, H, W] or [H, W, C]).
IMAGE_FAMILIES = ("ViZDoom", "Google Research Football", "Box2D")
_MAX_CHANNELS = 4  # The CNNs' image layout: few channels first or last (networks.py).


def _image_task(option: str) -> bool:
    """An Atari game (by form, without loading envpool) or another family's screen task."""
    if atari_game(option):
        return True
    # envpool loads only when a config is given such a task.
    from sebulba.environments import envpool_pools

    return envpool_pools.is_task_of(option, IMAGE_FAMILIES, image_observations=True)


def get_config(arg: str | None = None):
    variant = parse_variant(
        arg,
        "ppo_atari",
        ("smoke",),
        tasks=_image_task,
        tasks_known="GAME-v5 or a ViZDoom, Football or CarRacing task id",
    )
    config = base_config(defaults.ppo_config())  # baselines' Atari PPO, changed below.
    config.env.id = variant.task or "Breakout-v5"
    if not atari_game(config.env.id):
        from sebulba.environments import envpool_pools, envpool_registry

        frames = envpool_pools.task_spaces(config.env.id)[0].shape[0]  # env.frame_stack's screens.
        if envpool_registry.family_name(config.env.id) == "ViZDoom" and frames > _MAX_CHANNELS:
            config.env.frame_stack = 1  # A colour scenario: one RGB screen [3, H, W].
    config.env.num_envs = 128
    config.env.clip_rewards = True
    config.env.use_fire_reset = True  # envpool's default, which Cleanba keeps.
    config.total_timesteps = 50_000_000
    config.agent.network = "impala_resnet"
    config.agent.conv_init = "lecun_normal"  # Cleanba keeps flax's default for its convs.
    config.agent.norm_adv = "batch"  # Cleanba normalises once per rollout.
    config.agent.clip_vloss = False  # Cleanba does not clip the value loss.
    config.log.every_updates = 10
    if "smoke" in variant:
        smoke_run(config, num_envs=4, num_steps=8, update_epochs=1, updates=2)
    return config
