"""One sglpatch command at a time per sglang package.

The lock is an OS file lock (flock) on the package directory itself, taken
for the whole command: exclusive for commands that write (apply, revert),
shared for those that only read (status, check, apply --dry-run). Locking the
directory rather than a separate file means a read-only command can lock
without creating anything, and there is no lock file whose deletion could
race with a waiter. The kernel drops the lock when its holder dies, however
it dies, so a journal found while holding the exclusive lock was left by a
dead process and may be rolled back.

A writer also records its PID in `.sglpatch-lock` inside the package, so a
command that gives up waiting can say who holds the package.
"""

import errno
import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sglpatch.errors import SglpatchError

HOLDER_FILE = ".sglpatch-lock"
# How long a command waits for another one on the same package; tests and
# impatient users shorten it through the environment.
DEFAULT_WAIT_S = 30.0
WAIT_ENV = "SGLPATCH_LOCK_TIMEOUT"
_POLL_S = 0.05


def _wait_s() -> float:
    try:
        return max(0.0, float(os.environ.get(WAIT_ENV, DEFAULT_WAIT_S)))
    except ValueError:
        return DEFAULT_WAIT_S


def _holder(root: Path) -> str:
    try:
        pid = (root / HOLDER_FILE).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        pid = ""
    return f"sglpatch (pid {pid})" if pid.isdigit() else "another sglpatch command"


@contextmanager
def package_lock(root: Path, exclusive: bool) -> Iterator[None]:
    """Hold the package's lock; wait a bounded time, then refuse."""
    fd = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        deadline = time.monotonic() + _wait_s()
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                    raise
            if time.monotonic() >= deadline:
                raise SglpatchError(
                    f"{_holder(root)} is working on {root}; gave up after "
                    f"{_wait_s():g} s (try again when it has finished)"
                )
            time.sleep(_POLL_S)
        if exclusive:
            _write_holder(root)
        try:
            yield
        finally:
            if exclusive:
                _remove_holder(root)
    finally:
        os.close(fd)  # releases the lock


def _write_holder(root: Path) -> None:
    # Informational only: on a full disk or read-only package the command
    # goes on (and refuses later with the real reason).
    try:
        (root / HOLDER_FILE).write_text(f"{os.getpid()}\n", encoding="ascii")
    except OSError:
        pass


def _remove_holder(root: Path) -> None:
    try:
        (root / HOLDER_FILE).unlink()
    except OSError:
        pass
