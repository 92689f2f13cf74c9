"""envpool, imported on first use, and its registry: the families sebulba supports.

The accepted tasks are those of envpool's registry in the families of
`SUPPORTED_FAMILIES`: every family envpool has (docs/environments.md lists them with
their spaces and configs).

The MuJoCo-based families draw with OpenGL through EGL, headless, which needs the
system's libEGL loaded before envpool is imported: `import_envpool` does both, on first
use of envpool.
"""

from __future__ import annotations

import ctypes
import functools
import sys
import warnings

from sebulba.runtime.deferred_imports import defer_import

_EGL_LIBRARY = "libEGL.so.1"
# The Debian/Ubuntu packages of EGL and Mesa's software renderer (llvmpipe).
EGL_APT_PACKAGES = "libegl1 libegl-mesa0 libgl1-mesa-dri"


def _preload_egl() -> str | None:
    """Loads the system's libEGL globally, before envpool; None, or why it could not."""
    if "envpool" in sys.modules:
        return "envpool was imported before sebulba loaded it (let sebulba import it)"
    try:
        ctypes.CDLL(_EGL_LIBRARY, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return f"{_EGL_LIBRARY} is not installed (apt-get install -y {EGL_APT_PACKAGES})"
    return None


# What envpool imports when it is imported only to draw: its Jumanji viewers import pyplot
# (about 0.3 s of a command line's start-up), which a run asks for only when it renders.
# Deferred, the first use imports the real module (`sebulba.runtime.deferred_imports`).
RENDER_ONLY_MODULES = ("matplotlib.pyplot",)

# Why rendering through EGL cannot work, once `import_envpool` has run (None: it can).
_egl_missing: str | None = None


@functools.cache
def import_envpool():
    """The envpool module, imported on first use, after the system's libEGL.

    Deferred so that runs that never step an envpool env (Anakin's JAX envs) do not pay
    its import, a large share of their start-up.
    """
    global _egl_missing
    _egl_missing = _preload_egl()
    for name in RENDER_ONLY_MODULES:
        defer_import(name)
    import envpool

    return envpool


# envpool's classic-control spaces are float64 boxes that gymnasium casts with a warning
# on every access; the cast is harmless.
warnings.filterwarnings("ignore", message=".*precision lowered by casting.*")


# envpool's registry module of each supported family -> its name in messages, in the
# order of README.md's table: every family of envpool's registry.
SUPPORTED_FAMILIES = {
    "envpool.classic_control": "classic control",
    "envpool.box2d": "Box2D",
    "envpool.toy_text": "toy text",
    "envpool.mujoco.gym": "MuJoCo",
    "envpool.mujoco.dmc": "dm_control",
    "envpool.mujoco.robotics": "Gymnasium Robotics",
    "envpool.mujoco.metaworld": "MetaWorld",
    "envpool.mujoco.myosuite": "MyoSuite",
    "envpool.mujoco.playground": "MuJoCo Playground",
    "envpool.minigrid": "MiniGrid/BabyAI",
    "envpool.jumanji": "Jumanji",
    "envpool.pgx": "pgx",
    "envpool.highway": "highway-env",
    "envpool.atari": "Atari",
    "envpool.vizdoom": "ViZDoom",
    "envpool.gfootball": "Google Research Football",
    "envpool.procgen": "Procgen",
}


_ATARI_FAMILY = "envpool.atari"
_VIZDOOM_FAMILY = "envpool.vizdoom"


@functools.cache
def envpool_families() -> dict[str, str]:
    """Every envpool task id -> the registry module of its family, e.g. "envpool.atari"."""
    envpool = import_envpool()
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


def is_jax_env(env_id: str) -> bool:
    """Whether `env_id` names a JAX-native env (`SUITE:TASK`), which Anakin runs."""
    # Upward (environments -> the Anakin runner's package), lazily: the JAX suites' ids are
    # theirs; suites imports nothing of envpool's modules here, so there is no circle.
    from sebulba.anakin import suites

    return suites.is_jax_env_id(env_id)


def _family_name(env_id: str) -> str:
    return SUPPORTED_FAMILIES.get(envpool_families().get(env_id), "envpool")
