"""PPO on Procgen with the settings of Cobbe et al. (2020) and CleanRL's `ppo_procgen.py`.

The generalisation protocol of Cobbe et al. ("Leveraging Procedural Generation to
Benchmark Reinforcement Learning", 2020), easy mode: train on 200 levels (levels 0-199:
`env.kwargs` num_levels 200, start_level 0) for 25M env steps, then play levels never
trained on (`python -m sebulba.evaluate --workdir=DIR --levels=train,test`). PPO as
CleanRL's `ppo_procgen.py` and the paper's Table 2: the IMPALA ResNet (16-32-32 channels,
a 256-unit layer); 64 envs x 256 steps per update, 8 minibatches, 3 epochs; Adam step size
5e-4, not annealed; gamma 0.999, GAE lambda 0.95; clip 0.2 for the surrogate and the
value loss; entropy 0.01, value coefficient 0.5, gradient norm 0.5; advantages normalised
per minibatch; rewards scaled by the running std of the discounted return and clipped to
+-10 (gym's NormalizeReward, as CleanRL). Returns are reported raw.

Deliberate differences:

* CleanRL trains on every level (`num_levels=0`, Cobbe et al.'s sample-efficiency
  protocol); this config trains on 200 levels, as the paper's generalisation
  experiments do. CleanRL's setting: `--config.env.kwargs="{'num_levels': 0}"`.
* `pipeline.policy_lag` stays 1 (Cleanba's one-step lag, the platform's default), where
  CleanRL and the paper collect each rollout with the newest parameters;
  `--config.pipeline.policy_lag=0` gives their synchronous schedule.
* Reward scaling updates its statistics once per rollout, in the learner (they travel
  with the parameters and are checkpointed), not after every env step as the wrapper
  does (docs/agents.md).
* Initialisation: convolutions lecun_normal (CleanRL keeps PyTorch's default for them,
  of variance 1/(3 fan-in); the paper's baselines code, Glorot's), the 256-unit layer
  orthogonal with gain sqrt(2) (PyTorch's default in CleanRL); the heads as CleanRL's.
* envpool's port of Procgen, whose task ids name game and mode (`StarpilotEasy-v0`):
  each env draws its levels from its own seed (the run's seed plus its index), where
  the paper's vectorised env draws them from one generator.
* Minibatches: each env column shuffles its own 256 steps and minibatch j takes time
  slots [32j, 32j + 32) of every column (`time_shuffled`, so a minibatch stays on its
  learner device and is the same on any number of them), where CleanRL draws each
  minibatch uniformly from all 16,384 samples.
* Test levels: evaluate's `--levels=test` plays levels from 200 upwards (every level
  the run did not train on); the paper tests on the full distribution, which includes
  the 200 training levels with negligible probability (200 in 2^31).

`:Starpilot` (CleanRL's default game), any other Procgen game name (`:Bigfish`,
`:coinrun`, ...: its easy mode) or any envpool Procgen task id (`:StarpilotHard-v0`)
selects the task; `:smoke` is a seconds-long run used by the tests (with a task:
`:Bigfish,smoke`).
"""

from sebulba.agents import defaults
from sebulba.config import base_config, envpool_tasks, parse_variant, smoke_run

# Procgen's 16 games; a bare name means its easy mode, the paper's generalisation setting.
GAMES = (
    "bigfish",
    "bossfight",
    "caveflyer",
    "chaser",
    "climber",
    "coinrun",
    "dodgeball",
    "fruitbot",
    "heist",
    "jumper",
    "leaper",
    "maze",
    "miner",
    "ninja",
    "plunder",
    "starpilot",
)
_TASK_IDS = envpool_tasks("Procgen")


def _is_task(option: str) -> bool:
    return option.lower() in GAMES or _TASK_IDS(option)


def task_id(option: str) -> str:
    """A game name ("starpilot", "Starpilot") as its easy task id; a task id unchanged."""
    return f"{option.capitalize()}Easy-v0" if option.lower() in GAMES else option


def get_config(arg: str | None = None):
    variant = parse_variant(
        arg,
        "ppo_procgen",
        tasks=_is_task,
        tasks_known="a Procgen game (Starpilot, Bigfish, ...) or task id (StarpilotHard-v0)",
    )
    # CleanRL's ppo_procgen keeps ppo.py's PPO (clip 0.2 with value clipping, entropy 0.01,
    # GAE lambda 0.95, ...) but for the lines below.
    config = base_config(defaults.cleanrl_ppo_config())
    config.env.id = task_id(variant.task or "starpilot")
    config.env.num_envs = 64
    config.env.kwargs.num_levels = 200
    config.env.kwargs.start_level = 0
    config.total_timesteps = 25_000_000
    config.agent.network = "impala_resnet"  # 16-32-32 channels, then 256 units.
    config.agent.conv_init = "lecun_normal"
    config.agent.num_steps = 256
    config.agent.learning_rate = 5e-4
    config.agent.anneal_lr = False
    config.agent.gamma = 0.999
    config.agent.num_minibatches = 8
    config.agent.update_epochs = 3
    config.agent.normalize_rewards = True  # Clipped to +-10 (agent.reward_clip).
    config.log.every_updates = 1
    if "smoke" in variant:
        smoke_run(config, num_envs=4, num_steps=16, update_epochs=1, updates=2)
    return config
