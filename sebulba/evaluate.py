"""Evaluates a run's checkpoint: N full episodes, deterministic for a seed.

    python -m sebulba.evaluate --workdir=DIR [--checkpoint=STEP] [--episodes=N] [--seed=S]

Rebuilds the agent from `DIR/config.json`, restores the newest valid checkpoint of
`DIR/checkpoints` (or STEP) onto one local device, and plays the agent's policy (its
`act`, which samples actions) in envpool envs with the run's env settings (for Atari the
Machado et al. 2018 protocol of `sebulba.envs`). Episode i runs in its own env, seeded
from (seed, i), with action keys from (seed, step, i): every return depends only on the
checkpoint, the seed and i, not on how many episodes run side by side. Each env counts
its first complete episode only, so short episodes are not over-represented.

Writes `DIR/eval.json` with mean, std (population), min and max return and the episode
count; for Atari also the human-normalized score (score - random) / (human - random)
of Mnih et al. (2015), with the Atari-57 reference scores of `sebulba.atari_scores`.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import jax
import ml_collections
import numpy as np
from absl import app, flags

from sebulba import checkpoint as ckpt_lib
from sebulba import envs as envs_lib
from sebulba import random_streams
from sebulba.agents import resolve_agent
from sebulba.atari_scores import RANDOM_AND_HUMAN_SCORES, human_normalized_score
from sebulba.errors import ConfigError
from sebulba.metrics import write_json
from sebulba.sizes import derive_sizes


class EvaluationError(Exception):
    """The workdir cannot be evaluated; the message says why in one line."""


def load_config(workdir: str) -> ml_collections.ConfigDict:
    """The run's resolved config, set up to run on this process's first device."""
    path = os.path.join(workdir, "config.json")
    if not os.path.exists(path):
        raise EvaluationError(f"{path} not found: {workdir} is not a sebulba workdir")
    with open(path, encoding="utf-8") as f:
        config = ml_collections.ConfigDict(json.load(f))
    # Evaluation runs on one device, whatever layout trained the checkpoint.
    config.mesh.actor_device_ids = (0,)
    config.mesh.learner_device_ids = (0,)
    return config


def run_episodes(
    act,
    params,
    env_config: ml_collections.ConfigDict,
    *,
    episodes: int,
    seed: int,
    num_envs: int,
    device: jax.Device,
    record_first: bool = False,
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Plays `episodes` complete episodes with `act(params, obs [B, ...], keys [B])`.

    Returns:
      returns [episodes] (raw), lengths [episodes] (agent steps), and the observations
      of episode 0 if `record_first`.
    """
    base = random_streams.evaluation_env_seed_base(seed)

    @jax.jit
    def policy(params, obs, episode_ids, step):
        return act(params, obs, random_streams.evaluation_keys(seed, step, episode_ids))[0]

    returns, lengths = np.zeros(episodes), np.zeros(episodes, np.int64)
    frames = []
    for first in range(0, episodes, num_envs):
        ids = np.arange(first, min(first + num_envs, episodes))
        envs = envs_lib.make_envs(env_config, len(ids), seed=base + first)
        ids_on_device = jax.device_put(ids.astype(np.int32), device)
        obs, _ = envs.reset()
        running = np.ones(len(ids), bool)
        step = 0
        while running.any():
            if record_first and first == 0 and running[0]:
                frames.append(np.asarray(obs[0]))
            obs_on_device, step_on_device = jax.device_put((obs, np.int32(step)), device)
            actions = policy(params, obs_on_device, ids_on_device, step_on_device)
            obs, rewards, terminations, truncations, _ = envs.step(np.asarray(actions))
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
    animation: str | None = None,
) -> dict[str, Any]:
    """Evaluates a checkpoint of `workdir`; writes and returns the `eval.json` payload.

    Raises:
      EvaluationError: no config, no (valid) checkpoint, or bad arguments.
    """
    if episodes < 1 or num_envs < 1:
        raise EvaluationError(f"--episodes ({episodes}) and --num_envs must be >= 1")
    workdir = os.path.abspath(workdir)
    config = load_config(workdir)
    directory = ckpt_lib.checkpoints_dir(workdir)
    if not ckpt_lib.list_steps(directory):
        raise EvaluationError(f"no checkpoint in {directory}: nothing to evaluate")
    device = jax.local_devices()[0]
    try:
        probe = envs_lib.make_envs(config.env, 1, seed=0)
        env_spec = envs_lib.env_spec_of(config.env, probe)
        probe.close()
        agent = resolve_agent(config.agent.name).make(config, env_spec, derive_sizes(config))
    except ConfigError as error:
        raise EvaluationError(f"cannot rebuild the agent from config.json: {error}") from None
    shapes = jax.eval_shape(agent.init, jax.random.key(config.seed))
    abstract = ckpt_lib.abstract_replicated(shapes, jax.sharding.SingleDeviceSharding(device))
    try:
        restored = ckpt_lib.restore(directory, abstract, step=checkpoint)
    except ValueError as error:
        raise EvaluationError(str(error)) from None
    if restored is None:
        raise EvaluationError(f"no valid checkpoint in {directory} (see the warnings above)")
    returns, lengths, frames = run_episodes(
        agent.act,
        agent.policy_params(restored.state),
        config.env,
        episodes=episodes,
        seed=seed,
        num_envs=min(num_envs, episodes),
        device=device,
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
        "checkpoint": restored.step,
        "checkpoint_path": restored.path,
        "global_step": restored.meta.get("global_step"),
        "env_id": config.env.id,
        "agent": config.agent.name,
        "seed": seed,
    }
    normalized = human_normalized_score(config.env.id, result["mean_return"])
    if normalized is not None:
        result["human_normalized_score"] = normalized
        result["random_score"], result["human_score"] = RANDOM_AND_HUMAN_SCORES[config.env.id]
    if animation is not None:
        save_animation(frames, animation)
        result["animation"] = os.path.abspath(animation)
    write_json(os.path.join(workdir, "eval.json"), result)
    return result


def save_animation(observations: list[np.ndarray], path: str) -> None:
    """Writes episode 0 as an animated GIF: Atari frames, or a drawn CartPole."""
    try:
        from PIL import Image, ImageDraw
    except ImportError:
        raise EvaluationError("--animation needs Pillow: pip install pillow") from None
    images = []
    for obs in observations:
        if obs.ndim == 3:  # Stacked Atari frames [4, 84, 84]: show the newest.
            images.append(Image.fromarray(obs[-1]).resize((168, 168), Image.NEAREST))
        elif obs.shape == (4,):  # CartPole: cart position and pole angle.
            image = Image.new("L", (240, 120), 255)
            draw = ImageDraw.Draw(image)
            cart_x, angle = 120 + obs[0] * 50, obs[2]
            draw.rectangle([cart_x - 15, 85, cart_x + 15, 100], fill=0)
            tip = (cart_x + 60 * np.sin(angle), 85 - 60 * np.cos(angle))
            draw.line([(cart_x, 85), tip], fill=100, width=4)
            images.append(image)
        else:
            raise EvaluationError(f"cannot draw observations of shape {obs.shape}")
    images[0].save(path, save_all=True, append_images=images[1:], duration=40, loop=0)


_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory holding config.json, checkpoints/.")
_CHECKPOINT = flags.DEFINE_integer(
    "checkpoint", None, "Update of the checkpoint (default: newest)."
)
_EPISODES = flags.DEFINE_integer("episodes", 10, "Complete episodes to play.")
_SEED = flags.DEFINE_integer("seed", 0, "Seeds the env seeds and action keys.")
_NUM_ENVS = flags.DEFINE_integer(
    "num_envs", 16, "Episodes played side by side (no effect on results)."
)
_ANIMATION = flags.DEFINE_string("animation", None, "Also write episode 0 as a GIF to this path.")


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
            animation=_ANIMATION.value,
        )
    except EvaluationError as error:
        print(f"sebulba.evaluate: {error}", file=sys.stderr)
        sys.exit(1)
    line = (
        f"checkpoint {result['checkpoint']} (step {result['global_step']}) on "
        f"{result['env_id']}: {result['episodes']} episodes, return "
        f"{result['mean_return']:.1f} +- {result['std_return']:.1f} "
        f"(min {result['min_return']:.1f}, max {result['max_return']:.1f})"
    )
    if "human_normalized_score" in result:
        line += f", human-normalized {result['human_normalized_score']:.3f}"
    print(f"{line}; wrote {os.path.join(os.path.abspath(_WORKDIR.value), 'eval.json')}")


if __name__ == "__main__":
    flags.mark_flag_as_required("workdir")
    app.run(main)
