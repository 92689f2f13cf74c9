"""Where a run writes: checked before any work, so a bad path fails in one line.

Building envs and compiling the learner update takes seconds to minutes; a workdir that
is a file, lies below a file or cannot be written must fail before that, not at the
first write. The checks create nothing: a run refused for any reason leaves no
directory behind.
"""

from __future__ import annotations

import os
import tempfile

from sebulba.errors import ConfigError


def _nearest_existing(path: str) -> str:
    """`path` itself if it exists, else its closest ancestor that does."""
    while not os.path.lexists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def check_writable_dir(path: str, name: str) -> None:
    """Raises unless `path` is, or can be created as, a directory this process can write.

    A directory that does not exist yet is not created: its closest existing ancestor
    must be a writable directory. Writability is probed by creating and removing a
    file, which (unlike permission bits) also catches read-only filesystems, ACLs and
    root-owned mounts.

    Args:
      path: the directory.
      name: how the message names it (e.g. `workdir`, `--out`).

    Raises:
      ConfigError: one line naming `name`, the path and the reason.
    """
    absolute = os.path.abspath(path)
    existing = _nearest_existing(absolute)
    if existing == absolute and not os.path.isdir(absolute):
        raise ConfigError(f"{name} {path} is a file, not a directory: choose another path")
    if not os.path.isdir(existing):
        raise ConfigError(
            f"{name} {path} lies below {existing}, which is a file, not a directory: "
            "choose another path"
        )
    try:
        handle, probe = tempfile.mkstemp(prefix=".sebulba-write-check-", dir=existing)
    except OSError as error:
        where = "" if existing == absolute else f" (its closest existing parent {existing})"
        raise ConfigError(
            f"{name} {path}{where} is not writable: {error.strerror or error}"
        ) from None
    os.close(handle)
    os.remove(probe)


def check_workdir(workdir: str) -> None:
    """The checks `train.train` and the command line run on `--workdir` before any work.

    Raises:
      ConfigError: the workdir is empty or a URL, a file, lies below a file or is not
        writable.
    """
    if not workdir.strip():
        # An unset shell variable (`--workdir=$WORKDIR`) would write into the current folder.
        raise ConfigError("workdir is empty: give the run's directory")
    if "://" in workdir:
        raise ConfigError(
            f"workdir {workdir}: URLs are not supported; give a filesystem path (in "
            "multi-host runs one on storage every host mounts, e.g. NFS or Filestore)"
        )
    check_writable_dir(workdir, "workdir")


def runs_inside(path: str) -> list[str]:
    """The run workdirs directly inside `path` (those holding a `config.json`), sorted.

    A `--seeds` run writes `WORKDIR/seed=<seed>`, one workdir per seed: the tools that read
    a workdir name these when given the parent instead.
    """
    if not os.path.isdir(path):
        return []
    children = (os.path.join(path, name) for name in sorted(os.listdir(path)))
    return [child for child in children if os.path.isfile(os.path.join(child, "config.json"))]


def not_a_workdir_hint(path: str) -> str:
    """What to pass instead of `path`, a directory of runs rather than a run ("" if none)."""
    runs = runs_inside(path)
    if not runs:
        return ""
    names = ", ".join(os.path.basename(run) for run in runs)
    return f"; it holds the runs {names} (a --seeds directory): pass one, e.g. {runs[0]}"
