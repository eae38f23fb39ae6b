"""All-or-nothing replacement of a set of files of the sglang package.

Before the first file is touched, the originals are kept in a journal inside
the package (hard links where the file system allows: no new space, and a
rollback is a rename). The journal goes through three names, and each step
from one to the next is one atomic rename:

    .sglpatch-journal.new   being written; nothing in the package touched yet
    .sglpatch-journal       complete; files are being replaced
    .sglpatch-journal.done  committed (or rolled back); only deletion is left

On any failure (an exception, Ctrl-C) every file is put back from the
journal. If the process dies hard (SIGKILL, power loss), the next command
that takes the package's lock finds the journal under its name and either
rolls it back (`.sglpatch-journal`) or just deletes it (the other two). A
rollback moves each kept original back into place, so a rollback that dies
half-way is simply repeated: an original missing from a complete journal is
one already restored. Neither a rollback nor a commit needs new disk space.
"""

import json
import os
import shutil
import signal
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

JOURNAL_DIR = ".sglpatch-journal"
_NEW = JOURNAL_DIR + ".new"
_DONE = JOURNAL_DIR + ".done"
_INDEX = "index.json"
_SAVED = "saved"
_TMP_PREFIX = ".sglpatch-tmp-"

# Called before every change this module makes to the file system, with the
# kind of change and its path: tests inject failures there (a full disk,
# Ctrl-C at a chosen step).
fault_hook: Optional[Callable[[str, Path], None]] = None


def _step(op: str, path: Path) -> None:
    if fault_hook is not None:
        fault_hook(op, path)


def journal_present(root: Path) -> bool:
    """True if an interrupted run left a journal that needs rolling back."""
    return (root / JOURNAL_DIR).exists()


def leftovers_present(root: Path) -> bool:
    return any((root / name).exists() for name in (JOURNAL_DIR, _NEW, _DONE))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some file systems cannot sync a directory
        pass
    finally:
        os.close(fd)


def _remove_tree(path: Path) -> None:
    """Delete a journal directory, one step at a time."""
    if not path.exists():
        return
    for dirpath, dirnames, filenames in os.walk(path, topdown=False):
        for name in filenames:
            _step("unlink", Path(dirpath) / name)
            os.unlink(os.path.join(dirpath, name))
        for name in dirnames:
            _step("rmdir", Path(dirpath) / name)
            os.rmdir(os.path.join(dirpath, name))
    _step("rmdir", path)
    os.rmdir(path)


def _tmp_path(target: Path, number: int) -> Path:
    # Short and numbered: never too long a name, and a rollback knows
    # exactly which stray temporary file may belong to which entry.
    return target.with_name(f"{_TMP_PREFIX}{number}")


def _make_parent(path: Path) -> None:
    if not path.parent.is_dir():
        _step("mkdir", path.parent)
        path.parent.mkdir(parents=True, exist_ok=True)


def _write_atomic(target: Path, data: bytes, number: int) -> None:
    tmp = _tmp_path(target, number)
    _make_parent(target)
    _step("write", tmp)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if target.exists():
            shutil.copymode(target, tmp)
        _step("rename", target)
        os.replace(tmp, target)
    except BaseException:
        # Free the space at once: a full disk must not keep the half file.
        if tmp.exists():
            _step("unlink", tmp)
            tmp.unlink()
        raise


def _keep_original(source: Path, saved: Path) -> None:
    _step("link", saved)
    try:
        os.link(source, saved)
    except OSError:  # no hard links here (or across a mount): copy
        shutil.copy2(source, saved)


def _rollback(root: Path) -> None:
    """Put every journaled file back; repeatable if it is itself interrupted."""
    journal = root / JOURNAL_DIR
    index = json.loads((journal / _INDEX).read_text(encoding="utf-8"))
    for number, entry in enumerate(index["entries"]):
        target = root / entry["path"]
        tmp = _tmp_path(target, number)
        if tmp.exists():
            _step("unlink", tmp)
            tmp.unlink()
        saved = journal / _SAVED / str(number)
        if entry["existed"]:
            if saved.exists():  # else: already moved back by an earlier try
                _make_parent(target)
                _step("rename", target)
                os.replace(saved, target)
        elif target.exists():
            _step("unlink", target)
            target.unlink()
    for rel in reversed(index["made_dirs"]):
        directory = root / rel
        if directory.is_dir() and not any(directory.iterdir()):
            _step("rmdir", directory)
            directory.rmdir()
    _step("rename", root / _DONE)
    os.replace(journal, root / _DONE)
    _remove_tree(root / _DONE)


def recover_interrupted(root: Path) -> bool:
    """Finish what a dead process left behind. True if there was anything.

    Call only while holding the package's exclusive lock: then the journal's
    writer is known to be dead.
    """
    found = leftovers_present(root)
    if (root / JOURNAL_DIR).exists():
        _rollback(root)
    _remove_tree(root / _NEW)  # died while writing the journal: nothing touched
    _remove_tree(root / _DONE)  # died after the commit (or rollback) point
    return found


def _missing_dirs(root: Path, rels) -> List[str]:
    """Directories the new files need that do not exist yet, outermost first."""
    missing: Dict[str, None] = {}
    for rel in rels:
        chain = []
        parent = (root / rel).parent
        while not parent.exists():
            chain.append(os.path.relpath(parent, root))
            parent = parent.parent
        for rel_dir in reversed(chain):
            missing.setdefault(rel_dir)
    return list(missing)


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold back Ctrl-C and SIGTERM while files are replaced: the transaction
    is short, and finishing it (or rolling it back) beats leaving a journal."""
    wanted = {signal.SIGINT, signal.SIGTERM}
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, wanted)
    except (AttributeError, ValueError, OSError):
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def replace_files(root: Path, new_contents: Dict[str, Optional[bytes]]) -> None:
    """Give each file (relative to root) its new content (None: no file), or
    change none of them. Call only while holding the package's exclusive lock."""
    entries = [{"path": rel, "existed": (root / rel).is_file()} for rel in new_contents]
    made_dirs = _missing_dirs(
        root, [rel for rel, data in new_contents.items() if data is not None]
    )
    staging = root / _NEW
    try:
        _step("mkdir", staging)
        (staging / _SAVED).mkdir(parents=True)
        for number, entry in enumerate(entries):
            if entry["existed"]:
                _keep_original(root / entry["path"], staging / _SAVED / str(number))
        _step("write", staging / _INDEX)
        with open(staging / _INDEX, "w", encoding="utf-8") as f:
            json.dump({"entries": entries, "made_dirs": made_dirs}, f)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(staging / _SAVED)
        _fsync_dir(staging)
    except BaseException:
        _remove_tree(staging)
        raise

    with _signals_deferred():
        # The journal is complete from here on: the next command rolls it back.
        _step("rename", root / JOURNAL_DIR)
        os.replace(staging, root / JOURNAL_DIR)
        _fsync_dir(root)
        try:
            for number, (rel, data) in enumerate(new_contents.items()):
                target = root / rel
                if data is None:
                    if target.exists():
                        _step("unlink", target)
                        target.unlink()
                else:
                    _write_atomic(target, data, number)
            for directory in {(root / rel).parent for rel in new_contents}:
                if directory.is_dir():
                    _fsync_dir(directory)
        except BaseException:
            _rollback(root)
            raise
        # The commit point.
        _step("rename", root / _DONE)
        os.replace(root / JOURNAL_DIR, root / _DONE)
        _fsync_dir(root)
    _remove_tree(root / _DONE)
    _remove_empty_parents(root, [rel for rel, data in new_contents.items() if data is None])


def _remove_empty_parents(root: Path, removed: List[str]) -> None:
    """Directories left empty by removed files (a `__pycache__`, the kept
    originals) go too: an empty directory would outlive `pip uninstall`."""
    for rel in removed:
        parent = (root / rel).parent
        while parent != root and parent.is_dir() and not any(parent.iterdir()):
            _step("rmdir", parent)
            parent.rmdir()
            parent = parent.parent
