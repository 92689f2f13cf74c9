"""The actors' check that a rollout holds only values its spec allows, before the learner sees it.

A corrupted device buffer, an env that returns NaN or a policy whose parameters diverged
would otherwise reach the learner as a diverged loss with no hint of where it came from,
or not at all: an action index outside the action space makes IMPALA's V-trace NaN (the
log-probability of an impossible action is -inf), while PPO, which stores the
log-probability its actor computed, gets a ratio of 0 and finite losses and would learn
from it silently. So each actor thread checks every leaf of its rollout where it lies:

* floating-point leaves (observations, rewards, Box actions, the policy's outputs, the
  recurrent carry): finite;
* integer leaves the env spec bounds (Discrete and MultiDiscrete actions, discrete
  observation entries): within [low, high), per component;
* bool leaves (terminations, truncations, valid, action masks): each byte 0 or 1. XLA
  holds a bool in a byte and reads any non-zero byte as true, so a corrupted flag would
  pass silently; the check reads the byte itself (a bool-to-uint8 convert, which XLA
  makes a plain copy of the byte);
* `env_ids`: exactly the global env indices of the thread's slice.

One small program per learner-device piece reduces each leaf to whether each time step
holds; only those few booleans cross to the host, so a good rollout costs one tiny
program and one small copy. Only when a step fails does a second program find, for the
report, the first bad step and env of each field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from sebulba.agents.api import EnvSpec, Rollout, rollout_env_axes
from sebulba.environments import spaces


@dataclasses.dataclass(frozen=True)
class _Rule:
    """What every entry of one rollout leaf must hold, beside its dtype's own rule.

    Attributes:
      bounds: [low, high) of an integer leaf (each broadcast over its trailing axes);
        None: any value of its dtype.
      env_ids: the leaf holds global env indices, which must be the expected ones.
    """

    bounds: tuple[Any, Any] | None = None
    env_ids: bool = False

    def holds(self, x: jax.Array, expected_env_ids: jax.Array) -> jax.Array:
        """Per entry of `x`, whether it holds a value the rule allows."""
        if jnp.issubdtype(x.dtype, jnp.inexact):
            return jnp.isfinite(x)
        if x.dtype == jnp.bool_:
            return x.view(jnp.uint8) <= 1
        if self.env_ids:
            return x == expected_env_ids
        if self.bounds is not None:
            low, high = self.bounds
            return (x >= low) & (x < high)
        return jnp.ones(x.shape, jnp.bool_)

    def broken(self, dtype: np.dtype) -> str:
        """What a failing entry of a leaf of `dtype` is, for the report."""
        if np.issubdtype(dtype, np.inexact):
            return "not finite"
        if dtype == np.bool_:
            return "not 0 or 1"
        if self.env_ids:
            return "not the thread's"
        low, high = (np.asarray(b).tolist() for b in self.bounds)
        return f"outside [{low}, {high})"


def _flatten(tree) -> dict[str, Any]:
    """The leaves of a rollout-shaped tree by their path ("policy_outputs['logits']")."""
    paths = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {jax.tree_util.keystr(path).lstrip("."): leaf for path, leaf in paths}


class RolloutCheck:
    """The check of every rollout of a run against its env spec.

    Args:
      env_spec: the run's spaces; the bounds of discrete actions and observation entries
        come from it.
    """

    def __init__(self, env_spec: EnvSpec):
        self._observation_spec = env_spec.observation
        self._action_bounds = env_spec.action.value_bounds
        self._steps_hold = jax.jit(self._steps_hold_fn)
        self._entries_hold = jax.jit(self._entries_hold_fn)

    def _rules(self, rollout: Rollout) -> Rollout:
        def observation_rule(spec: spaces.ArraySpec) -> _Rule:
            return _Rule(bounds=spec.value_bounds)

        return jax.tree.map(lambda _: _Rule(), rollout).replace(
            obs=spaces.map_observation(observation_rule, self._observation_spec),
            actions=_Rule(bounds=self._action_bounds),
            env_ids=_Rule(env_ids=True),
        )

    def _entries_hold_fn(self, rollout: Rollout, expected_env_ids: jax.Array) -> dict:
        """Per leaf, [T (+ 1), B] (per-env leaves: [B]) whether every entry holds."""

        def per_env(rule: _Rule, axis: int, x: jax.Array) -> jax.Array:
            holds = rule.holds(x, expected_env_ids)
            return jnp.all(holds.reshape(*holds.shape[: axis + 1], -1), axis=-1)

        rules = self._rules(rollout)
        return _flatten(jax.tree.map(per_env, rules, rollout_env_axes(rollout), rollout))

    def _steps_hold_fn(self, rollout: Rollout, expected_env_ids: jax.Array) -> dict:
        """Per leaf, [T (+ 1)] (per-env leaves: [1]) whether each time step holds."""
        entries = self._entries_hold_fn(rollout, expected_env_ids)
        axes = _flatten(rollout_env_axes(rollout))
        return {
            name: jnp.all(held)[None] if axes[name] == 0 else jnp.all(held, axis=1)
            for name, held in entries.items()
        }

    def problems(
        self, pieces: Sequence[Rollout], expected_env_ids: Sequence[jax.Array]
    ) -> str | None:
        """Where the pieces of one rollout break the spec; None if they hold.

        Args:
          pieces: one rollout per learner device, each on its device.
          expected_env_ids: per piece, the [b] int32 global env indices its columns must
            hold, on the piece's device.

        Returns:
          One phrase per bad field, in tree order, e.g. "actions outside [0, 2) (from
          step 3, env 17), valid not 0 or 1 (from step 0, env 4)"; steps count from 0
          within the rollout, envs are global env indices.

        Blocks until the pieces are computed (the flags are read back).
        """
        pairs = list(zip(pieces, expected_env_ids, strict=True))
        flags = jax.device_get([self._steps_hold(piece, ids) for piece, ids in pairs])
        bad_names = {
            name for piece_flags in flags for name, ok in piece_flags.items() if not ok.all()
        }
        if not bad_names:
            return None
        return self._report(pairs, bad_names)

    def _report(self, pairs, bad_names: set[str]) -> str:
        """The phrases of `problems`: each bad field's first bad step, then its first bad env."""
        first: dict[str, tuple[int, int]] = {}
        for piece, ids in pairs:
            held = jax.device_get(self._entries_hold(piece, ids))
            env_ids = np.asarray(jax.device_get(ids))
            for name in bad_names:
                bad = ~np.atleast_2d(held[name])  # [steps, b]; per-env leaves: [1, b].
                if bad.any():
                    step, column = np.argwhere(bad)[0]
                    found = (int(step), int(env_ids[column]))
                    first[name] = min(first.get(name, found), found)
        example = pairs[0][0]
        rules = _flatten(self._rules(example))
        dtypes = {name: leaf.dtype for name, leaf in _flatten(example).items()}
        axes = _flatten(rollout_env_axes(example))
        phrases = []
        for name in rules:  # Tree order: the Rollout's fields as declared.
            if name not in first:
                continue
            step, env = first[name]
            where = f"env {env}" if axes[name] == 0 else f"from step {step}, env {env}"
            phrases.append(f"{name} {rules[name].broken(np.dtype(dtypes[name]))} ({where})")
        return ", ".join(phrases)
