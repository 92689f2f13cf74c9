"""The run-level config sections shared by every `configs/<agent>_<env>.py` file.

An experiment config is `base_config(agent_module.get_config())` with its env and
hyperparameters filled in. Every field carries a one-line comment; docs/configuration.md
lists them all.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import Callable, Iterable

import ml_collections

from sebulba.config.validation import (
    FINITE_NON_NEGATIVE,
    NON_NEGATIVE_INT,
    POSITIVE_INT,
    UNIT_INTERVAL,
    Range,
    check_range,
)
from sebulba.environments import tasks
from sebulba.environments.env_config import check_env_kwargs_form, env_section
from sebulba.errors import ConfigError
from sebulba.runtime.progress import CONSOLE_MODES

_TRANSFER_GUARD_LEVELS = ("allow", "log", "disallow", "log_explicit", "disallow_explicit")
ACTOR_LOOPS = ("auto", "scan", "step")
FUSED_CHOICES = ("auto", "on", "off")  # pipeline.fused (sebulba.fused_step)

# The interval of every numeric run-level key that no other check covers (sizes.py checks
# the sizes and divisibility, train.py the log and checkpoint keys).
RUN_RANGES = {
    # envpool seeds are C ints: leave room for the global env index added to the seed.
    "seed": Range(0, 2**30, integer=True),
    "env.num_threads": NON_NEGATIVE_INT,
    "env.repeat_action_probability": UNIT_INTERVAL,
    "env.max_episode_frames": POSITIVE_INT,
    # The pixel networks tell a frame stack from a channels-last grid by its few (at most
    # 4) leading channels: a deeper stack would be refused by them, or misread as a grid.
    "env.frame_stack": Range(1, 4, integer=True),
    "pipeline.updates_per_call": POSITIVE_INT,
    "ckpt.stop_after_update": NON_NEGATIVE_INT,
}


def base_config(agent: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Returns a full run config around the given `agent` section."""
    config = ml_collections.ConfigDict()
    config.seed = 1  # Seeds parameters, env pools (seed + global env index) and sampling.
    config.total_timesteps = 500_000  # Env steps over all envs, threads and processes.

    config.env = env_section()

    config.agent = agent

    config.mesh = ml_collections.ConfigDict()
    config.mesh.actor_device_ids = (0,)  # Indices into jax.local_devices() for inference.
    # cpu: actor_device_ids index the host's CPU devices, the accelerators left to learning.
    config.mesh.actor_platform = "default"  # default (JAX's default backend) | cpu.
    config.mesh.learner_device_ids = (0,)  # Indices into jax.local_devices() for updates.

    config.pipeline = ml_collections.ConfigDict()
    config.pipeline.num_actor_threads = 1  # Actor threads per process (round-robin devices).
    config.pipeline.policy_lag = 1  # L: rollout k uses version max(1, k-L); 0: synchronous; 0..16.
    # For inference on an accelerator; on CPU-only hosts it rarely pays (docs/benchmarks.md).
    config.pipeline.overlap_env_steps = False  # Two env halves: one steps while the other infers.
    # Same data either way; auto takes scan where the actor devices and task allow it.
    config.pipeline.actor_loop = "auto"  # auto | scan (a rollout: one XLA program) | step.
    # One device both acting and learning: update k and rollout k + 1 as one program.
    config.pipeline.fused = "auto"  # auto (one GPU, scan loop) | on | off.
    # Anakin only: the host reads the block's episodes and metrics back once per call.
    config.pipeline.updates_per_call = 1  # Anakin updates per program call (1: one each).

    # Population-based training (Anakin): members train as one program in WORKDIR/member=<i>.
    config.pbt = ml_collections.ConfigDict()
    config.pbt.population = 0  # Members (member i: seed + i); 0: one run, no PBT. docs/pbt.md.
    config.pbt.interval = 0  # Env steps per member between exploit/explore steps (0: a tenth).
    config.pbt.hyperparameters = "learning_rate"  # Agent keys the members mutate, comma-separated.
    config.pbt.spread = 4.0  # Each key's range: [value / spread, value * spread], in agent bounds.
    config.pbt.truncation = 0.25  # Share replaced per step: the bottom members copy top ones.
    config.pbt.perturb = 1.25  # Explore: multiply or divide each copied value by this factor,
    config.pbt.resample_probability = 0.25  # or with this probability redraw it from its range.
    config.pbt.member = -1  # Set by python -m sebulba.pbt: this run is member i of a population.

    config.log = ml_collections.ConfigDict()
    config.log.every_updates = 1  # Write a metrics line every this many updates.
    config.log.tensorboard = True  # Write TensorBoard event files into the workdir.
    config.log.console = "auto"  # auto (bar on a terminal, else lines) | bar | lines.
    config.log.console_every_s = 5.0  # At most one progress line per this many s (0: all).
    config.log.wandb = False  # Also log to Weights & Biases (pip install wandb).
    config.log.wandb_project = "sebulba"  # wandb project of the run.
    config.log.wandb_entity = ""  # wandb team or user ("": your default entity).

    config.ckpt = ml_collections.ConfigDict()
    config.ckpt.every_updates = 100  # Save every this many updates (0: only at end/on SIGTERM).
    config.ckpt.max_to_keep = 3  # Keep the newest this many checkpoints (older ones deleted).
    config.ckpt.resume_from = ""  # Start from another run: its workdir, checkpoints/ or a step.
    config.ckpt.async_save = True  # Write files in the background; the learner waits for D2H only.
    config.ckpt.stop_after_update = 0  # Save and stop after this update, resumable (0: never).

    config.debug = ml_collections.ConfigDict()
    config.debug.learner_delay_s = 0.0  # Sleep before each update (reproducibility tests).
    config.debug.actor_delay_s = 0.0  # Sleep before each rollout (reproducibility tests).
    config.debug.actor_delay_jitter_s = 0.0  # Plus a seeded uniform [0, this) per rollout.
    config.debug.transfer_guard = "disallow"  # jax.transfer_guard level in the loop.
    config.debug.skip_memory_check = False  # Train even if the update seems not to fit.
    # Policy outputs recomputed, actions resampled, obs[0] against the last rollout's obs[T].
    config.debug.consistency_checks = False  # Re-derive each rollout from its records (slower).
    # XLA's deterministic GPU kernels (docs/architecture.md); no-op on CPU/TPU. False: faster
    # kernels (PPO Atari's learner update 2.6x on one H200), but results vary between runs.
    config.debug.deterministic_gpu = True  # GPU: same seed, same checksum (False: faster, varies).
    return config


def sibling_config(
    config_file: str, name: str, arg: str | None = None
) -> ml_collections.ConfigDict:
    """`get_config(arg)` of configs/<name>.py, the file beside `config_file`.

    Lets a config build on another (e.g. a multi-task config on its single-task one), so
    shared hyperparameters are written once; config files are loaded by path, not as a
    package.
    """
    path = os.path.join(os.path.dirname(os.path.abspath(config_file)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_sebulba_sibling_config_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg)


def smoke_run(
    config: ml_collections.ConfigDict,
    *,
    num_envs: int,
    num_steps: int,
    updates: int,
    update_epochs: int | None = None,
    num_minibatches: int = 2,
) -> None:
    """Shrinks `config` in place to its `:smoke` variant: a seconds-long run for CPUs and tests.

    `updates` updates of `num_envs` x `num_steps` env steps, each cut into `num_minibatches`
    minibatches (and passed over `update_epochs` times, for agents with epochs), with a
    metrics line after every update.
    """
    config.env.num_envs = num_envs
    config.agent.num_steps = num_steps
    config.agent.num_minibatches = num_minibatches
    if update_epochs is not None:
        config.agent.update_epochs = update_epochs
    config.total_timesteps = num_envs * num_steps * updates
    config.log.every_updates = 1


def check_run_ranges(config: ml_collections.ConfigDict) -> None:
    """Raises ConfigError naming the first key of `RUN_RANGES` outside its interval."""
    for dotted, allowed in RUN_RANGES.items():
        value = config
        for part in dotted.split("."):
            value = value[part]
        check_range(value, dotted, allowed)


def check_run_config(config: ml_collections.ConfigDict) -> None:
    """The run-level checks that need neither JAX nor envpool, after the sizes (`sizes.py`).

    Part of the one validation pass (`sebulba.config.run_plan`), whose values alone
    `sebulba.main` checks before importing either, so a bad value fails in a fraction of
    a second.

    Raises:
      ConfigError: naming the first offending field.
    """
    check_run_ranges(config)
    if config.debug.transfer_guard not in _TRANSFER_GUARD_LEVELS:
        raise ConfigError(
            f"debug.transfer_guard {config.debug.transfer_guard!r} must be one of "
            f"{', '.join(_TRANSFER_GUARD_LEVELS)}"
        )
    if config.pipeline.actor_loop not in ACTOR_LOOPS:
        raise ConfigError(
            f"pipeline.actor_loop {config.pipeline.actor_loop!r} must be one of "
            f"{', '.join(ACTOR_LOOPS)}"
        )
    if config.pipeline.fused not in FUSED_CHOICES:
        raise ConfigError(
            f"pipeline.fused {config.pipeline.fused!r} must be one of {', '.join(FUSED_CHOICES)}"
        )
    if config.pipeline.overlap_env_steps not in (True, False):
        raise ConfigError(
            f"pipeline.overlap_env_steps must be True or False, got "
            f"{config.pipeline.overlap_env_steps!r}"
        )
    if config.pipeline.overlap_env_steps and config.env.num_envs < 2:
        raise ConfigError(
            f"pipeline.overlap_env_steps splits each thread's envs in two halves: "
            f"env.num_envs ({config.env.num_envs}) must be at least 2"
        )
    log = config.log
    if not isinstance(log.every_updates, int) or log.every_updates < 1:
        raise ConfigError(f"log.every_updates must be >= 1, got {log.every_updates!r}")
    check_range(log.console_every_s, "log.console_every_s", FINITE_NON_NEGATIVE)
    if log.console not in CONSOLE_MODES:
        raise ConfigError(f"log.console {log.console!r} must be one of {', '.join(CONSOLE_MODES)}")
    if log.wandb and importlib.util.find_spec("wandb") is None:
        raise ConfigError("log.wandb is True but wandb is not installed: pip install wandb")
    for name, minimum in (("every_updates", 0), ("max_to_keep", 1)):
        value = config.ckpt[name]
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ConfigError(f"ckpt.{name} must be an integer >= {minimum}, got {value!r}")
    tasks.check_task_ids(config.env)
    check_env_kwargs_form(config.env)


@dataclasses.dataclass(frozen=True)
class Variant:
    """A config file's parsed `:ARG` (`FILE:ARG`): its keywords and at most one task id.

    `"smoke" in variant` asks for a keyword; `variant.task` is the task id or None.
    """

    keywords: frozenset[str] = frozenset()
    task: str | None = None

    def __contains__(self, keyword: str) -> bool:
        return keyword in self.keywords


def parse_variant(
    arg: str | None,
    config_name: str,
    keywords: Iterable[str] = ("smoke",),
    tasks: Callable[[str], bool] | None = None,
    tasks_known: str = "",
) -> Variant:
    """Parses a config's ARG: keywords and at most one task id, comma-separated, any order.

    Every config file reads its variants through this one parser, so `:smoke`,
    `:Hopper-v4`, `:Hopper-v4,smoke` and `:lstm,smoke` mean the same everywhere.

    Args:
      arg: the text after the colon of `--config=FILE:ARG` (None: no variant).
      config_name: the config's name in messages, e.g. "ppo_mujoco".
      keywords: the variant names the config knows, e.g. ("smoke", "lstm").
      tasks: which task ids the config accepts (None: it names its own task).
      tasks_known: how the message describes the accepted task ids.

    Raises:
      ValueError: "unknown variant 'X' of NAME (known: ...)" for anything else.
    """
    keywords = tuple(keywords)
    chosen, task = set(), None
    for option in [] if arg is None else [o.strip() for o in arg.split(",")]:
        if option in keywords:
            chosen.add(option)
        elif tasks is not None and task is None and option and tasks(option):
            task = option
        else:
            known = ", ".join(keywords) + (f", or {tasks_known}" if tasks is not None else "")
            raise ValueError(f"unknown variant {option!r} of {config_name} (known: {known})")
    return Variant(frozenset(chosen), task)


def atari_game(option: str) -> bool:
    """A `parse_variant` task test for Atari games: ids ending in -v5 (e.g. Pong-v5).

    Only the form is checked here, so a config loads without envpool; the id itself is
    checked with the rest of the config (an unknown game fails naming close matches).
    """
    return option.endswith("-v5")


# gymnax's MinAtar games, by the short names the MinAtar configs' `:GAME` takes.
MINATAR_GAMES = {
    game: f"gymnax:{game}-MinAtar"
    for game in ("Breakout", "Asterix", "Freeway", "SpaceInvaders", "Seaquest")
}


def minatar_variant(
    arg: str | None, config_name: str, keywords: Iterable[str] = ("smoke",)
) -> tuple[Variant, str]:
    """A MinAtar config's `:GAME[,KEYWORD...]` parsed (`keywords`: the variants it knows
    besides the game): the variant and its game's gymnax id (Breakout when none is named)."""
    variant = parse_variant(
        arg,
        config_name,
        keywords,
        tasks=MINATAR_GAMES.__contains__,
        tasks_known=f"a MinAtar game: {', '.join(MINATAR_GAMES)}",
    )
    return variant, MINATAR_GAMES[variant.task or "Breakout"]


def jax_suite_tasks(tasks: Iterable[str]) -> Callable[[str], bool]:
    """A `parse_variant` task test for an Anakin config: one of `tasks`.

    The config lists its suite's tasks itself, so it loads without importing the suite
    (some import for seconds); tests/test_config_variants.py checks each list against the
    installed suite's registry.
    """
    known = frozenset(tasks)
    return known.__contains__


def envpool_tasks(
    *families: str, box_actions: bool = False, vector_observations: bool = False
) -> Callable[[str], bool]:
    """A `parse_variant` task test: an envpool task id of one of `families`.

    Args:
      families: family names as `sebulba.environments.envpool_registry.SUPPORTED_FAMILIES`
        gives them, e.g. "MuJoCo".
      box_actions: accept only tasks whose actions are a Box (continuous control).
      vector_observations: accept only tasks that observe one vector (no images, dicts).
    """

    def accepts(env_id: str) -> bool:
        # envpool loads only when a config is given a task id.
        from sebulba.environments import envpool_pools

        return envpool_pools.is_task_of(
            env_id, families, box_actions=box_actions, vector_observations=vector_observations
        )

    return accepts


def continuous_control_tasks() -> Callable[[str], bool]:
    """A `parse_variant` task test: an envpool task with Box actions and one vector
    observation (every MuJoCo task, the continuous Box2D and classic-control ones,
    MetaWorld, MyoSuite, Gymnasium Robotics and MuJoCo Playground's vector tasks)."""
    return envpool_tasks(
        "MuJoCo",
        "Box2D",
        "classic control",
        "MetaWorld",
        "MyoSuite",
        "Gymnasium Robotics",
        "MuJoCo Playground",
        box_actions=True,
        vector_observations=True,
    )


# Brax's registry (brax 0.14), for the Brax configs' `:TASK`; tests/test_config_variants.py
# keeps it in step with the suite.
BRAX_TASKS = (
    "ant",
    "fast",
    "halfcheetah",
    "hopper",
    "humanoid",
    "humanoidstandup",
    "inverted_pendulum",
    "inverted_double_pendulum",
    "pusher",
    "reacher",
    "swimmer",
    "walker2d",
)


def brax_variant(arg: str | None, config_name: str) -> tuple[Variant, str]:
    """A Brax config's `:TASK[,smoke]` parsed: the variant and its task's env id
    (`brax:inverted_pendulum`, which learns in minutes on a CPU, when no task is named)."""
    variant = parse_variant(
        arg,
        config_name,
        tasks=jax_suite_tasks(BRAX_TASKS),
        tasks_known="a Brax task such as inverted_pendulum, hopper or ant",
    )
    return variant, f"brax:{variant.task or 'inverted_pendulum'}"
