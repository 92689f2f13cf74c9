"""Checkpoints, preemption-safe resume and layout-independent restore (orbax, tensorstore).

Implements docs/checkpointing.md on orbax's `CheckpointManager` (tensorstore backend). Saving
and restoring are collective: every process calls them alike, orbax coordinates and
process 0 writes the metadata. Checkpoint `checkpoints/<update>/` holds three or four items:

  state            the learner state pytree (parameters, optimizer state, counters, a
                   replay buffer split along envs);
  previous_params  policy_lag L > 0: the lagged parameters, the L versions that collect
                   the next L rollouts (`lag_schedule.lagged_versions(update + 1, L)`,
                   oldest first), so the resumed lag schedule continues exactly;
  env_state        Anakin runs only: the JAX envs' state, observations, episode
                   counters and recurrent carries (sharded along envs), so a resumed
                   run continues bit for bit;
  meta             JSON: update, global step, schedule, episode statistics, the env
                   order of state split along envs (`reorder_envs`), and the SHA-256
                   checksum (`tree_checksum`) and leaf signature of the trees above.

No RNG state is saved: every key derives from the seed and layout-free indices (update
counter, step, global env index; `sebulba.random_streams`). envpool cannot snapshot
envs, so a resume re-seeds them from (seed, resume update); docs/checkpointing.md says
what that guarantees.
A save is written to `<update>.orbax-checkpoint-tmp` and renamed when complete (orbax),
so a killed save never looks finished; `restore` also skips, with a warning, finished
checkpoints whose data cannot be read or fails its checksum.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging as py_logging
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from jax.experimental import multihost_utils
from jax.sharding import PartitionSpec

from sebulba.errors import ConfigError
from sebulba.mesh import BATCH_AXIS, DeviceLayout
from sebulba.runtime.deferred_imports import defer_import
from sebulba.runtime.stop_signals import StopSignals  # noqa: F401 - part of this module's API.

# orbax loads when a run first looks for a checkpoint, while its update compiles.
defer_import("orbax.checkpoint")
import orbax.checkpoint as ocp  # noqa: E402

CHECKPOINTS_DIRNAME = "checkpoints"
# Unreadable checkpoints of a run are moved here (never deleted), so the run can save
# that update again and `max_to_keep` counts only good checkpoints.
SKIPPED_DIRNAME = "checkpoints_skipped"
FORMAT_VERSION = 1
_STATE, _PREVIOUS, _ENV_STATE, _META = "state", "previous_params", "env_state", "meta"
_TMP_MARKER = ".orbax-checkpoint-tmp"  # orbax's suffix of a save in progress.


class _QuietOrbax(py_logging.Filter):
    """Drops orbax's INFO chatter (dozens of lines per save); its warnings still show."""

    def filter(self, record: py_logging.LogRecord) -> bool:
        return record.levelno >= py_logging.WARNING or "/orbax/" not in record.pathname


py_logging.getLogger("absl").addFilter(_QuietOrbax())


class CheckpointMismatch(ConfigError):
    """A readable checkpoint holds a run this config cannot continue."""


class NoReadableCheckpoint(ConfigError):
    """Every finished checkpoint of a directory failed to read; none was moved."""


def checkpoints_dir(workdir: str) -> str:
    """Where a run in `workdir` keeps its checkpoints."""
    return os.path.join(os.path.abspath(workdir), CHECKPOINTS_DIRNAME)


def resolve_source(path: str) -> tuple[str, int | None]:
    """Maps a workdir, a checkpoints directory or a step directory to (directory, step).

    Raises:
      ConfigError: `path` does not exist.
    """
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise ConfigError(f"ckpt.resume_from {path!r} is not a directory")
    if os.path.isdir(os.path.join(path, CHECKPOINTS_DIRNAME)):
        return os.path.join(path, CHECKPOINTS_DIRNAME), None
    name = os.path.basename(path)
    if name.isdigit() and os.path.isdir(os.path.join(path, _META)):
        return os.path.dirname(path), int(name)
    return path, None


def tree_signature(tree: Any) -> list[str]:
    """Describes each leaf (array or ShapeDtypeStruct) as "path shape dtype"."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [f"{jax.tree_util.keystr(p)} {tuple(x.shape)} {x.dtype}" for p, x in leaves]


def tree_checksum(tree: Any) -> str | None:
    """SHA-256 of every leaf's raw bytes (keys as key data); None if not at hand.

    A fully replicated leaf (parameters, optimizer state, counters) is hashed from its
    local copy. A leaf split over devices (a replay buffer along envs, an Anakin run's env
    state) is hashed as the whole array when this process holds all of it: the same bytes
    on one device or several, in the env order it was saved in (a restore checks it before
    `reorder_envs`). A tree with a leaf spread over several processes has no checksum: it
    is saved with none (null in the metadata), and a restore that spreads such a leaf over
    processes cannot check the one a single process saved; both rely on orbax's reads alone.
    """
    digest = hashlib.sha256()
    for leaf in jax.tree.leaves(tree):
        if isinstance(leaf, jax.Array):
            if leaf.sharding.is_fully_replicated:
                leaf = leaf.addressable_shards[0].data
            elif not leaf.is_fully_addressable:
                return None
            if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
                leaf = jax.random.key_data(leaf)
        digest.update(np.ascontiguousarray(jax.device_get(leaf)).tobytes())
    return digest.hexdigest()


def _env_axis(leaf: Any) -> int | None:
    """The axis of `leaf` split along envs (its partition spec names `BATCH_AXIS`), or None."""
    spec = getattr(leaf.sharding, "spec", None) if isinstance(leaf, jax.Array) else None
    for axis, names in enumerate(spec or ()):
        if names == BATCH_AXIS or (isinstance(names, tuple) and BATCH_AXIS in names):
            return axis
    return None


def reorder_envs(state: Any, saved_order: list[int] | None, order: np.ndarray, path: str) -> Any:
    """`state` with each leaf split along envs moved from the saved env order to `order`.

    Column i of such a leaf (a replay buffer's) holds the history of global env
    `saved_order[i]`, the layout that saved it having its rollout's env axis in that order
    (`Sizes.env_order`); the current layout puts env `order[i]` there. The leaves are
    gathered into the current order one at a time, each donated, so a restore onto another
    layout holds at most one leaf twice. A leaf the learner state keeps replicated has no
    env axis and is returned as restored.

    Args:
      state: the restored learner state, with the current layout's shardings.
      saved_order: the checkpoint's recorded env order; None for a checkpoint written
        before sebulba recorded it, taken to be in the current order.
      order: [num_envs] the current layout's env order.
      path: the checkpoint, for messages.
    """
    leaves = jax.tree.leaves(state)
    if not any(_env_axis(leaf) is not None for leaf in leaves):
        return state
    if saved_order is None:
        logging.warning(
            "checkpoint %s records no env order (an older sebulba wrote it): its learner state "
            "split along envs is taken to be in this layout's order, which holds only if "
            "mesh.* and pipeline.num_actor_threads are those it was saved with",
            path,
        )
        return state
    saved = np.asarray(saved_order, np.int64)
    if np.array_equal(saved, order):
        return state
    if sorted(saved.tolist()) != sorted(np.asarray(order).tolist()):
        raise CheckpointMismatch(f"checkpoint {path} holds other global envs than this config")
    column_of = np.empty(len(saved), np.int64)
    column_of[saved] = np.arange(len(saved))
    columns = column_of[np.asarray(order)]  # New column i <- saved column columns[i].

    def move(leaf):
        axis = _env_axis(leaf)
        if axis is None:
            return leaf
        gather = jax.jit(
            lambda x: jnp.take(x, columns, axis=axis),
            out_shardings=leaf.sharding,
            donate_argnums=0,
        )
        return gather(leaf)

    return jax.tree.map(move, state)


def abstract_replicated(tree: Any, sharding: jax.sharding.Sharding) -> Any:
    """ShapeDtypeStructs of `tree` (arrays or shapes) placed with `sharding`."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), tree)


def _manager(
    directory: str, *, create: bool = False, max_to_keep: int | None = None, async_save: bool = True
) -> ocp.CheckpointManager:
    options = ocp.CheckpointManagerOptions(
        create=create,
        max_to_keep=max_to_keep,
        enable_async_checkpointing=async_save,
        cleanup_tmp_directories=create,  # Only the writer removes interrupted saves.
    )
    handlers = {
        _STATE: ocp.StandardCheckpointHandler(),
        _PREVIOUS: ocp.StandardCheckpointHandler(),
        _ENV_STATE: ocp.StandardCheckpointHandler(),
        _META: ocp.JsonCheckpointHandler(),
    }
    return ocp.CheckpointManager(directory, item_handlers=handlers, options=options)


def interrupted_saves(directory: str) -> list[str]:
    """Saves that never finished (their process died while writing)."""
    if not os.path.isdir(directory):
        return []
    return sorted(name for name in os.listdir(directory) if _TMP_MARKER in name)


def list_steps(directory: str) -> list[int]:
    """Finished checkpoint steps in `directory`, oldest first (no data is read)."""
    if not os.path.isdir(directory):
        return []
    return sorted(_manager(directory).all_steps())


_max = jax.jit(jnp.max)


def _all_processes_ok(ok: bool, layout: DeviceLayout | None) -> bool:
    return not any_process(not ok, layout) if layout is not None else ok


def any_process(flag: bool, layout: DeviceLayout) -> bool:
    """True on every process if `flag` is True on any (a collective over the learner mesh).

    Multi-process runs must take the same decision at the same update (stopping on a
    signal that reached one host first, skipping a checkpoint one host cannot read).
    """
    if jax.process_count() == 1:
        return flag
    local = np.full((len(layout.local_learner_devices),), flag, np.int32)
    flags = jax.make_array_from_process_local_data(
        layout.sharding(PartitionSpec(BATCH_AXIS)), local
    )
    return bool(np.asarray(_max(flags).addressable_shards[0].data))  # Replicated result.


@dataclasses.dataclass
class Restored:
    """A checkpoint restored onto the current layout.

    Attributes:
      step: the update after which it was saved.
      path: its step directory.
      state: the learner state, with the target shardings.
      previous_params: the lagged parameters (policy_lag L > 0: a tuple of L versions,
        oldest first), or None.
      meta: its JSON metadata.
      env_state: an Anakin run's env state, or None.
    """

    step: int
    path: str
    state: Any
    previous_params: Any
    meta: dict[str, Any]
    env_state: Any = None


def read_meta(directory: str, step: int) -> dict[str, Any]:
    """The JSON metadata of checkpoint `step` in `directory`; {} if it cannot be read."""
    try:
        args = ocp.args.Composite(meta=ocp.args.JsonRestore())
        return dict(_manager(directory).restore(step, args=args)[_META])
    except Exception:  # noqa: BLE001 - an unreadable checkpoint is reported by `restore`.
        return {}


def _check_compatible(
    meta: dict, signature: list[str], env_signature: list[str] | None, expect: dict, path: str
) -> None:
    if meta.get("format") != FORMAT_VERSION:
        raise ValueError(f"unknown format {meta.get('format')!r}")
    for key, value in expect.items():
        if meta.get(key) != value:
            raise CheckpointMismatch(
                f"checkpoint {path} was saved with {key}={meta.get(key)!r}, "
                f"but this config has {key}={value!r}"
            )
    # Only a run that continues its JAX envs asks for their state; evaluation does not.
    saved_env = meta.get("env_state_signature")
    if env_signature is not None and saved_env is None:
        raise CheckpointMismatch(
            f"checkpoint {path} holds no env state (an envpool run's), but this config runs "
            "a JAX env (Anakin), which continues from its saved state"
        )
    if env_signature is not None and saved_env != env_signature:
        raise CheckpointMismatch(
            f"checkpoint {path} holds an env state this config does not build: env.id, "
            "env.num_envs or the agent's recurrent core changed"
        )
    if meta["state_signature"] != signature:
        saved = set(meta["state_signature"])
        leaf = next((s for s in signature if s not in saved), signature[:1])
        raise CheckpointMismatch(
            f"checkpoint {path} holds a learner state this config does not build "
            f"(e.g. leaf {leaf!r} differs): agent or network settings changed"
        )


def _skip(directory: str, step: int, problem: str, skipped_dir: str | None) -> None:
    where = f"{directory}/{step}"
    if skipped_dir is None:
        logging.warning("skipping checkpoint %s: %s", where, problem)
        return
    target = os.path.join(skipped_dir, f"{step}-{time.strftime('%Y%m%dT%H%M%S')}")
    logging.warning("skipping checkpoint %s: %s; moved to %s", where, problem, target)
    if jax.process_index() == 0:
        os.makedirs(skipped_dir, exist_ok=True)
        os.rename(where, target)
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(f"sebulba:skip-checkpoint-{step}")


def restore(
    directory: str,
    abstract_state: Any,
    abstract_previous: Any = None,
    *,
    abstract_env_state: Any = None,
    step: int | None = None,
    expect: dict[str, Any] | None = None,
    layout: DeviceLayout | None = None,
    skipped_dir: str | None = None,
) -> Restored | None:
    """Restores the newest valid checkpoint in `directory`, or exactly `step`.

    Arrays take the shardings of the abstract trees, so a checkpoint saved on one learner
    layout restores onto any other. One that cannot be read or fails its checksum is
    skipped with a warning (moved to `skipped_dir` if given) for the next older one, once
    an older one has been read: if none can be, the cause may be passing (memory, I/O),
    so nothing is moved and the run stops rather than start over.

    Args:
      directory: a checkpoints directory.
      abstract_state: ShapeDtypeStructs (with shardings) of the learner state.
      abstract_previous: the same for the lagged parameters (a tuple of policy
        parameters); None to not restore them.
      abstract_env_state: the same for an Anakin run's env state (sharded along envs);
        None for a Sebulba run. A checkpoint without one cannot continue such a run.
      step: restore this step only (an unreadable one is then an error).
      expect: meta values that must match (e.g. steps_per_update).
      layout: the learner layout; multi-process runs agree on every decision over it.
      skipped_dir: where unreadable checkpoints are moved (a run's own checkpoints only).

    Returns:
      The restored checkpoint, or None if `directory` holds no valid checkpoint.

    Raises:
      CheckpointMismatch: a readable checkpoint cannot continue this config.
      NoReadableCheckpoint: `directory` has finished checkpoints and none can be read.
      ValueError: `step` is given but missing or unreadable.
    """
    steps = list_steps(directory)
    if step is not None:
        if step not in steps:
            raise ValueError(f"no finished checkpoint {step} in {directory} (found {steps})")
        steps = [step]
    if not steps:
        return None
    signature = tree_signature({_STATE: abstract_state})
    env_signature = None
    if abstract_env_state is not None:
        env_signature = tree_signature({_ENV_STATE: abstract_env_state})
    manager = _manager(directory)

    def read(candidate: int, path: str) -> tuple[dict, dict, str | None]:
        meta, trees, problem = {}, {}, None
        try:
            args = ocp.args.Composite(meta=ocp.args.JsonRestore())
            meta = manager.restore(candidate, args=args)[_META]
            _check_compatible(meta, signature, env_signature, expect or {}, path)
        except CheckpointMismatch:
            raise
        except Exception as error:  # noqa: BLE001 - any read failure makes it unusable.
            problem = f"unreadable metadata ({type(error).__name__}: {error})"
        # Processes agree before each (collective) restore, so none waits for the others.
        if not _all_processes_ok(problem is None, layout):
            return meta, trees, problem or "unreadable on another process"
        items = {_STATE: ocp.args.StandardRestore(abstract_state)}
        # Checkpoints older than lags beyond one saved the one version itself, not a tuple.
        single_version = meta.get("previous_params_form") != "lagged"
        if abstract_previous is not None and meta["has_previous_params"]:
            items[_PREVIOUS] = ocp.args.StandardRestore(
                abstract_previous[0] if single_version else abstract_previous
            )
        if abstract_env_state is not None:
            items[_ENV_STATE] = ocp.args.StandardRestore(abstract_env_state)
        try:
            restored = manager.restore(candidate, args=ocp.args.Composite(**items))
            for name in items:
                trees[name] = restored[name]
                expected = meta["checksums"].get(name)
                # None where a leaf is spread over processes: nothing to compare here.
                actual = None if expected is None else tree_checksum(trees[name])
                if actual is not None and actual != expected:
                    problem = f"{name} does not match its checksum"
            if _PREVIOUS in trees and single_version:
                trees[_PREVIOUS] = (trees[_PREVIOUS],)
        except Exception as error:  # noqa: BLE001 - any read failure makes it unusable.
            problem = f"unreadable data ({type(error).__name__}: {error})"
        if not _all_processes_ok(problem is None, layout):
            return meta, trees, problem or "unreadable on another process"
        return meta, trees, None

    try:
        unusable = []  # (step, problem), newest first: moved aside once an older one reads.
        for candidate in reversed(steps):
            path = os.path.join(directory, str(candidate))
            meta, trees, problem = read(candidate, path)
            if problem is None:
                for bad_step, bad_problem in unusable:
                    _skip(directory, bad_step, bad_problem, skipped_dir)
                return Restored(
                    candidate,
                    path,
                    trees[_STATE],
                    trees.get(_PREVIOUS),
                    meta,
                    trees.get(_ENV_STATE),
                )
            if step is not None:
                raise ValueError(f"checkpoint {path} is not usable: {problem}")
            logging.warning("checkpoint %s is not usable: %s", path, problem)
            unusable.append((candidate, problem))
        newest, newest_problem = unusable[0]
        raise NoReadableCheckpoint(
            f"no checkpoint in {directory} can be read ({len(unusable)} tried; the newest, "
            f"{newest}: {newest_problem}); none was moved or changed: remove the cause (memory, "
            "disk, permissions) and run again, or move the directory away to start over"
        )
    finally:
        manager.close()


class Checkpointer:
    """Saves a run's checkpoints into `workdir/checkpoints` (every process calls it).

    With `async_save`, `save` returns once the arrays are in host memory (the learner may
    then donate them) and orbax writes the files in the background.
    """

    def __init__(self, workdir: str, *, max_to_keep: int, async_save: bool):
        self.directory = checkpoints_dir(workdir)
        for name in interrupted_saves(self.directory):
            logging.warning(
                "skipping unfinished checkpoint %s/%s: its save was interrupted; deleting it",
                self.directory,
                name,
            )
        self._manager = _manager(
            self.directory, create=True, max_to_keep=max_to_keep, async_save=async_save
        )

    def save(
        self,
        update: int,
        state: Any,
        previous_params: Any,
        meta: dict[str, Any],
        env_state: Any = None,
    ) -> str:
        """Saves the state after `update` with the lagged parameters `previous_params` (a
        tuple, or None) and an Anakin run's `env_state` (or None); returns its path."""
        start = time.perf_counter()
        meta = {
            **meta,
            "format": FORMAT_VERSION,
            "update": update,
            "state_signature": tree_signature({_STATE: state}),
            "has_previous_params": previous_params is not None,
            "previous_params_form": "lagged",  # A tuple of versions, oldest first.
            "env_state_signature": (
                None if env_state is None else tree_signature({_ENV_STATE: env_state})
            ),
            "checksums": {
                _STATE: tree_checksum(state),
                _PREVIOUS: None if previous_params is None else tree_checksum(previous_params),
                _ENV_STATE: None if env_state is None else tree_checksum(env_state),
            },
        }
        items = {_STATE: ocp.args.StandardSave(state), _META: ocp.args.JsonSave(meta)}
        if previous_params is not None:
            items[_PREVIOUS] = ocp.args.StandardSave(previous_params)
        if env_state is not None:
            items[_ENV_STATE] = ocp.args.StandardSave(env_state)
        self._manager.save(update, args=ocp.args.Composite(**items), force=True)
        logging.info("checkpoint %d: learner blocked %.3fs", update, time.perf_counter() - start)
        return os.path.join(self.directory, str(update))

    def close(self) -> None:
        """Waits until every started save is on disk, then releases orbax's threads."""
        self._manager.wait_until_finished()
        self._manager.close()
