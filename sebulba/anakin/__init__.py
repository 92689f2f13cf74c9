"""Anakin: JAX-native environments, the whole act-and-learn loop in one program.

The second architecture of the Podracer paper (Hessel et al. 2021, "Podracer
architectures for scalable reinforcement learning"): the environment is written in JAX,
so acting, stepping the envs and learning run as one jitted program on the learner
mesh, the envs sharded along its batch axis and the parameters replicated. It shares
with the Sebulba pipeline (`sebulba.pipeline`) the agents, the `Rollout` contract, the
mesh, the config sections, checkpoints, metrics and the workdir's outputs:

  env_api   the JAX env protocol (`JaxEnv`), a joint run's tasks (`JointJaxEnv`), and
            the batched step with envpool's auto-reset convention, so a JAX env's
            rollout is a `Rollout` like envpool's
  suites/   one adapter per suite (gymnax, XLand-MiniGrid, Jumanji, Brax, Pgx) and the
            registry of `SUITE:TASK` env ids
  runner    the Anakin runner: the jitted act-and-learn step and its host loop
  host_envs a batch of JAX envs stepped from Python like an envpool pool, for a loaded
            policy (`load_policy(...).make_envs`)

docs/anakin.md describes the design and its guarantees.
"""
