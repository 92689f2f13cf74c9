"""PPO on the gymnasium MuJoCo tasks with CleanRL's `ppo_continuous_action` settings.

1M env steps; 2048 env steps per update, cut into 32 minibatches of 64 for 10 epochs;
step size 3e-4 annealed to 0; gamma 0.99, GAE lambda 0.95, clip 0.2, no entropy bonus,
value coefficient 0.5 with value clipping, gradient norm 0.5, advantages normalised per
minibatch; separate 64-64 tanh actor and critic, a Gaussian policy with a
state-independent log-std; observations normalised and rewards scaled by the running
std of the discounted return, both clipped to +-10. CleanRL steps 1 env for 2048 steps;
here 8 envs x 256 steps make the same 2048-step batch with 8x fewer (batched) policy
calls, which is what a CPU actor pays for (docs/benchmarks.md). The one deliberate
difference in schedule: `pipeline.policy_lag` stays 1 (Cleanba's one-step lag, the
platform's default), where CleanRL collects each rollout with the newest parameters;
`--config.pipeline.policy_lag=0` gives CleanRL's synchronous schedule.

`:Hopper-v4` (the default), `:HalfCheetah-v4`, `:Walker2d-v4`, `:InvertedPendulum-v4` or
any other task with continuous (Box) actions and vector observations selects the task:
every gymnasium MuJoCo task, the continuous Box2D ones (`:BipedalWalker-v3`,
`:LunarLanderContinuous-v2`), classic control's `:Pendulum-v1` and
`:MountainCarContinuous-v0`, and the vector tasks of the other MuJoCo families: every
MetaWorld task (`:MetaWorld/Reach-v3`; configs/ppo_metaworld.py has MT10), every MyoSuite
task (`:myoElbowPose1D6MRandom-v0`), Gymnasium Robotics' Adroit hands
(`:AdroitHandDoor-v1`) and MuJoCo Playground's vector tasks (`:PandaPickCube-v1`); their
dict-observation tasks train with configs/ppo_dmc.py. CleanRL's settings are tuned for
MuJoCo; the others train with them unchanged. `:smoke` is a seconds-long run used by the
tests, of Hopper-v4 or of the task named with it (`:BipedalWalker-v3,smoke`).
"""

from sebulba.agents import defaults
from sebulba.config import base_config, continuous_control_tasks, parse_variant, smoke_run

_TASKS = continuous_control_tasks()


def get_config(arg: str | None = None):
    variant = parse_variant(
        arg,
        "ppo_mujoco",
        tasks=_TASKS,
        tasks_known="a Box-action vector task: Hopper-v4, BipedalWalker-v3, ...",
    )
    # CleanRL's ppo_continuous_action keeps ppo.py's PPO for what the lines below leave:
    # gamma 0.99, GAE lambda 0.95, clip 0.2 with value clipping, value coefficient 0.5,
    # gradient norm 0.5, advantages normalised per minibatch, the step size annealed.
    config = base_config(defaults.cleanrl_ppo_config())
    config.env.id = variant.task or "Hopper-v4"
    config.env.num_envs = 8
    config.total_timesteps = 1_000_000
    config.agent.network = "mlp"
    config.agent.num_steps = 256  # x 8 envs: CleanRL's 2048 steps of 1 env.
    config.agent.learning_rate = 3e-4
    config.agent.num_minibatches = 32
    config.agent.update_epochs = 10
    # "auto" rolls these MLPs' 320 minibatch steps (unrolled they take minutes and
    # gigabytes to compile); given a convolutional network on a CPU it unrolls them
    # instead, since a rolled loop runs conv gradients 8-40x slower there.
    config.agent.minibatch_loop = "auto"
    config.agent.ent_coef = 0.0
    # Clipped to +-10 after normalisation (the agent's observation_clip and reward_clip).
    config.agent.normalize_observations = True
    config.agent.normalize_rewards = True
    config.log.every_updates = 10
    if "smoke" in variant:
        smoke_run(config, num_envs=8, num_steps=16, update_epochs=2, updates=4)
    return config
