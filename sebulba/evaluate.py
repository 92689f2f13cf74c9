"""Evaluates a run's checkpoint: N full episodes, deterministic for a seed.

    python -m sebulba.evaluate --workdir=DIR [--checkpoint=UPDATE] [--episodes=N] [--seed=S]
                               [--greedy] [--animation=FILE.gif]

Loads the policy of the newest valid checkpoint of `DIR/checkpoints` (or UPDATE) onto
one local device with `sebulba.policy.load_policy`, and plays it in envpool envs with
the run's env settings (for Atari the Machado et al. 2018 protocol of `sebulba.envs`):
the agent's `act`, which samples actions, or with `--greedy` its `act_greedy`, the most
likely action. Episode i runs in its own env, seeded from (seed, i), with action keys
from (seed, step, i): every return depends only on the checkpoint, the seed and i, not
on how many episodes run side by side. Each env counts its first complete episode only,
so short episodes are not over-represented.

Writes `DIR/eval.json` with mean, std (population), min and max return, the episode
count, the checkpoint and whether actions were greedy; for Atari also the
human-normalized score (score - random) / (human - random) of Mnih et al. (2015), with
the Atari-57 reference scores of `sebulba.atari_scores`. `--animation` writes episode 0
as a GIF of the env's own RGB rendering (the Atari game screen, a drawing for other
tasks), played at real-time speed.
"""

from __future__ import annotations

import logging as std_logging
import math
import os
import sys
from typing import Any

import numpy as np
from absl import app, flags

from sebulba import envs as envs_lib
from sebulba import flag_errors, random_streams
from sebulba.atari_scores import RANDOM_AND_HUMAN_SCORES, human_normalized_score
from sebulba.metrics import write_json
from sebulba.policy import Policy, PolicyError, load_policy

# Rendered screens wider than this are shrunk by an integer factor (classic control
# draws 600x400); Atari's 160-pixel game screen is kept as it is.
_MAX_ANIMATION_WIDTH = 320
_MAX_GIF_DELAY_MS = 655_350  # GIF stores each frame's delay in 1/100 s in 16 bits.


class EvaluationError(Exception):
    """The workdir cannot be evaluated; the message says why in one line."""


def run_episodes(
    policy: Policy,
    *,
    episodes: int,
    seed: int,
    num_envs: int,
    record_first: bool = False,
) -> tuple[np.ndarray, np.ndarray, list[Any]]:
    """Plays `episodes` complete episodes with `policy`, keys from (seed, step, episode).

    Returns:
      returns [episodes] (raw), lengths [episodes] (agent steps), and, if
      `record_first`, episode 0's rendered screens (PIL images; its first screen and the
      one after every step).
    """
    base = random_streams.evaluation_env_seed_base(seed)
    returns, lengths = np.zeros(episodes), np.zeros(episodes, np.int64)
    frames = []
    for first in range(0, episodes, num_envs):
        ids = np.arange(first, min(first + num_envs, episodes))
        recording = record_first and first == 0
        envs = envs_lib.make_envs(policy.config.env, len(ids), seed=base + first, render=recording)
        obs, _ = envs.reset()
        policy.reset()  # A recurrent policy starts these episodes from its initial carry.
        if recording:
            frames.append(_animation_frame(envs.render(env_ids=[0])[0]))
        running = np.ones(len(ids), bool)
        step = 0
        while running.any():
            actions = policy.actions(obs, step=step, row_ids=ids.astype(np.int32))
            obs, rewards, terminations, truncations, _ = envs.step(
                policy.env_spec.action.to_env(actions)
            )
            if recording and running[0]:  # The screen this step of episode 0 led to.
                frames.append(_animation_frame(envs.render(env_ids=[0])[0]))
            returns[ids] += np.where(running, rewards, 0.0)
            lengths[ids] += running
            running &= ~np.logical_or(terminations, truncations)
            step += 1
        envs.close()
    return returns, lengths, frames


def evaluate(
    workdir: str,
    *,
    checkpoint: int | None = None,
    episodes: int = 10,
    seed: int = 0,
    num_envs: int = 16,
    greedy: bool = False,
    animation: str | None = None,
) -> dict[str, Any]:
    """Evaluates a checkpoint of `workdir`; writes and returns the `eval.json` payload.

    Raises:
      EvaluationError: no config, no (valid) checkpoint, or bad arguments.
    """
    if episodes < 1 or num_envs < 1:
        raise EvaluationError(f"--episodes ({episodes}) and --num_envs must be >= 1")
    if animation is not None:
        _check_animation_target(animation)
    workdir = os.path.abspath(workdir)
    try:
        policy = load_policy(workdir, checkpoint, greedy, seed=seed)
    except PolicyError as error:
        raise EvaluationError(str(error)) from None
    config = policy.config
    returns, lengths, frames = run_episodes(
        policy,
        episodes=episodes,
        seed=seed,
        num_envs=min(num_envs, episodes),
        record_first=animation is not None,
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
        "greedy": greedy,
        "checkpoint": policy.checkpoint,
        "checkpoint_path": policy.checkpoint_path,
        "global_step": policy.global_step,
        "env_id": config.env.id,
        "agent": config.agent.name,
        "seed": seed,
    }
    normalized = human_normalized_score(config.env.id, result["mean_return"])
    if normalized is not None:
        result["human_normalized_score"] = normalized
        result["random_score"], result["human_score"] = RANDOM_AND_HUMAN_SCORES[config.env.id]
    if animation is not None:
        step_s = envs_lib.real_time_step_s(config.env.id)
        save_animation(frames, animation, frame_s=step_s)
        result["animation"] = os.path.abspath(animation)
    write_json(os.path.join(workdir, "eval.json"), result)
    return result


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
_GREEDY = flags.DEFINE_bool(
    "greedy", False, "Act with the most likely action instead of sampling from the policy."
)
_ANIMATION = flags.DEFINE_string(
    "animation", None, "Also write episode 0, as the env renders it, as a GIF to this path."
)


def parse_flags(argv: list[str]) -> list[str]:
    """absl flag parsing that reports a bad or missing flag in one stderr line (status 2)."""
    try:
        return flags.FLAGS(argv)
    except flags.Error as error:
        print(f"sebulba.evaluate: {flag_errors.one_line(error)}", file=sys.stderr)
        sys.exit(2)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    try:
        result = evaluate(
            _WORKDIR.value,
            checkpoint=_CHECKPOINT.value,
            episodes=_EPISODES.value,
            seed=_SEED.value,
            num_envs=_NUM_ENVS.value,
            greedy=_GREEDY.value,
            animation=_ANIMATION.value,
        )
    except EvaluationError as error:
        print(f"sebulba.evaluate: {error}", file=sys.stderr)
        sys.exit(1)
    line = (
        f"{'greedy' if result['greedy'] else 'sampling'} policy of "
        f"checkpoint {result['checkpoint']} (step {result['global_step']}) on "
        f"{result['env_id']}: {result['episodes']} episodes, return "
        f"{result['mean_return']:.1f} +- {result['std_return']:.1f} "
        f"(min {result['min_return']:.1f}, max {result['max_return']:.1f})"
    )
    if "human_normalized_score" in result:
        line += f", human-normalized {result['human_normalized_score']:.3f}"
    print(f"{line}; wrote {os.path.join(os.path.abspath(_WORKDIR.value), 'eval.json')}")
    if "animation" in result:
        print(f"animation of episode 0 ({result['lengths'][0]} steps): {result['animation']}")


if __name__ == "__main__":
    # Backend probing logs "Unable to initialize backend 'tpu'" on every machine without
    # a TPU; it is noise before the one line of results.
    std_logging.getLogger("jax._src.xla_bridge").setLevel(std_logging.WARNING)
    flags.mark_flag_as_required("workdir")
    app.run(main, flags_parser=parse_flags)
