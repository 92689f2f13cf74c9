"""Evaluates a run's checkpoint: N full episodes, deterministic for a seed.

    python -m sebulba.evaluate --workdir=DIR [--checkpoint=UPDATE] [--episodes=N] [--seed=S]
                               [--greedy] [--animation=FILE.gif] [--max_steps=T]
                               [--levels=train,test] [--opponent=NAME]

Loads the policy of the newest valid checkpoint of `DIR/checkpoints` (or UPDATE) onto one
local device with `sebulba.policy.load_policy`, and plays it in envpool envs with the
run's env settings (for Atari the Machado et al. 2018 protocol of
`sebulba.environments.envpool_pools`): the agent's `act`, which samples actions, or with
`--greedy` its `act_greedy`, the most likely action. Episode i runs in its own env, seeded
from (seed, i), with action keys from (seed, step, i): every return depends only on the
checkpoint, the seed and i, not on how many episodes run side by side. Each env counts its
first complete episode only, so short episodes are not over-represented.

Writes `DIR/eval.json` with mean, std (population), min and max return, the episode
count, the checkpoint and whether actions were greedy; for Atari also the
human-normalized score (score - random) / (human - random) of Mnih et al. (2015), with
the Atari-57 reference scores of `sebulba.experiments.atari_scores`. `--animation` writes episode 0
as a GIF of the env's own RGB rendering (the Atari game screen, a drawing for other
tasks), played at real-time speed. Every supported family renders headless; MuJoCo and
dm_control through EGL (`sebulba.environments.system_libraries.check_rendering` tries
it first, so a machine without EGL fails in one line before any work). `--max_steps=T`
ends every episode after T agent steps. A task that flags success in its step `info` (Meta-World's
`success`, Gymnasium Robotics' `is_success`, MyoSuite's `solved`) also gets
`success_rate`, the share of episodes in which the flag was set at some step (Meta-World's
convention; Gymnasium Robotics' HER papers read it at the last step), and `successes`.

A multi-task run (`env.ids`) plays `--episodes` episodes of every task, each task in its
own envs with the same seeds, and writes those fields per task under `tasks` (task id ->
fields), with `mean_return` over all tasks, `episodes` in all, `env_ids` and, when every
task is an Atari-57 game, the median and mean human-normalized score over the tasks
(`atari_median_hns`, `atari_mean_hns`), and when every task flags success the mean
`success_rate` over the tasks (Meta-World MT10's figure). `--animation=clip.gif` then
writes one GIF per task, `clip-<task id>.gif`.

`--levels` (Procgen) plays the run's training levels (`train`: its `env.kwargs`
num_levels and start_level), levels it never trained on (`test`: every level from
start_level + num_levels up, Cobbe et al. 2020's test distribution less the training
levels), or both (`--levels=train,test`), `--episodes` episodes each with the same seeds.
eval.json then holds each set's fields, with its `start_level` and `num_levels`, under
`levels` (name -> fields), the `generalization_gap` (train minus test mean return) when
both are played, and `mean_return` and `episodes` at the top level (the mean on the test
levels when they are played, else on the training levels; episodes over all sets); a
multi-task run writes that per task under `tasks`. A run that trained on every level
(num_levels 0) has no test levels, and a task of another family no levels: either is
refused in one line before any work. Without `--levels` nothing changes.

A run on a JAX-native env (Anakin, `env.id` = `SUITE:TASK`) plays its episodes with the
`JaxEnv` in one jitted program (`sebulba.anakin.episodes`) under the same contract, the
envs keyed from (seed, step, i) by an evaluation stream of their own, and writes the same
fields. `--animation` is refused for it in one line: the JAX suites have no common
renderer.

A run on a two-player game (AlphaZero's self-play) scores 1 for every decisive game,
whoever won. `--opponent=NAME` (`random`, `one_ply_greedy`, or `exact` for tic-tac-toe:
`sebulba.anakin.matches.OPPONENTS`) instead plays `--episodes` games (even) against that
player, moving first in half of them and second in the other half, and writes the
policy's wins, draws and losses on each side (`moving_first`, `moving_second`) and its
overall `win_rate`, `draw_rate` and `loss_rate`. Another run refuses the flag in one line.
"""

from __future__ import annotations

import functools
import logging as std_logging
import math
import os
import sys
from collections.abc import Sequence
from typing import Any

import jax
import ml_collections
import numpy as np
from absl import app, flags

from sebulba import random_streams
from sebulba.anakin import episodes as anakin_episodes
from sebulba.anakin import suites as anakin_suites
from sebulba.config import flag_errors
from sebulba.environments import envpool_pools, envpool_registry, system_libraries, tasks
from sebulba.environments import episodes as episodes_lib
from sebulba.environments.env_config import env_kwargs
from sebulba.errors import ConfigError
from sebulba.experiments.atari_scores import RANDOM_AND_HUMAN_SCORES, human_normalized_score
from sebulba.policy import Policy, PolicyError, load_policy, load_run_config
from sebulba.runtime import platforms
from sebulba.runtime.metrics import write_json

# Rendered screens wider than this are shrunk by an integer factor (classic control
# draws 600x400); Atari's 160-pixel game screen is kept as it is.
_MAX_ANIMATION_WIDTH = 320
_MAX_GIF_DELAY_MS = 655_350  # GIF stores each frame's delay in 1/100 s in 16 bits.
# `--levels`: Procgen's level sets. envpool draws each episode's level uniformly from
# [start_level, start_level + num_levels), bounds held in C ints.
LEVEL_SETS = ("train", "test")
_MAX_LEVEL = 2**31 - 1


class EvaluationError(Exception):
    """The workdir cannot be evaluated; the message says why in one line."""


# The `info` entries by which envpool tasks say a goal was reached: Meta-World's
# `success`, Gymnasium Robotics' `is_success`, MyoSuite's `solved`.
SUCCESS_INFO_KEYS = ("success", "is_success", "solved")


def success_info_key(info: dict[str, Any]) -> str | None:
    """The entry of a step's `info` that flags success, or None if the task has none."""
    return next((key for key in SUCCESS_INFO_KEYS if key in info), None)


def run_episodes(
    policy: Policy,
    *,
    episodes: int,
    seed: int,
    num_envs: int,
    record_first: bool = False,
    env_config: ml_collections.ConfigDict | None = None,
    max_steps: int = 0,
) -> tuple[np.ndarray, np.ndarray, list[Any], np.ndarray | None]:
    """Plays `episodes` complete episodes with `policy`, keys from (seed, step, episode).

    Args:
      env_config: the `env` section of the task to play (one task); None: the run's own,
        `policy.config.env` (a single-task run).
      max_steps: ends every episode after this many agent steps (as a truncation);
        0: only the env ends them.

    Returns:
      returns [episodes] (raw), lengths [episodes] (agent steps), and, if
      `record_first`, episode 0's rendered screens (PIL images; its first screen and the
      one after every step), and successes [episodes] (bool: the task's success flag,
      `SUCCESS_INFO_KEYS`, was set at some step of the episode; None for a task without
      one). A JAX env's episodes (`policy.jax_env`) are played by
      `sebulba.anakin.episodes`, with no screens and no success flag.

    Raises:
      EvaluationError: `record_first` for a JAX env, or a screen that cannot be drawn.
    """
    env_config = policy.config.env if env_config is None else env_config
    if policy.jax_env is not None:
        if record_first:
            raise EvaluationError(_jax_animation_refusal(env_config.id))
        returns, lengths = anakin_episodes.play_episodes(
            policy,
            episodes=episodes,
            seed=seed,
            batch_size=num_envs,
            max_steps=max_steps,
            jax_env=anakin_suites.make_env(env_config.id),  # This task's (joint runs).
        )
        return returns, lengths, [], None
    base = random_streams.evaluation_env_seed_base(seed)
    returns, lengths = np.zeros(episodes), np.zeros(episodes, np.int64)
    successes, has_success = np.zeros(episodes, bool), False
    frames = []
    for first in range(0, episodes, num_envs):
        ids = np.arange(first, min(first + num_envs, episodes))
        recording = record_first and first == 0
        envs = envpool_pools.make_envs(env_config, len(ids), seed=base + first, render=recording)
        obs, _ = envs.reset()
        policy.reset()  # A recurrent policy starts these episodes from its initial carry.
        if recording:
            frames.append(_render(envs))
        running = np.ones(len(ids), bool)
        # Envs that ended a life but play the game on (Atari's episodic_life): the next
        # step is envpool's reset, where a recurrent policy restarts, as in training.
        starts = np.zeros(len(ids), bool)
        step = 0
        while running.any():
            actions = policy.actions(
                obs, step=step, row_ids=ids.astype(np.int32), episode_starts=starts
            )
            obs, rewards, terminations, truncations, info = envs.step(
                policy.env_spec.action.to_env(actions)
            )
            if recording and running[0]:  # The screen this step of episode 0 led to.
                frames.append(_render(envs))
            key = success_info_key(info)
            if key is not None:
                has_success = True
                successes[ids] |= running & (np.asarray(info[key]) > 0)
            returns[ids] += np.where(running, rewards, 0.0)
            lengths[ids] += running
            starts = np.logical_or(terminations, truncations)
            running &= ~np.logical_or(episodes_lib.game_overs(terminations, info), truncations)
            step += 1
            if step == max_steps:
                running[:] = False
        envs.close()
    return returns, lengths, frames, successes if has_success else None


def _render(envs):
    """Env 0's screen as an animation frame; a failure to draw it is one line."""
    try:
        screen = envs.render(env_ids=[0])[0]
    except RuntimeError as error:
        raise EvaluationError(f"cannot render the env: {error}") from None
    return _animation_frame(screen)


def evaluate_against(
    workdir: str,
    opponent: str,
    *,
    checkpoint: int | None = None,
    games: int = 10,
    seed: int = 0,
    greedy: bool = False,
) -> dict[str, Any]:
    """Plays a two-player game's checkpoint against `opponent`; writes and returns the
    `eval.json` payload (see the module docstring).

    Raises:
      EvaluationError: no config or checkpoint, a run that is not on a two-player game,
        an unknown opponent, or an odd number of games.
    """
    from sebulba.anakin import matches  # JAX-level players: only this flag needs them.

    if opponent not in matches.OPPONENTS:
        raise EvaluationError(
            f"--opponent {opponent!r} is unknown: use one of {', '.join(matches.OPPONENTS)}"
        )
    if games < 2 or games % 2:
        raise EvaluationError(f"--episodes ({games}) must be even and >= 2 against an opponent")
    workdir = os.path.abspath(workdir)
    try:
        policy = load_policy(workdir, checkpoint, greedy, seed=seed)
    except PolicyError as error:
        raise EvaluationError(str(error)) from None
    env = policy.jax_env
    if env is None or env.spec.game is None:
        raise EvaluationError(
            f"--opponent plays two-player games; {policy.task_ids[0]!r} is not one"
        )
    try:
        player_b = matches.OPPONENTS[opponent](env)
    except ValueError as error:
        raise EvaluationError(f"--opponent {opponent!r}: {error}") from None
    act = policy.agent.act_greedy if greedy else policy.agent.act
    if greedy:

        def player_a(obs, key):
            del key  # The greedy policy is deterministic.
            return act(policy.params, obs)
    else:

        def player_a(obs, key):
            keys = jax.random.split(key, jax.tree.leaves(obs)[0].shape[0])
            return act(policy.params, obs, keys)[0]

    results = matches.play_matches(env, player_a, player_b, games, seed=seed).as_dict()
    sides = (results["moving_first"], results["moving_second"])
    result = {
        "env_id": env.spec.env_id,
        "opponent": opponent,
        "games": games,
        **results,
        **{
            f"{outcome}_rate": sum(side[counted] for side in sides) / games
            for outcome, counted in (("win", "wins"), ("draw", "draws"), ("loss", "losses"))
        },
        "checkpoint": policy.checkpoint,
        "global_step": policy.global_step,
        "greedy": greedy,
        "seed": seed,
    }
    write_json(os.path.join(workdir, "eval.json"), result)
    return result


def evaluate(
    workdir: str,
    *,
    checkpoint: int | None = None,
    episodes: int = 10,
    seed: int = 0,
    num_envs: int = 16,
    greedy: bool = False,
    animation: str | None = None,
    max_steps: int = 0,
    levels: Sequence[str] = (),
) -> dict[str, Any]:
    """Evaluates a checkpoint of `workdir`; writes and returns the `eval.json` payload.

    `max_steps` > 0 ends every episode after that many agent steps. `levels`, names of
    `LEVEL_SETS`, plays each of a Procgen run's level sets (module docstring).

    Raises:
      EvaluationError: no config, no (valid) checkpoint, a task this machine cannot
        render for `animation`, levels a run does not have, or bad arguments.
    """
    if episodes < 1 or num_envs < 1:
        raise EvaluationError(f"--episodes ({episodes}) and --num_envs must be >= 1")
    if max_steps < 0:
        raise EvaluationError(f"--max_steps ({max_steps}) must be >= 0 (0: no limit)")
    levels = _check_level_names(levels)
    workdir = os.path.abspath(workdir)
    try:
        if levels:
            run_env = load_run_config(workdir).env
            for task_id in tasks.task_ids(run_env):  # Refused before the policy loads.
                for name in levels:
                    level_env_config(tasks.task_env_config(run_env, task_id), name)
        if animation is not None:
            _check_animation_target(animation)
            for task_id in tasks.task_ids(load_run_config(workdir).env):
                if envpool_registry.is_jax_env(task_id):
                    raise EvaluationError(_jax_animation_refusal(task_id))
                system_libraries.check_rendering(task_id)
        policy = load_policy(workdir, checkpoint, greedy, seed=seed)
    except (PolicyError, system_libraries.RenderingError) as error:
        raise EvaluationError(str(error)) from None
    ids = tasks.task_ids(policy.config.env)
    run = {
        "greedy": greedy,
        "checkpoint": policy.checkpoint,
        "checkpoint_path": policy.checkpoint_path,
        "global_step": policy.global_step,
        "env_id": ids[0],
        "agent": policy.config.agent.name,
        "seed": seed,
    }
    if levels:
        evaluate_one = functools.partial(_evaluate_levels, levels=levels)
    else:
        evaluate_one = _evaluate_task
    if len(ids) == 1:
        task = evaluate_one(policy, ids[0], episodes, seed, num_envs, animation, max_steps)
        result = {**task, **run} if not levels else _levels_first(task, run)
        write_json(os.path.join(workdir, "eval.json"), result)
        return result
    per_task = {
        task_id: evaluate_one(
            policy,
            task_id,
            episodes,
            seed,
            num_envs,
            _task_animation(animation, task_id),
            max_steps,
        )
        for task_id in ids
    }
    result = {
        # Every task plays as many episodes: this is also the mean over all of them.
        "mean_return": float(np.mean([task["mean_return"] for task in per_task.values()])),
        "episodes": sum(task["episodes"] for task in per_task.values()),
        **run,
        "env_ids": list(ids),
    }
    rates = [task.get("success_rate") for task in per_task.values()]
    if all(rate is not None for rate in rates):  # Meta-World's MT10 reports this mean.
        result["success_rate"] = float(np.mean(rates))
    scores = [task.get("human_normalized_score") for task in per_task.values()]
    if all(score is not None for score in scores):  # Every task is an Atari-57 game.
        result["atari_median_hns"] = float(np.median(scores))
        result["atari_mean_hns"] = float(np.mean(scores))
    result["tasks"] = per_task
    write_json(os.path.join(workdir, "eval.json"), result)
    return result


def _evaluate_task(
    policy: Policy,
    task_id: str,
    episodes: int,
    seed: int,
    num_envs: int,
    animation: str | None,
    max_steps: int,
    env_config: ml_collections.ConfigDict | None = None,
) -> dict[str, Any]:
    """The returns of `episodes` episodes of one task: the fields of a single-task eval.json.

    `env_config`: the task's env section to play (None: the run's, for `task_id`).
    """
    if env_config is None:
        env_config = tasks.task_env_config(policy.config.env, task_id)
    returns, lengths, frames, successes = run_episodes(
        policy,
        episodes=episodes,
        seed=seed,
        num_envs=min(num_envs, episodes),
        record_first=animation is not None,
        env_config=env_config,
        max_steps=max_steps,
    )
    result = {
        "mean_return": float(np.mean(returns)),
        "std_return": float(np.std(returns)),
        "min_return": float(np.min(returns)),
        "max_return": float(np.max(returns)),
        "episodes": episodes,
        "mean_length": float(np.mean(lengths)),
        "returns": returns.tolist(),
        "lengths": lengths.tolist(),
    }
    if successes is not None:  # Meta-World's convention: success at any step of an episode.
        result["success_rate"] = float(np.mean(successes))
        result["successes"] = successes.tolist()
    normalized = human_normalized_score(task_id, result["mean_return"])
    if normalized is not None:
        result["human_normalized_score"] = normalized
        result["random_score"], result["human_score"] = RANDOM_AND_HUMAN_SCORES[task_id]
    if animation is not None:
        save_animation(frames, animation, frame_s=envpool_pools.real_time_step_s(task_id))
        result["animation"] = os.path.abspath(animation)
    return result


def _check_level_names(levels) -> tuple[str, ...]:
    """`--levels` as a tuple of distinct names of `LEVEL_SETS`, in the order given."""
    if isinstance(levels, str):
        levels = levels.split(",")
    names = tuple(name.strip() for name in levels or () if name.strip())
    for name in names:
        if name not in LEVEL_SETS:
            raise EvaluationError(
                f"--levels: unknown level set {name!r} (known: {', '.join(LEVEL_SETS)})"
            )
    if len(set(names)) != len(names):
        raise EvaluationError(f"--levels names a level set twice: {','.join(names)}")
    return names


def level_env_config(
    env_config: ml_collections.ConfigDict, name: str
) -> tuple[ml_collections.ConfigDict, int, int]:
    """One task's env section restricted to a Procgen level set, with its level range.

    Args:
      env_config: the `env` section of one task (`tasks.task_env_config`).
      name: "train" (the levels the run trained on: its own settings) or "test" (every
        level from its start_level + num_levels up to envpool's largest).

    Returns:
      (the env section to play, first level, number of levels).

    Raises:
      EvaluationError: the task is not Procgen, or the run left no level untrained.
    """
    task_id = env_config.id
    if envpool_registry.is_jax_env(task_id) or envpool_registry.family_name(task_id) != "Procgen":
        raise EvaluationError(
            f"--levels: {task_id} is not a Procgen task; level sets are Procgen's "
            "(env.kwargs num_levels and start_level)"
        )
    kwargs = env_kwargs(env_config)
    try:
        settings = envpool_pools.envpool_config(task_id, kwargs)
    except ConfigError as error:
        raise EvaluationError(str(error)) from None
    start, count = settings["start_level"], settings["num_levels"]
    if name == "train":
        return env_config, (0 if count <= 0 else start), (_MAX_LEVEL if count <= 0 else count)
    first = start + count
    if count <= 0 or first >= _MAX_LEVEL:
        raise EvaluationError(
            f"--levels=test: the run trained {task_id} on every level (env.kwargs "
            f"num_levels {count}, start_level {start}), so none is held out; train with "
            "e.g. --config.env.kwargs.num_levels=200 to test generalisation"
        )
    held_out = ml_collections.ConfigDict(env_config.to_dict())
    held_out.kwargs = ml_collections.ConfigDict(
        {**kwargs, "start_level": first, "num_levels": _MAX_LEVEL - first}
    )
    return held_out, first, _MAX_LEVEL - first


def _evaluate_levels(
    policy: Policy,
    task_id: str,
    episodes: int,
    seed: int,
    num_envs: int,
    animation: str | None,
    max_steps: int,
    *,
    levels: tuple[str, ...],
) -> dict[str, Any]:
    """One Procgen task played on each level set of `levels`, side by side.

    The first set is animated, if any is. Returns the task's fields: `mean_return` (on
    the test levels if played, else the training levels), `episodes` in all, `levels`
    (set -> its range and single-task fields) and, with both sets, `generalization_gap`.
    """
    env_config = tasks.task_env_config(policy.config.env, task_id)
    per_set = {}
    for index, name in enumerate(levels):
        level_config, first, count = level_env_config(env_config, name)
        fields = _evaluate_task(
            policy,
            task_id,
            episodes,
            seed,
            num_envs,
            animation if index == 0 else None,
            max_steps,
            env_config=level_config,
        )
        per_set[name] = {"start_level": first, "num_levels": count, **fields}
    headline = per_set["test" if "test" in per_set else "train"]
    result = {"mean_return": headline["mean_return"], "episodes": episodes * len(levels)}
    if len(per_set) == len(LEVEL_SETS):
        gap = per_set["train"]["mean_return"] - per_set["test"]["mean_return"]
        result["generalization_gap"] = float(gap)
    result["levels"] = per_set
    return result


def _levels_first(task: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """A single task's eval.json with level sets: the headline, the run, then the sets."""
    headline = {key: value for key, value in task.items() if key != "levels"}
    return {**headline, **run, "levels": task["levels"]}


def _jax_animation_refusal(task_id: str) -> str:
    return (
        f"--animation: {task_id} is a JAX env, and the JAX suites have no common renderer: "
        "evaluate it without --animation"
    )


def _task_animation(animation: str | None, task_id: str) -> str | None:
    """A multi-task run's GIF of one task: `clip.gif` -> `clip-<task id>.gif`.

    A "/" in the id (`MetaWorld/Reach-v3`) becomes "_": the GIF stays beside `clip.gif`.
    """
    if animation is None:
        return None
    stem, extension = os.path.splitext(animation)
    return f"{stem}-{task_id.replace('/', '_')}{extension or '.gif'}"


def _check_animation_target(path: str) -> None:
    """Fails before any work if the GIF cannot be written: no Pillow, no such folder."""
    try:
        import PIL  # noqa: F401
    except ImportError:
        raise EvaluationError("--animation needs Pillow: pip install pillow") from None
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise EvaluationError(f"--animation {path}: {folder} is not a writable directory")


def _animation_frame(screen: np.ndarray):
    """An RGB screen [H, W, 3] uint8 as a small palette image (GIFs have 256 colours)."""
    from PIL import Image

    image = Image.fromarray(screen)
    shrink = math.ceil(image.width / _MAX_ANIMATION_WIDTH)
    if shrink > 1:
        image = image.reduce(shrink)
    return image.quantize()  # Now: ~4x less memory for a long episode's frames.


def save_animation(frames: list[Any], path: str, *, frame_s: float) -> None:
    """Writes frames (PIL images) as an animated GIF showing each for `frame_s` seconds.

    A run of identical frames becomes one GIF frame shown for the run's time, at most
    GIF's longest delay (655.35 s): a policy stuck on a still screen (e.g. never pressing
    FIRE after a lost life) would otherwise overflow the delay field.
    """
    # GIF delays are in 1/100 s and viewers slow down anything below 0.02 s.
    duration_ms = max(20, 10 * round(100 * frame_s))
    longest_ms = _MAX_GIF_DELAY_MS - _MAX_GIF_DELAY_MS % duration_ms
    distinct, durations = [], []
    for frame in frames:
        if distinct and durations[-1] < longest_ms and _same_image(distinct[-1], frame):
            durations[-1] += duration_ms
        elif distinct and _same_image(distinct[-1], frame):
            continue  # Past the longest delay: the still screen is cut short.
        else:
            distinct.append(frame)
            durations.append(duration_ms)
    distinct[0].save(path, save_all=True, append_images=distinct[1:], duration=durations, loop=0)


def _same_image(a, b) -> bool:
    return a.size == b.size and a.tobytes() == b.tobytes() and a.getpalette() == b.getpalette()


_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory holding config.json, checkpoints/.")
_CHECKPOINT = flags.DEFINE_integer(
    "checkpoint", None, "UPDATE: the checkpoint saved after this update (default: the newest)."
)
_EPISODES = flags.DEFINE_integer("episodes", 10, "Complete episodes to play.")
_SEED = flags.DEFINE_integer("seed", 0, "Seeds the env seeds and action keys.")
_NUM_ENVS = flags.DEFINE_integer(
    "num_envs", 16, "Episodes played side by side (no effect on results)."
)
_MAX_STEPS = flags.DEFINE_integer(
    "max_steps", 0, "End every episode after this many agent steps (0: only the env ends it)."
)
_GREEDY = flags.DEFINE_bool(
    "greedy", False, "Act with the most likely action instead of sampling from the policy."
)
_ANIMATION = flags.DEFINE_string(
    "animation",
    None,
    "Also write episode 0, as the env renders it, as a GIF to this path (a multi-task run: "
    "one GIF per task, the task id added to the file name).",
)


_OPPONENT = flags.DEFINE_string(
    "opponent",
    None,
    "A two-player game's run: play --episodes games against this player (random, "
    "one_ply_greedy, exact for tic-tac-toe), half of them moving first.",
)
_LEVELS = flags.DEFINE_list(
    "levels",
    None,
    "Procgen: play the run's training levels (train), levels it never trained on (test) "
    "or both (train,test), reported side by side under `levels` in eval.json.",
)


def parse_flags(argv: list[str]) -> list[str]:
    """absl flag parsing that reports a bad or missing flag in one stderr line (status 2)."""
    try:
        return flags.FLAGS(argv)
    except flags.Error as error:
        print(f"sebulba.evaluate: {flag_errors.one_line(error)}", file=sys.stderr)
        sys.exit(2)


def main(argv: list[str]) -> None:
    if len(argv) > 1:  # One line, as a bad flag gets (parse_flags), not absl's usage text.
        print(f"sebulba.evaluate: unexpected arguments: {' '.join(argv[1:])}", file=sys.stderr)
        sys.exit(2)
    if _OPPONENT.value is not None:
        _main_against(_OPPONENT.value)
        return
    try:
        result = evaluate(
            _WORKDIR.value,
            checkpoint=_CHECKPOINT.value,
            episodes=_EPISODES.value,
            seed=_SEED.value,
            num_envs=_NUM_ENVS.value,
            greedy=_GREEDY.value,
            animation=_ANIMATION.value,
            max_steps=_MAX_STEPS.value,
            levels=_LEVELS.value or (),
        )
    except EvaluationError as error:
        # A refusal before any episode, as main's config errors: the same status, 2.
        print(f"sebulba.evaluate: {error}", file=sys.stderr)
        sys.exit(2)
    policy = (
        f"{'greedy' if result['greedy'] else 'sampling'} policy of "
        f"checkpoint {result['checkpoint']} (step {result['global_step']})"
    )
    path = os.path.join(_WORKDIR.value, "eval.json")  # As the user named it.
    if "levels" in result:
        print(f"{policy} on {result['env_id']}:")
        _print_levels(result, "  ")
        print(f"wrote {path}")
        return
    if "tasks" not in result:
        print(f"{policy} on {_task_line(result['env_id'], result)}; wrote {path}")
        if "animation" in result:
            print(f"animation of episode 0 ({result['lengths'][0]} steps): {result['animation']}")
        return
    print(f"{policy} on {len(result['tasks'])} tasks:")
    for task_id, task in result["tasks"].items():
        if "levels" in task:
            print(f"  {task_id}:")
            _print_levels(task, "    ")
            continue
        print(f"  {_task_line(task_id, task)}")
        if "animation" in task:
            print(f"    animation of episode 0 ({task['lengths'][0]} steps): {task['animation']}")
    mean = result["mean_return"]
    line = f"mean return over tasks {mean:.{1 if abs(mean) >= 10 else 3}f}"
    if "success_rate" in result:
        line += f", mean success rate {result['success_rate']:.3f}"
    if "atari_median_hns" in result:
        line += (
            f", human-normalized median {result['atari_median_hns']:.3f}, "
            f"mean {result['atari_mean_hns']:.3f}"
        )
    print(f"{line}; wrote {path}")


def _main_against(opponent: str) -> None:
    try:
        result = evaluate_against(
            _WORKDIR.value,
            opponent,
            checkpoint=_CHECKPOINT.value,
            games=_EPISODES.value,
            seed=_SEED.value,
            greedy=_GREEDY.value,
        )
    except EvaluationError as error:
        print(f"sebulba.evaluate: {error}", file=sys.stderr)
        sys.exit(2)
    policy = "greedy" if result["greedy"] else "sampling"
    print(
        f"{policy} policy of checkpoint {result['checkpoint']} (step {result['global_step']}) "
        f"on {result['env_id']} against {opponent}, {result['games']} games:"
    )
    for side in ("moving_first", "moving_second"):
        fields = result[side]
        print(
            f"  {side.replace('_', ' ')}: {fields['wins']} wins, {fields['draws']} draws, "
            f"{fields['losses']} losses"
        )
    path = os.path.join(_WORKDIR.value, "eval.json")
    print(
        f"win rate {result['win_rate']:.3f}, draw rate {result['draw_rate']:.3f}, "
        f"loss rate {result['loss_rate']:.3f}; wrote {path}"
    )


def _print_levels(task: dict, indent: str) -> None:
    """One line per level set of a task, then its generalisation gap."""
    for name, fields in task["levels"].items():
        first, count = fields["start_level"], fields["num_levels"]
        last = "up" if first + count >= _MAX_LEVEL else f"to {first + count - 1}"
        print(f"{indent}{_task_line(f'{name} levels ({first} {last})', fields)}")
        if "animation" in fields:
            steps = fields["lengths"][0]
            print(f"{indent}  animation of episode 0 ({steps} steps): {fields['animation']}")
    if "generalization_gap" in task:
        print(f"{indent}generalization gap (train - test): {task['generalization_gap']:.3f}")


def _task_line(task_id: str, task: dict) -> str:
    """One task's results in a line: episodes, return and spread, human-normalized score."""
    # Returns within +-10 (MiniGrid's are in [0, 1]) would all print alike with 1 decimal.
    digits = 1 if max(abs(task["min_return"]), abs(task["max_return"])) >= 10 else 3
    line = (
        f"{task_id}: {task['episodes']} episodes, return "
        f"{task['mean_return']:.{digits}f} +- {task['std_return']:.{digits}f} "
        f"(min {task['min_return']:.{digits}f}, max {task['max_return']:.{digits}f})"
    )
    if "success_rate" in task:
        line += f", success rate {task['success_rate']:.3f}"
    if "human_normalized_score" in task:
        line += f", human-normalized {task['human_normalized_score']:.3f}"
    return line


if __name__ == "__main__":
    # Backend probing logs "Unable to initialize backend 'tpu'" on every machine without
    # a TPU; it is noise before the one line of results.
    std_logging.getLogger("jax._src.xla_bridge").setLevel(std_logging.WARNING)
    flags.mark_flag_as_required("workdir")
    platforms.skip_absent_accelerators()  # Before JAX starts: no libtpu noise on a CPU.
    app.run(main, flags_parser=parse_flags)
