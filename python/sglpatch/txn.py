"""All-or-nothing replacement of a set of files of the sglang package.

Before the first file is touched, the originals are kept in a journal inside
the package (hard links where the file system allows: no new space, and a
rollback is a rename). The journal goes through three names, and each step
from one to the next is one atomic rename:

    .sglpatch-journal.new   being written; nothing in the package touched yet
    .sglpatch-journal       complete; files are being replaced
    .sglpatch-journal.done  committed (or rolled back); only clean-up is left

On any failure (an exception, Ctrl-C) every file is put back from the
journal. If the process dies hard (SIGKILL, power loss), the next command
that takes the package's lock finds the journal under its name and either
rolls it back (`.sglpatch-journal`) or just finishes the clean-up (the other
two). A rollback moves each kept original back into place, so a rollback
that dies half-way is simply repeated: an original missing from a complete
journal is one already restored. Neither a rollback nor a commit needs new
disk space. Ctrl-C and SIGTERM are held back from the first step to the
last, clean-up included, so a signal never leaves a journal behind.

Other programs do not take sglpatch's lock (an editor, an older sglpatch):
each original is checked, once journaled, against the content the caller
read, and each new file, once written, against what was written; a
difference refuses the change (rolled back) instead of keeping or writing
back bytes nobody checked.

A journal left by sglpatch 0.1.0 (`journal.json` and `originals/`) is rolled
back too. One this release cannot read is never guessed at: the error names
the directory and what to do.
"""

import json
import os
import shutil
import signal
import stat
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from sglpatch.errors import SglpatchError
from sglpatch.paths import inside_package
from sglpatch.series import sha256_bytes, sha256_file

JOURNAL_DIR = ".sglpatch-journal"
_NEW = JOURNAL_DIR + ".new"
_DONE = JOURNAL_DIR + ".done"
JOURNAL_NAMES = (JOURNAL_DIR, _NEW, _DONE)
_INDEX = "index.json"
_SAVED = "saved"
# sglpatch 0.1.0's journal: {"files": {path: existed}} and a copy of each
# original under originals/PATH; the index was written last.
_OLD_INDEX = "journal.json"
_OLD_SAVED = "originals"
_OLD_TMP_SUFFIX = ".sglpatch-tmp"
_TMP_PREFIX = ".sglpatch-tmp-"

# Called before every change this module makes to the file system, with the
# kind of change and its path: tests inject failures there (a full disk,
# Ctrl-C at a chosen step).
fault_hook: Optional[Callable[[str, Path], None]] = None


@dataclass(frozen=True)
class Link:
    """New content that is a symbolic link; `data` is what reading it gives."""

    target: str
    data: bytes


Content = Union[bytes, Link, None]


def content_bytes(value: Content) -> Optional[bytes]:
    return value.data if isinstance(value, Link) else value


def _step(op: str, path: Path) -> None:
    if fault_hook is not None:
        fault_hook(op, path)


def journal_present(root: Path) -> bool:
    """True if an interrupted run left a journal that needs rolling back."""
    return os.path.lexists(root / JOURNAL_DIR)


def leftovers(root: Path) -> List[str]:
    """The journal directories an interrupted run left in the package."""
    return [name for name in JOURNAL_NAMES if os.path.lexists(root / name)]


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
    if not os.path.lexists(path):
        return
    for dirpath, dirnames, filenames in os.walk(path, topdown=False):
        for name in filenames + dirnames:  # a kept link stays a link: unlinked
            entry = Path(dirpath) / name
            if entry.is_dir() and not entry.is_symlink():
                _step("rmdir", entry)
                os.rmdir(entry)
            else:
                _step("unlink", entry)
                os.unlink(entry)
    _step("rmdir", path)
    os.rmdir(path)


def _tmp_path(target: Path, number: int) -> Path:
    # Short and numbered: never too long a name, and a rollback knows
    # exactly which stray temporary file may belong to which entry.
    return target.with_name(f"{_TMP_PREFIX}{number}")


class _Owner:
    """New files take the package's modes (not the umask's), and, when root
    writes into a package someone else owns, the owner of what they replace."""

    def __init__(self, root: Path):
        st = os.stat(root)
        init = root / "__init__.py"
        self.dir_mode = stat.S_IMODE(st.st_mode)
        self.file_mode = (stat.S_IMODE(os.stat(init).st_mode) if init.is_file()
                          else self.dir_mode & 0o666)
        self.as_root = os.geteuid() == 0
        self.ids = (st.st_uid, st.st_gid)

    def _chown(self, path: Path, ids: Tuple[int, int]) -> None:
        if self.as_root and os.lstat(path)[4:6] != ids:
            os.chown(path, *ids, follow_symlinks=False)

    def new_dir(self, path: Path) -> None:
        os.chmod(path, self.dir_mode)
        self._chown(path, self.ids)

    def new_file(self, path: Path, replaces: Optional[Path] = None) -> None:
        """`path` is to take the place of `replaces` (None: of no file)."""
        if replaces is not None and os.path.lexists(replaces):
            ids = tuple(os.lstat(replaces)[4:6])
            if not path.is_symlink() and replaces.exists():
                shutil.copymode(replaces, path)
        else:
            ids = self.ids
            if not path.is_symlink():
                os.chmod(path, self.file_mode)
        self._chown(path, ids)


def _make_dir(path: Path, owner: _Owner) -> None:
    _step("mkdir", path)
    os.mkdir(path)
    owner.new_dir(path)


def _write_atomic(target: Path, data: Content, number: int, owner: _Owner) -> None:
    tmp = _tmp_path(target, number)
    if not target.parent.is_dir():  # a rollback into a directory gone since
        _step("mkdir", target.parent)
        target.parent.mkdir(parents=True, exist_ok=True)
    _step("write", tmp)
    try:
        if isinstance(data, Link):
            os.symlink(data.target, tmp)
        else:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        owner.new_file(tmp, replaces=target)
        _step("rename", target)
        os.replace(tmp, target)
    except BaseException:
        # Free the space at once: a full disk must not keep the half file.
        if os.path.lexists(tmp):
            _step("unlink", tmp)
            tmp.unlink()
        raise


def _signature(path: Path) -> Optional[tuple]:
    """Which file is at `path`, and whether it was written since (not its
    ctime: linking it into the journal changes that)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _keep_original(source: Path, saved: Path) -> Optional[tuple]:
    """Keep the file itself (a symbolic link stays a link); its signature
    as it was before it was kept."""
    seen = _signature(source)
    _step("link", saved)
    try:
        os.link(source, saved, follow_symlinks=False)
    except OSError:  # no hard links here (or across a mount): copy
        if source.is_symlink():
            os.symlink(os.readlink(source), saved)
        else:
            shutil.copy2(source, saved)
    return seen


def _content_hash(path: Path, origin: Path) -> Optional[str]:
    """sha256 of what reading `path` gives, a symbolic link read as if it
    stood at `origin` (a kept original's relative link points from there)."""
    if path.is_symlink():
        target = Path(os.readlink(path))
        return sha256_file(target if target.is_absolute() else origin.parent / target)
    return sha256_file(path)


# --- reading a journal -------------------------------------------------------

# One journaled file: its path (relative to the package), whether it existed,
# and where its original is kept.
_Entry = Tuple[str, bool, Path]


@dataclass
class _Plan:
    entries: List[_Entry]
    made_dirs: List[str]
    copies: bool = False  # 0.1.0: the originals are copies, put back by writing


def unreadable_journal(journal: Path, why: str) -> SglpatchError:
    return SglpatchError(
        f"{journal} is a journal this sglpatch cannot read ({why}); files of the "
        f"package may be half replaced: reinstall sglang, then delete {journal}"
    )


def _load_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None


def _plan_of(journal: Path, index, allowed: Iterable[str]) -> _Plan:
    """Our own index: {"entries": [{"path", "existed"[, "removed"]}], "made_dirs"}."""
    entries = index.get("entries") if isinstance(index, dict) else None
    made = index.get("made_dirs", []) if isinstance(index, dict) else None
    if not isinstance(entries, list) or not isinstance(made, list) or not all(
        isinstance(e, dict) and isinstance(e.get("path"), str)
        and isinstance(e.get("existed"), bool) for e in entries
    ):
        raise unreadable_journal(journal, f"{_INDEX} is not valid JSON, or not in a "
                                          f"format this sglpatch knows")
    allowed = set(allowed)
    paths = [e["path"] for e in entries]
    if not all(inside_package(p) or p in allowed for p in paths) or not all(
            inside_package(p) for p in made):
        raise unreadable_journal(journal, f"{_INDEX} names a path outside the package")
    return _Plan(
        [(e["path"], e["existed"], journal / _SAVED / str(n)) for n, e in enumerate(entries)],
        made,
    )


def _old_plan(journal: Path, allowed: Iterable[str]) -> Optional[_Plan]:
    """sglpatch 0.1.0's journal; None when there is nothing to put back."""
    index = _load_json(journal / _OLD_INDEX)
    files = index.get("files") if isinstance(index, dict) else None
    if not isinstance(files, dict) or not all(isinstance(v, bool) for v in files.values()):
        raise unreadable_journal(journal, f"sglpatch 0.1.0's {_OLD_INDEX} is not valid "
                                          f"JSON, or not in its format")
    allowed = set(allowed)
    if not all(inside_package(p) or p in allowed for p in files):
        raise unreadable_journal(journal, f"{_OLD_INDEX} names a path outside the package")
    entries = [(rel, existed, journal / _OLD_SAVED / rel) for rel, existed in files.items()]
    if any(existed and not saved.is_file() for _, existed, saved in entries):
        # 0.1.0 deletes its journal only once the package is whole again
        # (committed, or rolled back): a copy already gone says it was.
        return None
    return _Plan(entries, [], copies=True)


def _read_journal(root: Path, allowed: Iterable[str]) -> Optional[_Plan]:
    """What rolling back the journal means; None: nothing to put back."""
    journal = root / JOURNAL_DIR
    if not journal.is_dir() or journal.is_symlink():
        raise unreadable_journal(journal, "not a directory")
    if os.path.lexists(journal / _INDEX):
        return _plan_of(journal, _load_json(journal / _INDEX), allowed)
    if os.path.lexists(journal / _OLD_INDEX):
        return _old_plan(journal, allowed)
    if os.path.lexists(journal / _SAVED):
        raise unreadable_journal(journal, f"it has no {_INDEX}")
    # sglpatch 0.1.0 died writing its journal: the package was not touched.
    return None


def journal_problem(root: Path, allowed: Iterable[str] = ()) -> Optional[str]:
    """Why the journal in root cannot be rolled back, if it cannot."""
    if not journal_present(root):
        return None
    try:
        _read_journal(root, allowed)
    except SglpatchError as e:
        return str(e)
    return None


# --- rolling back, and finishing ---------------------------------------------


def _rollback(root: Path, plan: Optional[_Plan], owner: _Owner,
              theirs: Iterable[int] = ()) -> None:
    """Put every journaled file back; repeatable if it is itself interrupted.
    `theirs`: entries another program wrote since, left as that program left
    them (known only to the run that is rolling back its own change)."""
    journal = root / JOURNAL_DIR
    theirs = set(theirs)
    for number, (rel, existed, saved) in enumerate(plan.entries if plan else []):
        if number in theirs:
            continue
        target = root / rel
        for tmp in (_tmp_path(target, number), target.with_name(target.name + _OLD_TMP_SUFFIX)):
            if os.path.lexists(tmp):
                _step("unlink", tmp)
                tmp.unlink()
        if not existed:
            if os.path.lexists(target):
                _step("unlink", target)
                target.unlink()
        elif plan.copies:
            _write_atomic(target, saved.read_bytes(), number, owner)
        elif os.path.lexists(saved):  # else: already moved back by an earlier try
            if not target.parent.is_dir():
                _step("mkdir", target.parent)
                target.parent.mkdir(parents=True, exist_ok=True)
            _step("rename", target)
            os.replace(saved, target)
    for rel in reversed(plan.made_dirs if plan else []):
        directory = root / rel
        if directory.is_dir() and not any(directory.iterdir()):
            _step("rmdir", directory)
            directory.rmdir()
    _step("rename", root / _DONE)
    os.replace(journal, root / _DONE)
    _finish(root)


def _finish(root: Path) -> None:
    """After the commit (or a rollback): the directories that removed files
    left empty (a `__pycache__`, the kept originals) go, then the journal.
    In this order, a run killed here is finished by the next one: the
    journal still says which files went."""
    done = root / _DONE
    index = _load_json(done / _INDEX) if (done / _INDEX).is_file() else None
    entries = index.get("entries") if isinstance(index, dict) else None
    if isinstance(entries, list):
        _remove_empty_parents(root, [
            e["path"] for e in entries
            if isinstance(e, dict) and e.get("removed") is True and inside_package(e.get("path"))
        ])
    _remove_tree(done)


def _remove_empty_parents(root: Path, removed: List[str]) -> None:
    """Directories left empty by removed files go too: an empty directory
    would outlive `pip uninstall`."""
    for rel in removed:
        parent = (root / rel).parent
        while parent != root and parent.is_dir() and not parent.is_symlink() \
                and not any(parent.iterdir()):
            _step("rmdir", parent)
            parent.rmdir()
            parent = parent.parent


def recover_interrupted(root: Path, allowed: Iterable[str] = ()) -> bool:
    """Finish what a dead process left behind. True if there was anything.

    Call only while holding the package's exclusive lock: then the journal's
    writer is known to be dead. `allowed`: paths outside the package that a
    journal may name (pip's RECORD). A journal that cannot be read is left
    as it is, and the error says what to do.
    """
    found = leftovers(root)
    if not found:
        return False
    plan = _read_journal(root, allowed) if JOURNAL_DIR in found else None
    with _signals_deferred():
        _finish(root)  # a .done first: the rollback below renames onto it
        _remove_tree(root / _NEW)  # died while writing the journal: nothing touched
        if JOURNAL_DIR in found:
            _rollback(root, plan, _Owner(root))
    return True


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
    """Hold back Ctrl-C and SIGTERM while the package is being changed: the
    transaction is short, and finishing it (or rolling it back), clean-up
    included, beats leaving a journal for the next run. A signal that came
    meanwhile is raised again at the end, to the handler it was meant for.

    In the main thread by catching the signals (a mask would hold them back
    from this thread only: another thread would take them at once); in any
    other thread, where Python cannot set handlers, by masking them."""
    wanted = (signal.SIGINT, signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread():
        with _signals_masked(wanted):
            yield
        return
    held: List[int] = []
    old = {}
    try:
        for signum in wanted:
            if signal.getsignal(signum) not in (signal.SIG_IGN, None):
                old[signum] = signal.signal(signum, lambda n, frame: held.append(n))
        yield
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(held):
            signal.raise_signal(signum)


@contextmanager
def _signals_masked(wanted) -> Iterator[None]:
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, wanted)
    except (AttributeError, ValueError, OSError):
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def changed_under_us(rel: str, done: str) -> SglpatchError:
    return SglpatchError(
        f"{rel} was changed by another program while sglpatch worked on the package "
        f"(an editor, an older sglpatch, which takes no lock?); {done}; try again "
        f"when nothing else writes to it"
    )


def _journal(root: Path, entries: List[dict], made_dirs: List[str],
             expected: Dict[str, Optional[str]], owner: _Owner) -> Dict[str, Optional[tuple]]:
    """Write the complete journal under its `.new` name, and check that each
    original is still what the caller read; the signatures of the files the
    caller read, to check again right before each is replaced."""
    staging = root / _NEW
    signatures = {}
    try:
        _make_dir(staging, owner)
        _make_dir(staging / _SAVED, owner)
        for number, entry in enumerate(entries):
            if entry["existed"]:
                signatures[entry["path"]] = _keep_original(
                    root / entry["path"], staging / _SAVED / str(number))
            else:
                signatures[entry["path"]] = None
        for number, entry in enumerate(entries):
            rel = entry["path"]
            if rel in expected:
                saved = staging / _SAVED / str(number)
                seen = _content_hash(saved, root / rel) if entry["existed"] else None
                if seen != expected[rel]:
                    raise changed_under_us(rel, "nothing changed")
        _step("write", staging / _INDEX)
        with open(staging / _INDEX, "w", encoding="utf-8") as f:
            json.dump({"entries": entries, "made_dirs": made_dirs}, f)
            f.flush()
            os.fsync(f.fileno())
        owner.new_file(staging / _INDEX)
        _fsync_dir(staging / _SAVED)
        _fsync_dir(staging)
    except BaseException:
        _remove_tree(staging)
        raise
    return {rel: sig for rel, sig in signatures.items() if rel in expected}


def replace_files(
    root: Path,
    new_contents: Dict[str, Content],
    expected: Optional[Dict[str, Optional[str]]] = None,
) -> None:
    """Give each file (relative to root) its new content (None: no file), or
    change none of them. `expected`: the sha256 (None: absent) that some of
    them must still have, as the caller read them. Call only while holding
    the package's exclusive lock."""
    owner = _Owner(root)
    entries = []
    for rel, data in new_contents.items():
        existed = os.path.lexists(root / rel)
        entries.append({"path": rel, "existed": existed})
        if existed and data is None:
            entries[-1]["removed"] = True
    made_dirs = _missing_dirs(
        root, [rel for rel, data in new_contents.items() if data is not None]
    )
    with _signals_deferred():
        signatures = _journal(root, entries, made_dirs, expected or {}, owner)
        # The journal is complete from here on: the next command rolls it back.
        _step("rename", root / JOURNAL_DIR)
        os.replace(root / _NEW, root / JOURNAL_DIR)
        _fsync_dir(root)
        started, theirs = 0, []
        try:
            for rel in made_dirs:
                _make_dir(root / rel, owner)
            for number, (rel, data) in enumerate(new_contents.items()):
                target = root / rel
                if rel in signatures and _signature(target) != signatures[rel]:
                    raise changed_under_us(rel, "rolled back, nothing changed")
                started = number + 1
                if data is None:
                    if os.path.lexists(target):
                        _step("unlink", target)
                        target.unlink()
                else:
                    _write_atomic(target, data, number, owner)
            for directory in {(root / rel).parent for rel in new_contents}:
                if directory.is_dir():
                    _fsync_dir(directory)
            theirs = [number for number, (rel, data) in enumerate(new_contents.items())
                      if _content_hash(root / rel, root / rel)
                      != sha256_bytes(content_bytes(data))]
            if theirs:
                raise changed_under_us(list(new_contents)[theirs[0]],
                                       "rolled back, nothing changed")
        except BaseException:
            plan = _plan_of(root / JOURNAL_DIR, {"entries": entries, "made_dirs": made_dirs},
                            allowed=new_contents)
            _rollback(root, plan, owner, theirs=theirs + list(range(started, len(entries))))
            raise
        # The commit point.
        _step("rename", root / _DONE)
        os.replace(root / JOURNAL_DIR, root / _DONE)
        _fsync_dir(root)
        _finish(root)
