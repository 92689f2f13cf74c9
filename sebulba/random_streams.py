"""Every random stream of a run, named and derived here and nowhere else.

A run draws randomness in four places (five with a JAX-native env, six when one is
evaluated, seven in a population). Each is a *stream*:
its keys descend from `fold_in(key(seed), tag)` with a tag that no other stream uses,
followed by counters that never name a thread, device or process (so layouts change
nothing):

  PARAMS_INIT     the agent's `init(key)`: `init_key(seed)`, once per run.
  ACTOR_SAMPLING  `act(params, obs, keys)` on the actors: one key per (step, global env).
  LEARNER         the agent's `update` (minibatch shuffles, ...): the agent folds its
                  own counters (update counter in its state, epoch, env id) into
                  `learner_key(seed)`.
  INFERENCE       `act` of a loaded policy (`sebulba.load_policy`, evaluation): one key
                  per (call or env step, row), from the run's or evaluation's seed.
  JAX_ENV         a JAX-native env's resets and steps (Anakin, `sebulba.anakin`): one
                  key per (env step, global env); step 0 is the first reset.
  EVALUATION_ENV  a JAX-native env's resets and steps in evaluation (`sebulba.evaluate`):
                  one key per (env step, episode), from evaluation's `--seed`; a stream
                  of its own, so no evaluation episode replays a training episode.
  POPULATION      a population's (PBT, `sebulba.pbt`) draws: one key per (exploit/explore
                  step, member); step 0 draws the initial hyperparameters.

Two keys of different streams can only coincide if the Threefry hash behind `fold_in`
collides: whatever the counters, their fold-in chains start from different tags. Before
these streams existed, PPO's shuffle key for (update 1, epoch e, env g) equalled the
actors' sampling key for (step e, env g); tests/test_random_streams.py enumerates every
stream's keys and finds no repeats.

envpool's integer env seeds are a separate, 30-bit family, also derived here: a fresh
run seeds global env g with `seed + g`, a resumed run and evaluation draw their bases
from `numpy.random.SeedSequence([seed, tag, ...])` with tags of their own.
"""

from __future__ import annotations

import enum

import jax
import numpy as np

from sebulba.runtime.threefry_lowering import use_unrolled_threefry_on_cpu

# Before any program that derives these keys is lowered: on CPU the hash then runs as one
# fused kernel, with the same bits (sebulba.runtime.threefry_lowering says why).
use_unrolled_threefry_on_cpu()


@enum.unique
class Stream(enum.IntEnum):
    """The tag folded into `key(seed)` first; one per stream, never reused."""

    PARAMS_INIT = 1
    ACTOR_SAMPLING = 2
    LEARNER = 3
    INFERENCE = 4
    JAX_ENV = 5
    EVALUATION_ENV = 6
    POPULATION = 7


@enum.unique
class _EnvSeeds(enum.IntEnum):
    """Tags of the envpool seed bases (a different family from the JAX keys above)."""

    RESUMED_RUN = 1
    EVALUATION = 2


def stream_key(seed: int, stream: Stream) -> jax.Array:
    """The root key of `stream`; every key of that stream descends from it."""
    return jax.random.fold_in(jax.random.key(seed), int(stream))


def init_key(seed: int) -> jax.Array:
    """The key `agent.init` receives (parameter initialisation)."""
    return stream_key(seed, Stream.PARAMS_INIT)


def learner_key(seed: int) -> jax.Array:
    """The root of an agent's update randomness.

    An agent derives every key of its update from this one by `jax.random.fold_in` of
    layout-free counters: the update counter in its state, the epoch, `rollout.env_ids`.
    """
    return stream_key(seed, Stream.LEARNER)


def _per_step_and_id(root: jax.Array, step: jax.Array, ids: jax.Array) -> jax.Array:
    step_key = jax.random.fold_in(root, step)
    return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(step_key, ids)


def actor_keys(seed: int, step_index: jax.Array, env_ids: jax.Array) -> jax.Array:
    """Action-sampling keys of one actor step.

    Args:
      seed: the run's seed.
      step_index: scalar int32, `(update - 1) * (T + 1) + t`: unique over the run.
      env_ids: [b] int32 global env indices.

    Returns:
      [b] typed keys, one per env.
    """
    return _per_step_and_id(stream_key(seed, Stream.ACTOR_SAMPLING), step_index, env_ids)


def inference_keys(seed: int, step: jax.Array, row_ids: jax.Array) -> jax.Array:
    """Action-sampling keys of a loaded policy (`sebulba.load_policy`, evaluation).

    Args:
      seed: the run's seed, or evaluation's `--seed`.
      step: int32 scalar, the call (or env step) index.
      row_ids: [b] int32, a stable id of each row (the episode index in evaluation).

    Returns:
      [b] typed keys, one per row.
    """
    return _per_step_and_id(stream_key(seed, Stream.INFERENCE), step, row_ids)


def jax_env_keys(seed: int, env_step: jax.Array, env_ids: jax.Array) -> jax.Array:
    """Keys of one step of a batch of JAX-native envs (Anakin).

    Args:
      seed: the run's seed.
      env_step: int32 scalar, 0 for the first reset, else `(update - 1) * T + t + 1` for
        env step t of rollout `update`: unique over the run.
      env_ids: [b] int32 global env indices.

    Returns:
      [b] typed keys, one per env (a step that resets an env uses its key for the reset).
    """
    return _per_step_and_id(stream_key(seed, Stream.JAX_ENV), env_step, env_ids)


def evaluation_env_keys(seed: int, env_step: jax.Array, episode_ids: jax.Array) -> jax.Array:
    """Keys of one step of a JAX-native env's evaluation episodes (`sebulba.anakin.episodes`).

    Args:
      seed: evaluation's `--seed`.
      env_step: int32 scalar, 0 for the reset that starts the episodes, t + 1 for their
        env step t.
      episode_ids: [b] int32 episode indices.

    Returns:
      [b] typed keys, one per episode.
    """
    return _per_step_and_id(stream_key(seed, Stream.EVALUATION_ENV), env_step, episode_ids)


def population_key(seed: int, step: int, member: int) -> jax.Array:
    """The key of a population's member at one of its steps (`population_uniforms`)."""
    step_key = jax.random.fold_in(stream_key(seed, Stream.POPULATION), step)
    return jax.random.fold_in(step_key, member)


def population_uniforms(seed: int, step: int, member: int, count: int) -> np.ndarray:
    """`count` uniform draws in [0, 1) of a population's member at one of its steps.

    Args:
      seed: the population's seed (its run's `seed`).
      step: 0 for the initial hyperparameters, g for exploit/explore step g.
      member: the member's index.
      count: how many draws.

    Returns:
      [count] float64, from the key's 32-bit words (the same on every backend).
    """
    key = population_key(seed, step, member)
    bits = np.asarray(jax.random.bits(key, (count,), np.uint32), np.float64)
    return bits / 2.0**32


def _env_seed_base(*entropy: int) -> int:
    # Equal-length entropy: SeedSequence pads with zeros, so [s, 1] would equal [s, 1, 0].
    state = np.random.SeedSequence([value % 2**32 for value in entropy]).generate_state(1)[0]
    return int(state % 2**30)  # envpool seeds are C ints; leave room for + g.


def env_seed_base(seed: int, first_update: int) -> int:
    """Seed of global env 0 for a run (segment) that starts at `first_update`.

    A fresh run seeds env g with `seed + g`. A resumed run cannot restore the envs'
    internal state, so it draws a new base from (seed, first_update): resuming the same
    checkpoint twice gives the same envs, and no resume repeats the fresh run's episodes.
    """
    if first_update == 1:
        return seed
    return _env_seed_base(seed, _EnvSeeds.RESUMED_RUN, first_update)


def evaluation_env_seed_base(seed: int) -> int:
    """Seed of evaluation episode 0's env; episode i's env gets `base + i`."""
    return _env_seed_base(seed, _EnvSeeds.EVALUATION, 0)
