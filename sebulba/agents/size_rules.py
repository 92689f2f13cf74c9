"""The built-in agents' rules on sizes, in plain Python (no JAX).

What each built-in agent's minibatches and `agent.gradient_accumulation_steps` must
divide, and what a replay agent's `agent.buffer_size`, `batch_size`, `replay_ratio` and
`learning_starts` come to. The agents apply them in `make`; `sebulba.config.run_plan`'s
values pass applies the same rules before JAX is imported (`check_builtin_sizes`).
"""

from __future__ import annotations

import dataclasses

from sebulba.config.sizes import Sizes
from sebulba.config.validation import require_divisible
from sebulba.errors import ConfigError


def check_accumulation_steps(steps, name: str, divides: int, divides_name: str) -> int:
    """Validates `agent.gradient_accumulation_steps`: a positive int dividing `divides`.

    Raises:
      ConfigError: one line naming the field and the size it must divide.
    """
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ConfigError(f"{name} must be a positive integer, got {steps!r}")
    if divides % steps:
        raise ConfigError(f"{name} ({steps}) must divide {divides_name} ({divides})")
    return steps


# Steps per env a replay buffer may hold: its positions are int32 on the learner.
_MAX_STEPS_PER_ENV = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class ReplaySizes:
    """What a replay agent's `agent.buffer_size`, `batch_size` and `replay_ratio` come to.

    Attributes:
      capacity: steps per env the ring holds (C).
      samples_per_env: transitions each env column gives a gradient step.
      gradient_steps: gradient steps per update (replay_ratio x env steps per update).
      first_learning_update: the first update whose env steps reach
        `agent.learning_starts` (its count, from 1). Agents compare update counts with
        it on device, not env steps, which an int32 would wrap beyond 2**31 (a
        10-billion-frame Atari run).
    """

    capacity: int
    samples_per_env: int
    gradient_steps: int
    first_learning_update: int


def replay_sizes(hp, sizes: Sizes, lookahead: int, lookahead_name: str, step_name: str):
    """The `ReplaySizes` of an agent section, or ConfigError naming the field.

    Args:
      hp: the `agent` section: `buffer_size`, `batch_size`, `replay_ratio`,
        `learning_starts`.
      lookahead: steps after a transition that must be stored before it is sampled
        (n for n-step returns).
      lookahead_name: how the error names it, e.g. "agent.n_step" or "1".
      step_name: what one gradient step is called in errors, e.g. "critic steps".
    """
    num_envs, num_steps = sizes.num_envs, sizes.num_steps
    require_divisible(
        hp.buffer_size,
        "agent.buffer_size",
        num_envs * num_steps,
        "env steps per update (global envs x agent.num_steps)",
    )
    capacity = hp.buffer_size // num_envs
    if capacity < num_steps + lookahead:
        raise ConfigError(
            f"agent.buffer_size ({hp.buffer_size}) holds {capacity} steps per env; it needs "
            f"at least agent.num_steps + {lookahead_name} = {num_steps + lookahead}"
        )
    if capacity > _MAX_STEPS_PER_ENV:
        # The learner indexes a column's positions with int32, on every backend.
        largest = _MAX_STEPS_PER_ENV // num_steps * num_steps * num_envs
        raise ConfigError(
            f"agent.buffer_size ({hp.buffer_size:,}) holds {capacity:,} steps per env, more "
            f"than the {_MAX_STEPS_PER_ENV:,} (int32) a buffer column can index: at most "
            f"{largest:,} for {num_envs:,} global envs"
        )
    require_divisible(hp.batch_size, "agent.batch_size", num_envs, "the global env count")
    if hp.batch_size > hp.buffer_size:
        # Sampling with replacement (CleanRL's buffer too) would take it, but each gradient
        # step would then draw the same transitions repeatedly: a large batch's cost for a
        # small one's information.
        raise ConfigError(
            f"agent.batch_size ({hp.batch_size:,}) must be at most agent.buffer_size "
            f"({hp.buffer_size:,}), the transitions a gradient step samples from"
        )
    gradient_steps = hp.replay_ratio * sizes.steps_per_update
    if abs(gradient_steps - round(gradient_steps)) > 1e-6 or round(gradient_steps) < 1:
        raise ConfigError(
            f"agent.replay_ratio ({hp.replay_ratio}) x env steps per update "
            f"({sizes.steps_per_update}) = {gradient_steps:g} {step_name} per update; "
            "it must be a whole number of at least 1"
        )
    if hp.learning_starts > sizes.global_steps:
        # Typically a shortened try run (total_timesteps cut, learning_starts kept).
        raise ConfigError(
            f"agent.learning_starts ({hp.learning_starts}) is more than the run's "
            f"{sizes.global_steps} env steps (total_timesteps): it would take no {step_name}"
        )
    return ReplaySizes(
        capacity,
        hp.batch_size // num_envs,
        int(round(gradient_steps)),
        first_learning_update=-(-hp.learning_starts // sizes.steps_per_update),
    )


def ppo(hp, sizes: Sizes) -> int:
    """PPO's minibatch rules; returns `agent.gradient_accumulation_steps`."""
    if hp.core == "lstm":  # Minibatches of whole env sequences, not of time steps.
        return _env_minibatches(hp, sizes)
    require_divisible(hp.num_steps, "agent.num_steps", hp.num_minibatches, "agent.num_minibatches")
    return check_accumulation_steps(
        hp.gradient_accumulation_steps,
        "agent.gradient_accumulation_steps",
        hp.num_steps // hp.num_minibatches,
        "the time steps of a minibatch, agent.num_steps / agent.num_minibatches",
    )


def impala(hp, sizes: Sizes) -> int:
    """IMPALA's minibatch rules (whole env columns); returns the accumulation steps."""
    return _env_minibatches(hp, sizes)


def _env_minibatches(hp, sizes: Sizes) -> int:
    # Groups of M consecutive global env ids must not straddle two learner devices (see
    # `minibatches.env_groups`).
    require_divisible(
        sizes.envs_per_thread // sizes.learner_devices_per_process,
        "env.num_envs per learner device (env.num_envs / len(mesh.learner_device_ids))",
        hp.num_minibatches,
        "agent.num_minibatches",
    )
    return check_accumulation_steps(
        hp.gradient_accumulation_steps,
        "agent.gradient_accumulation_steps",
        sizes.envs_per_learner_device // hp.num_minibatches,
        "a minibatch's envs per learner device, env.num_envs x pipeline.num_actor_threads "
        "/ len(mesh.learner_device_ids) / agent.num_minibatches",
    )


def pqn(hp, sizes: Sizes) -> None:
    """PQN's minibatches of time steps."""
    del sizes
    require_divisible(hp.num_steps, "agent.num_steps", hp.num_minibatches, "agent.num_minibatches")


def dqn(hp, sizes: Sizes) -> ReplaySizes:
    """DQN's replay sizes (n-step samples)."""
    return replay_sizes(hp, sizes, hp.n_step, "agent.n_step", "gradient steps")


def sac(hp, sizes: Sizes) -> ReplaySizes:
    """SAC's replay sizes, with critic steps per update a multiple of
    agent.policy_frequency."""
    sizes_of_replay = replay_sizes(hp, sizes, 1, "1", "critic steps")
    # Every update then takes the same actor steps (and logs an actor loss).
    require_divisible(
        sizes_of_replay.gradient_steps,
        "critic steps per update (agent.replay_ratio x env steps per update)",
        hp.policy_frequency,
        "agent.policy_frequency",
    )
    return sizes_of_replay


def muzero(hp, sizes: Sizes) -> ReplaySizes:
    """MuZero's replay sizes (windows of K + n steps after their start)."""
    return replay_sizes(
        hp,
        sizes,
        hp.unroll_steps + hp.td_steps,
        "agent.unroll_steps + agent.td_steps",
        "gradient steps",
    )


def alphazero(hp, sizes: Sizes) -> None:
    """AlphaZero's minibatches of time steps (PQN's rule)."""
    pqn(hp, sizes)


_RULES = {
    "ppo": ppo,
    "impala": impala,
    "pqn": pqn,
    "dqn": dqn,
    "sac": sac,
    "muzero": muzero,
    "alphazero": alphazero,
}
# Rules that count the envs of every process (a replay buffer's and batch's multiples).
_COUNTING_PROCESSES = frozenset({"dqn", "sac", "muzero"})


def check_builtin_sizes(agent, sizes: Sizes, processes_known: bool = True) -> None:
    """A built-in agent's size rules, as its `make` applies them (others: at `make`).

    `sebulba.config.run_plan`'s values pass runs them, so that the CLI refuses a bad
    combination before JAX is imported and `sebulba.sweep` before any run starts.

    Args:
      agent: the `agent` section; one built for another agent is left to `make`, which
        names what it lacks.
      sizes: the run's sizes.
      processes_known: False where the number of processes is not known yet (a SLURM
        array's runs): the rules that count every process's envs are left to the run.

    Raises:
      ConfigError: one line naming the fields.
    """
    from sebulba.agents.defaults import builtin_section  # defaults imports no agent.

    if not builtin_section(agent):
        return
    if not processes_known and agent.name in _COUNTING_PROCESSES:
        return
    _RULES[agent.name](agent, sizes)
