"""The system libraries envpool's families need, checked in one line before any work.

Procgen (Cobbe et al. 2020) needs the system's Qt 5 runtime (`QT_APT_PACKAGES`), checked
with the task id (`check_system_libraries`), so a machine without it fails in one line
before any work.

`make_envs(..., render=True)` lets every supported family but toy text and Google
Research Football (which envpool does not draw) draw RGB screens; the MuJoCo-based
families (MuJoCo, dm_control, Gymnasium Robotics, MetaWorld, MyoSuite, MuJoCo Playground)
draw with OpenGL through EGL, headless, which needs the system's libEGL loaded before
envpool is imported (`import_envpool` does both, on first use of envpool) and a Mesa EGL
driver; `check_rendering` tries a task in a child process first.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import tempfile

from sebulba.environments import envpool_registry
from sebulba.environments.envpool_registry import (
    _EGL_LIBRARY,
    EGL_APT_PACKAGES,
    _family_name,
    envpool_families,
    import_envpool,
)
from sebulba.errors import ConfigError

# envpool draws the MuJoCo-based families' scenes with OpenGL through EGL (no display needed).
# MuJoCo looks its GL functions up once, when envpool is imported, among the libraries loaded
# into the process's global namespace, where envpool's own bundled EGL is not: unless the
# system's libEGL is loaded there first, the first render ends the process with a MuJoCo
# error and leaves MUJOCO_LOG.TXT in the current directory. Every other family draws on the
# CPU without OpenGL.
_EGL_FAMILIES = (
    "envpool.mujoco.gym",
    "envpool.mujoco.dmc",
    "envpool.mujoco.robotics",
    "envpool.mujoco.metaworld",
    "envpool.mujoco.myosuite",
    "envpool.mujoco.playground",
)


# Families whose envpool tasks draw nothing ("render not implemented for this environment").
_UNRENDERED_FAMILIES = ("envpool.toy_text", "envpool.gfootball")


# envpool's Procgen links against the system's Qt 5 Core and Gui libraries, which pip
# cannot install: without them envpool raises an ImportError when the family is first used.
_QT_FAMILIES = ("envpool.procgen",)


# The Debian/Ubuntu packages of those libraries (libqt5gui5 pulls in the rest).
QT_APT_PACKAGES = "libqt5core5a libqt5gui5"


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


def check_system_libraries(env_id: str, field: str = "env.id") -> None:
    """Raises ConfigError, in one line naming the apt packages, if the family's are missing.

    envpool's Procgen needs the system's Qt 5 runtime; without it envpool would raise an
    ImportError (with a traceback) at the first spec or env of the family.
    """
    if envpool_families().get(env_id) not in _QT_FAMILIES:
        return
    if _qt_missing():
        raise ConfigError(
            f"{field} {env_id!r}: envpool's {_family_name(env_id)} needs the system Qt 5 "
            f"runtime, which is not installed (apt-get install -y {QT_APT_PACKAGES})"
        )


@functools.cache
def _qt_missing() -> bool:
    """Whether envpool's Procgen module cannot load for want of the Qt 5 libraries."""
    import importlib

    import_envpool()
    try:
        importlib.import_module("envpool.procgen").ProcgenEnvSpec  # noqa: B018
    except ImportError:
        return True
    return False


def check_rendering(env_id: str) -> None:
    """Raises RenderingError, in one line, unless `make_envs(render=True)` can draw the task.

    Tasks of the MuJoCo-based families are tried in a child process in a scratch
    directory: a failing MuJoCo render ends its process and writes MUJOCO_LOG.TXT where it
    runs. Every other family draws without OpenGL, but for those envpool draws nothing for
    (toy text, Google Research Football), refused here.
    """
    _check_drawn(env_id)
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


def _check_drawn(env_id: str) -> None:
    """Raises RenderingError for the families envpool has no drawing of."""
    if envpool_families().get(env_id) in _UNRENDERED_FAMILIES:
        raise RenderingError(
            f"cannot render {env_id}: envpool draws no {_family_name(env_id)} task"
        )


def _check_egl(env_id: str) -> None:
    """Raises RenderingError unless the system's libEGL was loaded before envpool."""
    import_envpool()
    if envpool_registry._egl_missing is not None:
        raise RenderingError(
            f"cannot render {env_id}: {_family_name(env_id)} tasks render headless through "
            f"EGL, and {envpool_registry._egl_missing}"
        )
