"""One sglpatch command at a time per sglang package.

The lock is an OS file lock (flock) on the package directory itself, taken
for the whole command: exclusive for commands that write (apply, revert),
shared for those that only read (status, check, apply --dry-run). Locking the
directory rather than a separate file means a read-only command can lock
without creating anything, and there is no lock file whose deletion could
race with a waiter. The kernel drops the lock when its holder dies, however
it dies, so a journal found while holding the exclusive lock was left by a
dead process and may be rolled back.

A command that gives up waiting names the holder's PID, read from the
kernel's table of locks (/proc/locks on Linux): nothing is written into the
package, so nothing is left behind when the holder is killed.
"""

import errno
import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sglpatch.errors import SglpatchError

LOCKS_TABLE = Path("/proc/locks")
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
    """Who holds the lock on root, as far as the kernel tells."""
    try:
        st = os.stat(root)
        lines = LOCKS_TABLE.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError):
        return "another sglpatch command"
    # e.g. "3: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF"; waiters have "->"
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = [fields[4] for fields in map(str.split, lines)
            if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == wanted
            and fields[4] != str(os.getpid())]
    if pids:
        return f"sglpatch (pid {', '.join(dict.fromkeys(pids))})"
    return "another sglpatch command"


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
        yield
    finally:
        os.close(fd)  # releases the lock
