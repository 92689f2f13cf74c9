"""Environment construction with envpool (Weng et al. 2022), in synchronous mode.

The accepted tasks are those of envpool's registry in the families of
`SUPPORTED_FAMILIES`: classic control, Box2D, MuJoCo (gymnasium tasks), the dm_control
suite, MiniGrid/BabyAI and Atari. Every family but Atari goes through one generic path
(envpool's defaults); `sebulba.spaces` describes and converts whatever spaces a task
has, and refuses in one line the ones it cannot represent.

Atari follows the evaluation protocol of Machado et al. (2018), as in the Cleanba paper:
sticky actions with probability 0.25, the full 18-action space, no life-loss signal, no
no-op starts, episodes capped at 108,000 frames, 84x84 grey frames (the max of the last
two of every 4 skipped frames), a 4-frame stack (`env.frame_stack`; 1 for recurrent agents,
as CleanRL's ppo_atari_lstm). Rewards are clipped to their sign for
learning while raw returns are reported. `env.use_fire_reset` presses FIRE after each
reset, as envpool does by default and Cleanba keeps (with the full action space that
means every game); Machado et al. do not, so the base config leaves it off.

`make_envs(..., render=True)` lets every supported family draw RGB screens; MuJoCo and
dm_control draw with OpenGL through EGL, headless, which needs the system's libEGL loaded
before envpool is imported (done on import of this module when it is installed) and a
Mesa EGL driver; `check_rendering` tries a task in a child process first.

Env seeds follow the global env index: env i of a pool whose first env has global
index g0 is seeded with `seed + g0 + i`, whatever thread or process steps it.

`SplitPool` steps an actor thread's envs as two fixed halves (two sync pools), so the
actor can run one half's policy while the other half's envs step (envpool's C++ threads
release the GIL): the overlap of simulation and inference of Weng et al. (2022), with
every step still returning every env of a half, in order.
"""

from __future__ import annotations

import ctypes
import dataclasses
import difflib
import functools
import subprocess
import sys
import tempfile
import warnings

import ml_collections
import numpy as np

from sebulba import spaces
from sebulba.errors import ConfigError

# envpool draws MuJoCo and dm_control scenes with OpenGL through EGL, which needs no display.
# MuJoCo looks its GL functions up once, when envpool is imported, among the libraries loaded
# into the process's global namespace, where envpool's own bundled EGL is not: unless the
# system's libEGL is loaded there first, the first render ends the process with a MuJoCo
# error and leaves MUJOCO_LOG.TXT in the current directory. Every other family draws on the
# CPU without OpenGL.
_EGL_FAMILIES = ("envpool.mujoco.gym", "envpool.mujoco.dmc")
_EGL_LIBRARY = "libEGL.so.1"
# The Debian/Ubuntu packages of EGL and Mesa's software renderer (llvmpipe).
EGL_APT_PACKAGES = "libegl1 libegl-mesa0 libgl1-mesa-dri"


def _preload_egl() -> str | None:
    """Loads the system's libEGL globally, before envpool; None, or why it could not."""
    if "envpool" in sys.modules:
        return "envpool was imported before sebulba.envs (import sebulba.envs first)"
    try:
        ctypes.CDLL(_EGL_LIBRARY, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return f"{_EGL_LIBRARY} is not installed (apt-get install -y {EGL_APT_PACKAGES})"
    return None


_EGL_MISSING = _preload_egl()

import envpool  # noqa: E402  (after the EGL library, see above)

# envpool's classic-control spaces are float64 boxes that gymnasium casts with a warning
# on every access; the cast is harmless.
warnings.filterwarnings("ignore", message=".*precision lowered by casting.*")

# envpool's registry module of each supported family -> its name in messages. Other
# families (procgen, vizdoom, robotics, ...) need settings or spaces not handled here.
SUPPORTED_FAMILIES = {
    "envpool.classic_control": "classic control",
    "envpool.box2d": "Box2D",
    "envpool.mujoco.gym": "MuJoCo",
    "envpool.mujoco.dmc": "dm_control",
    "envpool.minigrid": "MiniGrid/BabyAI",
    "envpool.atari": "Atari",
}
_ATARI_FAMILY = "envpool.atari"
FRAMES_PER_AGENT_STEP = 4  # Atari frame skip.
ATARI_FRAMES_PER_SECOND = 60  # The console's (NTSC) frame rate.
# Simulated seconds per step of the classic-control tasks (their integration time step);
# animations of other non-Atari tasks play at `_DEFAULT_STEP_S`.
_CLASSIC_CONTROL_STEP_S = {"CartPole-v1": 0.02, "Acrobot-v1": 0.2}
_DEFAULT_STEP_S = 0.02
_RENDER_PROBE = """
import ctypes, sys
ctypes.CDLL(sys.argv[2], mode=ctypes.RTLD_GLOBAL)
import envpool
pool = envpool.make(sys.argv[1], env_type="gymnasium", num_envs=1, batch_size=1,
                    render_mode="rgb_array")
pool.reset()
sys.exit(0 if pool.render(env_ids=[0]).any() else "rendered an all-black screen")
"""


class RenderingError(Exception):
    """A task cannot be rendered on this machine; the message says why in one line."""


@functools.cache
def envpool_families() -> dict[str, str]:
    """Every envpool task id -> the registry module of its family, e.g. "envpool.atari"."""
    from envpool.registration import registry

    return {env_id: registry.specs[env_id][0] for env_id in envpool.list_all_envs()}


@functools.cache
def supported_env_ids() -> tuple[str, ...]:
    """The task ids `env.id` accepts, in envpool's registry order."""
    return tuple(i for i, family in envpool_families().items() if family in SUPPORTED_FAMILIES)


def is_atari(env_id: str) -> bool:
    """Whether `env_id` is one of envpool's Atari tasks (which follow Machado et al.)."""
    return envpool_families().get(env_id) == _ATARI_FAMILY


def family_name(env_id: str) -> str | None:
    """The supported family of `env_id` as README.md names it ("MuJoCo"), else None."""
    return SUPPORTED_FAMILIES.get(envpool_families().get(env_id))


def task_spaces(env_id: str):
    """A task's (observation, action) gymnasium spaces under this module's settings.

    Read from envpool's spec, without creating an env (tens of milliseconds).
    """
    from sebulba.config import base_config  # Its env section: the defaults make_envs uses.

    env_config = base_config(ml_collections.ConfigDict()).env
    kwargs = _atari_kwargs(env_config) if is_atari(env_id) else {}
    spec = envpool.make_spec(env_id, **kwargs)
    return spec.observation_space, spec.action_space


def is_task_of(
    env_id: str, families, *, box_actions: bool = False, vector_observations: bool = False
) -> bool:
    """Whether `env_id` is a task of one of `families` (names as README.md gives them).

    Args:
      box_actions: also require continuous (Box) actions.
      vector_observations: also require one vector (a 1-D Box) as the observation.
    """
    if family_name(env_id) not in families:
        return False
    if not (box_actions or vector_observations):
        return True
    observation, action = task_spaces(env_id)
    if box_actions and type(action).__name__ != "Box":
        return False
    is_vector = type(observation).__name__ == "Box" and len(observation.shape) == 1
    return is_vector or not vector_observations


def check_env_id(env_id: str, field: str = "env.id") -> None:
    """Raises ConfigError, naming `field` and close matches, unless the task is supported.

    Args:
      env_id: an envpool task id.
      field: the config field that named it, e.g. "env.id" or "env.ids[1]".
    """
    if is_jax_env(env_id):
        from sebulba.anakin import suites

        suites.check_env_id(env_id, field)
        return
    family = envpool_families().get(env_id)
    if family in SUPPORTED_FAMILIES:
        return
    if family is not None:
        raise ConfigError(
            f"{field} {env_id!r} belongs to envpool's {family} family, which is not supported: "
            f"use a task of {', '.join(SUPPORTED_FAMILIES.values())}"
        )
    close = difflib.get_close_matches(env_id, supported_env_ids(), n=3, cutoff=0.6)
    advice = f"did you mean {' or '.join(map(repr, close))}?" if close else "see README.md"
    if ":" in env_id and not close:
        from sebulba.anakin import suites

        advice = f"a JAX env id is SUITE:TASK with SUITE one of {', '.join(suites.SUITES)}"
    raise ConfigError(f"{field} {env_id!r} is not an envpool task: {advice}")


def is_jax_env(env_id: str) -> bool:
    """Whether `env_id` names a JAX-native env (`SUITE:TASK`), which Anakin runs."""
    from sebulba.anakin import suites

    return suites.is_jax_env_id(env_id)


def make_envs(
    env_config: ml_collections.ConfigDict, num_envs: int, seed: int, *, render: bool = False
):
    """Creates one envpool pool of `num_envs` envs stepped together.

    Args:
      env_config: the `env` section of the config.
      num_envs: envs in this pool.
      seed: seed of the pool's first env; env i gets `seed + i`.
      render: enable `pool.render(env_ids)`, RGB screens [n, H, W, 3] uint8 (the Atari
        game screen at 210x160, a drawing for other tasks); the envs' dynamics and
        observations are the same either way.

    Returns:
      A gymnasium-style envpool pool in sync mode (batch_size == num_envs).
    """
    check_env_id(env_config.id)
    kwargs = dict(
        num_envs=num_envs,
        batch_size=num_envs,  # Sync mode: every step returns every env, in order.
        seed=seed,
        num_threads=env_config.num_threads,
    )
    if render:
        kwargs["render_mode"] = "rgb_array"
        if envpool_families().get(env_config.id) in _EGL_FAMILIES:
            _check_egl(env_config.id)
    if is_atari(env_config.id):
        kwargs.update(_atari_kwargs(env_config))
    return envpool.make(env_config.id, env_type="gymnasium", **kwargs)


def _atari_kwargs(env_config: ml_collections.ConfigDict) -> dict:
    """envpool's Atari settings for the protocol of Machado et al. (module docstring)."""
    if env_config.max_episode_frames % FRAMES_PER_AGENT_STEP:
        raise ConfigError(
            f"env.max_episode_frames ({env_config.max_episode_frames}) must be a "
            f"multiple of the frame skip ({FRAMES_PER_AGENT_STEP})"
        )
    return dict(
        episodic_life=False,  # Machado et al.: no life-loss signal.
        reward_clip=False,  # Clipped by the actor, so raw returns can be reported.
        repeat_action_probability=env_config.repeat_action_probability,
        full_action_space=env_config.full_action_space,
        max_episode_steps=env_config.max_episode_frames // FRAMES_PER_AGENT_STEP,
        noop_max=1,  # Sticky actions, not no-op starts, make the start stochastic.
        use_fire_reset=env_config.use_fire_reset,
        frame_skip=FRAMES_PER_AGENT_STEP,
        stack_num=env_config.frame_stack,
        img_height=84,
        img_width=84,
        gray_scale=True,
    )


def check_rendering(env_id: str) -> None:
    """Raises RenderingError, in one line, unless `make_envs(render=True)` can draw the task.

    MuJoCo and dm_control tasks are tried in a child process in a scratch directory: a
    failing MuJoCo render ends its process and writes MUJOCO_LOG.TXT where it runs. Every
    other family draws without OpenGL.
    """
    if envpool_families().get(env_id) not in _EGL_FAMILIES:
        return
    _check_egl(env_id)
    with tempfile.TemporaryDirectory() as scratch:
        result = subprocess.run(
            [sys.executable, "-c", _RENDER_PROBE, env_id, _EGL_LIBRARY],
            capture_output=True,
            text=True,
            cwd=scratch,
            check=False,
        )
    if result.returncode != 0:
        lines = (result.stderr + result.stdout).strip().splitlines() or ["no output"]
        raise RenderingError(
            f"cannot render {env_id} on this machine ({lines[-1].strip()}): "
            f"{_family_name(env_id)} tasks render headless through EGL "
            f"(apt-get install -y {EGL_APT_PACKAGES})"
        )


def _check_egl(env_id: str) -> None:
    """Raises RenderingError unless the system's libEGL was loaded before envpool."""
    if _EGL_MISSING is not None:
        raise RenderingError(
            f"cannot render {env_id}: {_family_name(env_id)} tasks render headless through "
            f"EGL, and {_EGL_MISSING}"
        )


def _family_name(env_id: str) -> str:
    return SUPPORTED_FAMILIES.get(envpool_families().get(env_id), "envpool")


class SplitPool:
    """One actor thread's envs as fixed groups of consecutive envs, each a sync pool.

    Behaves as one pool of all the envs (`reset`, `step`, `close`, the spaces), so code
    that steps envs whole works unchanged; the pipeline steps `groups` one at a time to
    overlap them with inference. Env i of the whole is env i - g of the group starting at
    g, seeded `seed + i` either way, so splitting changes no env's episodes.
    """

    def __init__(self, groups: list):
        self.groups = list(groups)
        self.observation_space = self.groups[0].observation_space
        self.action_space = self.groups[0].action_space

    def reset(self):
        results = [group.reset() for group in self.groups]
        return tuple(_concat_envs(*parts) for parts in zip(*results, strict=True))

    def step(self, actions):
        start = 0
        for group in self.groups:
            size = group.config["num_envs"]
            group.send(actions[start : start + size])
            start += size
        results = [group.recv() for group in self.groups]
        return tuple(_concat_envs(*parts) for parts in zip(*results, strict=True))

    def close(self) -> None:
        for group in self.groups:
            group.close()


def _concat_envs(*parts):
    """Joins per-group results (arrays [n, ...] or dicts of them) along the env axis."""
    if isinstance(parts[0], dict):
        return {key: _concat_envs(*(p[key] for p in parts)) for key in parts[0]}
    return np.concatenate([np.asarray(p) for p in parts], axis=0)


class SteppedWhole:
    """A pool (or a wrapper of one) driven through `send`/`recv` by its `step` alone."""

    def __init__(self, pool):
        self.pool = pool
        self._actions = None

    def reset(self):
        return self.pool.reset()

    def send(self, actions) -> None:
        self._actions = actions

    def recv(self):
        return self.pool.step(self._actions)


def step_groups(pool) -> list:
    """The groups of a thread's envs, in env order, each with `reset`, `send` and `recv`.

    A `SplitPool`'s halves, or the whole pool as one group. Anything else with a
    gymnasium-style `reset`/`step` (an envpool pool or a wrapper of one) is stepped whole,
    through its own `step`.
    """
    if isinstance(pool, SplitPool):
        return list(pool.groups)
    return [SteppedWhole(pool)]


class JointPool:
    """Several pools of consecutive envs (e.g. one per task) stepped as one pool.

    `send` hands every pool its envs' actions before `recv` waits for any, so the pools
    step concurrently (envpool's C++ threads release the GIL); results are joined along
    the env axis in env order. The pools must share their spaces (`sebulba.tasks`).
    """

    def __init__(self, pools: list):
        self.pools = list(pools)
        self.observation_space = self.pools[0].observation_space
        self.action_space = self.pools[0].action_space
        self.config = {"num_envs": sum(pool.config["num_envs"] for pool in self.pools)}

    def reset(self):
        results = [pool.reset() for pool in self.pools]
        return tuple(_concat_envs(*parts) for parts in zip(*results, strict=True))

    def send(self, actions) -> None:
        start = 0
        for pool in self.pools:
            size = pool.config["num_envs"]
            pool.send(actions[start : start + size])
            start += size

    def recv(self):
        results = [pool.recv() for pool in self.pools]
        return tuple(_concat_envs(*parts) for parts in zip(*results, strict=True))

    def step(self, actions):
        self.send(actions)
        return self.recv()

    def close(self) -> None:
        for pool in self.pools:
            pool.close()


def make_thread_envs(
    env_config: ml_collections.ConfigDict,
    task_layout,
    first_env: int,
    num_envs: int,
    seed_base: int,
    *,
    split: bool,
):
    """The envs of one actor thread: global envs [first_env, first_env + num_envs).

    Global env g is seeded `seed_base + g` and runs the task that owns g
    (`sebulba.tasks.TaskLayout`): the thread holds one pool per task block it overlaps,
    joined into one (`JointPool`) when there are several. With `split`
    (`pipeline.overlap_env_steps`) the thread's envs form two fixed halves, each built
    the same way, stepped as a `SplitPool`.

    Args:
      env_config: the `env` section of the config.
      task_layout: the run's `sebulba.tasks.TaskLayout`.
      first_env: global index of the thread's first env.
      num_envs: envs of the thread (>= 2 if `split`).
      seed_base: seed of global env 0.
      split: step the envs as two fixed halves.
    """
    from sebulba.tasks import task_env_config  # tasks imports nothing of envs.

    def envs_of(first: int, count: int):
        pools = [
            make_envs(
                task_env_config(env_config, task_layout.ids[task]), stop - start, seed_base + start
            )
            for task, start, stop in task_layout.segments(first, count)
        ]
        return pools[0] if len(pools) == 1 else JointPool(pools)

    if not split:
        return envs_of(first_env, num_envs)
    first_half = num_envs // 2
    return SplitPool(
        [
            envs_of(first_env, first_half),
            envs_of(first_env + first_half, num_envs - first_half),
        ]
    )


def task_env_specs(env_config: ml_collections.ConfigDict, ids) -> dict[str, spaces.EnvSpec]:
    """Each task's `EnvSpec`, read from a one-env pool of it (closed again)."""
    from sebulba.tasks import task_env_config

    specs = {}
    for task_id in ids:
        single = task_env_config(env_config, task_id)
        if is_jax_env(task_id):
            specs[task_id] = _jax_env_spec(single)
            continue
        pool = make_envs(single, 1, seed=0)
        try:
            specs[task_id] = env_spec_of(single, pool)
        finally:
            pool.close()
    return specs


def _jax_env_spec(env_config: ml_collections.ConfigDict) -> spaces.EnvSpec:
    from sebulba.anakin import suites

    check_env_id(env_config.id)
    spec = suites.make_env(env_config.id).spec
    indices = tuple(env_config.observation_indices)
    observation = spaces.select_components(spec.observation, indices, env_config.id)
    return dataclasses.replace(spec, observation=observation)


def real_time_step_s(env_id: str) -> float:
    """Seconds of game or simulated time one agent step spans (plays animations at 1x)."""
    if is_atari(env_id):
        return FRAMES_PER_AGENT_STEP / ATARI_FRAMES_PER_SECOND
    return _CLASSIC_CONTROL_STEP_S.get(env_id, _DEFAULT_STEP_S)


def env_spec_of(env_config: ml_collections.ConfigDict, envs) -> spaces.EnvSpec:
    """Describes a pool's observations and actions for the agent.

    `env.observation_indices` is applied here, so every consumer of the spec (actors,
    evaluation, `load_policy`) sees the same reduced observations.

    Raises:
      ConfigError: naming env.id and the space, if a space cannot be represented, or
        env.observation_indices if it does not fit the observation.
    """
    return spaces.env_spec_of(
        env_config.id,
        envs,
        is_atari=is_atari(env_config.id),
        observation_indices=tuple(env_config.observation_indices),
    )


def learning_rewards(raw_rewards: np.ndarray, clip: bool) -> np.ndarray:
    """Rewards the agent learns from: clipped to {-1, 0, 1} for Atari (Mnih et al. 2015)."""
    rewards = raw_rewards.astype(np.float32)
    return np.sign(rewards) if clip else rewards


class EpisodeTracker:
    """Raw episodic returns of one pool, and which steps are envpool's auto-resets.

    envpool resets an env on the step after its episode ended and ignores that step's
    action; such steps are marked invalid so no agent learns from them. Every finished
    episode is reported with the global index of its env, so the metrics can attribute
    it to its task (`sebulba.tasks.TaskLayout.task_of_env`) without the pipeline knowing
    about tasks.

    Args:
      env_ids: [n] global env indices of the pool's envs, in pool order.
    """

    def __init__(self, env_ids):
        self.env_ids = np.asarray(env_ids, np.int64)
        num_envs = len(self.env_ids)
        self.returns = np.zeros(num_envs, np.float64)
        self.lengths = np.zeros(num_envs, np.int64)
        # True where the previous step ended an episode, so this step is envpool's reset.
        self.resetting = np.zeros(num_envs, bool)

    def step(
        self,
        raw_rewards,
        terminations,
        truncations,
        finished_returns: list[float],
        finished_lengths: list[int],
        finished_env_ids: list[int],
    ):
        """Records one env step; returns the step's validity mask [num_envs].

        The episodes that ended on this step are appended, in env order, to the three
        lists: raw return, length in agent steps and global env index.
        """
        valid = ~self.resetting
        self.returns += np.where(valid, raw_rewards, 0.0)
        self.lengths += valid
        done = np.logical_or(terminations, truncations)
        finished_returns.extend(self.returns[done].tolist())
        finished_lengths.extend(self.lengths[done].tolist())
        finished_env_ids.extend(self.env_ids[done].tolist())
        self.returns[done] = 0.0
        self.lengths[done] = 0
        self.resetting = done
        return valid


if __name__ == "__main__":
    import sys

    from sebulba.env_catalog import main

    sys.exit(main(sys.argv[1:]))
