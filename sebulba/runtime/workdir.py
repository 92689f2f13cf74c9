"""Where a run writes: checked before any work, so a bad path fails in one line.

Building envs and compiling the learner update takes seconds to minutes; a workdir that
is a file, lies below a file or cannot be written must fail before that, not at the
first write. The checks create nothing: a run refused for any reason leaves no
directory behind. A run then holds its workdir (`hold`) from its first write to its
end, so that a second run started on the same workdir is refused in one line.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence

from absl import logging

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

    A `--seeds` run writes `WORKDIR/seed=<seed>`, one workdir per seed, and a population
    `WORKDIR/member=<i>`: the tools that read a workdir name these when given the parent
    instead.
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
    kind = "a population" if os.path.basename(runs[0]).startswith("member=") else "a --seeds"
    return f"; it holds the runs {names} ({kind} directory): pass one, e.g. {runs[0]}"


# A run holds this file of its workdir locked (flock) from its first write to its end: a
# second run on the same workdir, whose metrics and checkpoints would interleave with the
# first's, is refused. The kernel drops the lock when the holder exits, however it ends,
# so a killed run leaves no stale lock; the file itself stays and names the last holder.
LOCK_FILE = ".sebulba-lock"

# Workdirs this process holds (realpath -> open descriptor): a run may open a workdir's
# outputs more than once (a rebuilt summary opens them before the summary is written).
_held: dict[str, int] = {}


def _lock_path(workdir: str) -> str:
    return os.path.join(workdir, LOCK_FILE)


def _holder_text(descriptor: int) -> str:
    """Who holds the lock, as its holder wrote it ("" if it has not written yet)."""
    try:
        raw = os.pread(descriptor, 4096, 0).decode("utf-8", "replace")
        holder = json.loads(raw)
        return (
            f"pid {holder['pid']} on host {holder['host']} since {holder['since']} "
            f"({holder['command']})"
        )
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def _in_use_error(workdir: str, holder: str) -> ConfigError:
    return ConfigError(
        f"workdir {workdir} is in use by another run{': ' + holder if holder else ''}; two "
        "runs in one workdir would mix their metrics and checkpoints: wait for it to end, "
        "stop it, or choose another --workdir"
    )


def _open_lock_file(workdir: str, create: bool) -> tuple[int, bool] | None:
    """(descriptor, writable) of the workdir's lock file; None if it does not exist.

    Created as the run's other outputs are (0666 less the umask), so that whoever may
    write the outputs (a group sharing the workdir) may take the lock. A file this user
    may only read (another user's run, a stricter umask) is opened read-only: flock
    locks it all the same, and the holder's line is then not rewritten.
    """
    path = _lock_path(workdir)
    try:
        return os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o666), True
    except FileNotFoundError:
        return None
    except PermissionError:
        try:
            return os.open(path, os.O_RDONLY), False
        except FileNotFoundError:
            return None


def _try_lock(descriptor: int, workdir: str) -> bool:
    """Locks `descriptor`; False where the filesystem has no locks (logged).

    Raises:
      ConfigError: another process holds the lock.
    """
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _in_use_error(workdir, _holder_text(descriptor)) from None
    except OSError as error:  # Lustre without `-o flock`, some FUSE mounts.
        logging.warning(
            "cannot lock %s (%s): a second run on this workdir would not be refused",
            _lock_path(workdir),
            error.strerror or error,
        )
        return False
    return True


def check_not_in_use(workdir: str) -> None:
    """Raises if another run holds `workdir`; creates nothing.

    Run before any work, so that a second run on a busy workdir fails in a second rather
    than after compiling; `hold` checks again when the run first writes. A workdir this
    process holds is in use too: by another run of this process (a thread, a library
    caller), which the flock alone would not refuse.

    Raises:
      ConfigError: one line naming the workdir and the run holding it.
    """
    if os.path.realpath(workdir) in _held:
        raise _in_use_error(workdir, f"pid {os.getpid()}, this process")
    try:
        opened = _open_lock_file(workdir, create=False)
    except OSError:  # Unreadable: `hold` reports it when the run first writes.
        return
    if opened is None:  # A new workdir.
        return
    descriptor, _ = opened
    try:
        if _try_lock(descriptor, workdir):
            fcntl.flock(descriptor, fcntl.LOCK_UN)
    finally:
        os.close(descriptor)


def hold(workdir: str) -> None:
    """Takes `workdir` for this process until `release` (or the process's exit).

    Creates the workdir if needed and records this process (pid, host, start, command)
    in its lock file for the message a refused run prints. Holding it again is a no-op:
    the caller that took it releases it.

    Raises:
      ConfigError: another run holds it, or its lock file cannot be opened.
    """
    key = os.path.realpath(workdir)
    if key in _held:
        return
    try:
        os.makedirs(workdir, exist_ok=True)
        # Not inherited by child processes (Python opens descriptors non-inheritable).
        descriptor, writable = _open_lock_file(workdir, create=True)
    except OSError as error:
        raise ConfigError(
            f"workdir {workdir}: cannot open its lock file {LOCK_FILE}: {error.strerror or error}"
        ) from None
    try:
        if _try_lock(descriptor, workdir) and writable:
            holder = {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "since": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                # As typed (`python -m sebulba.main ...`, where sys.argv names main.py),
                # on one line (a `python -c` program has several).
                "command": " ".join(
                    " ".join(
                        [os.path.basename(sys.executable), *getattr(sys, "orig_argv", sys.argv)[1:]]
                    ).split()
                )[:300],
            }
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, json.dumps(holder).encode(), 0)
    except BaseException:
        os.close(descriptor)
        raise
    _held[key] = descriptor


def release(workdir: str) -> None:
    """Gives up `workdir` if this process holds it (else nothing)."""
    descriptor = _held.pop(os.path.realpath(workdir), None)
    if descriptor is not None:
        os.close(descriptor)  # Drops the lock.


@contextlib.contextmanager
def reserved(workdirs: Sequence[str], check: bool = True) -> Iterator[None]:
    """The span of a run on `workdirs`: refuses it if another run holds any of them, and
    gives up at the end whichever of them this process took meanwhile with `hold` (a run
    takes its workdir at its first write, not before, so that a refused run creates
    nothing).

    Args:
      workdirs: the run's workdirs (one per seed where seeds run in one program).
      check: whether to check them first (`check_not_in_use`): the process that writes
        them; the others hold nothing and check nothing.

    Raises:
      ConfigError: another run holds one of them.
    """
    if check:
        for workdir in workdirs:
            check_not_in_use(workdir)
    try:
        yield
    finally:
        for workdir in workdirs:
            release(workdir)
