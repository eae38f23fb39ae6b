"""apply / revert / status / check on one sglang package."""

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from sglpatch import __version__
from sglpatch.bytecode import prefixed_bytecode, stale_bytecode
from sglpatch.errors import SglpatchError
from sglpatch.lock import package_lock
from sglpatch.pip_record import find_record, record_candidates, record_rel, updated_record
from sglpatch.series import (
    PATCHES_DIR,
    UPSTREAM_PREFIX,
    Series,
    load_series,
    sha256_bytes,
    sha256_file,
)
from sglpatch.staging import run_in_scratch
from sglpatch.state import (
    STATE_FILE,
    STORE_DIR,
    NewState,
    State,
    read_state,
    store_path,
    stored_pristine,
)
from sglpatch.status import (
    APPLIED,
    PARTLY_APPLIED,
    PatchStatus,
    current_hashes,
    patch_statuses,
)
from sglpatch.target import (
    SglangPackage,
    default_sglang_dir,
    open_sglang,
    require_version,
    unchangeable_files,
    unwritable_dirs,
)
from sglpatch.txn import (
    Content,
    Link,
    changed_under_us,
    content_bytes,
    journal_present,
    journal_problem,
    leftovers,
    recover_interrupted,
    replace_files,
)

Progress = Callable[[str], None]
# Room the journal's index and directories need beyond the new files' bytes.
_SPACE_MARGIN = 1 << 20
RECOVER_HINT = ("the next `sglpatch apply` or `sglpatch revert` finishes it first "
                "(rolls the package back to where it was, unless that run had committed)")


def _quiet(msg: str) -> None:
    pass


@dataclass
class Outcome:
    message: str
    changed: bool


@dataclass
class Survey:
    """What a package holds, as seen against the series."""

    pkg: SglangPackage
    series: Series
    statuses: List[PatchStatus]
    state: Optional[State]
    hashes: Dict[str, Optional[str]]  # each touched file's sha256 as surveyed

    def applied_prefix(self) -> int:
        """How many leading patches are applied; refuse any other shape."""
        edited = sorted({f for s in self.statuses for f in s.locally_edited})
        if edited:
            raise SglpatchError(
                f"{len(edited)} file(s) the series touches are locally edited (they "
                f"differ from both their pristine and their patched form)"
                f"{self._other_series_hint()}: "
                + ", ".join(edited[:5])
                + (" ..." if len(edited) > 5 else "")
                + "; restore them (e.g. reinstall sglang) and try again"
            )
        partly = [s.name for s in self.statuses if s.status == PARTLY_APPLIED]
        if partly:
            raise SglpatchError(
                f"patches only partly applied: {', '.join(partly)}; restore the "
                f"files (e.g. reinstall sglang) and try again"
            )
        prefix = _prefix_length(self.statuses)
        if any(s.status == APPLIED for s in self.statuses[prefix:]):
            raise SglpatchError(
                "the package has later patches of the series without earlier ones"
            )
        return prefix

    def _other_series_hint(self) -> str:
        state = self.state
        if state is None or state.problem:
            return ""
        if state.applied == _applied_record(self.series.patches[: len(state.applied)]):
            return ""
        if state.format < 2:
            return (f" (it was patched by {state.written_by()} with another series, and "
                    f"that release kept no copies of the pristine files: revert with "
                    f"{state.written_by()}, or reinstall sglang)")
        if stored_pristine(self.pkg.root, state) is None:
            return (f" (it was patched by {state.written_by()} with another series, and "
                    f"the copies of the pristine files it kept are incomplete: "
                    f"reinstall sglang)")
        return (f" (it was patched by {state.written_by()} with another series; "
                f"`sglpatch revert` undoes that from the copies kept in the package)")

    def skipped_note(self, patches) -> str:
        skipped = [rel for p in patches for rel in p.not_installed]
        if not skipped:
            return ""
        return (f"; skipped {len(skipped)} file(s) outside {UPSTREAM_PREFIX} "
                f"(upstream's tests: not part of an installed package)")


def _prefix_length(statuses: List[PatchStatus]) -> int:
    prefix = 0
    while prefix < len(statuses) and statuses[prefix].status == APPLIED:
        prefix += 1
    return prefix


def _applied_record(patches) -> list:
    return [{"name": p.name, "sha256": p.sha256} for p in patches]


def _numbers(patches) -> str:
    return ", ".join(p.number for p in patches)


@contextmanager
def _prologue(
    sglang_dir: Optional[str],
    patches_dir: Path,
    write: bool,
    progress: Progress = _quiet,
) -> Iterator[Survey]:
    """Every command's prologue: verify the series, open the package and hold
    its lock for the whole command (exclusive to write). Only a writer rolls
    back a journal, and only under the lock, i.e. when its writer is dead."""
    series = load_series(patches_dir)
    pkg = open_sglang(sglang_dir)
    with package_lock(pkg.root, exclusive=write):
        if write and recover_interrupted(pkg.root, record_candidates(pkg)):
            progress("finished an interrupted sglpatch run found in the package "
                     "(rolled back unless it had committed)")
        hashes = current_hashes(pkg.root, series)
        statuses = patch_statuses(series, hashes)
        yield Survey(pkg, series, statuses, read_state(pkg.root), hashes)


def _journal_problem(s: Survey) -> Optional[str]:
    """Why the journal in the package cannot be rolled back, if it cannot."""
    if not journal_present(s.pkg.root):
        return None
    return journal_problem(s.pkg.root, record_candidates(s.pkg))


def _refuse_if_interrupted(s: Survey) -> None:
    """Read-only commands change nothing, a journal's rollback included."""
    left = leftovers(s.pkg.root)
    if left:
        problem = _journal_problem(s)
        if problem:
            raise SglpatchError(problem)
        raise SglpatchError(
            f"an interrupted sglpatch run left {', '.join(left)} in {s.pkg.root}; "
            f"{RECOVER_HINT}"
        )


def _files_of(patches) -> List[str]:
    return list(dict.fromkeys(rel for p in patches for rel in p.files))


def _staged(
    s: Survey,
    patches,
    expected: Dict[str, Optional[str]],
    reverse: bool = False,
    progress: Progress = _quiet,
) -> Dict[str, Optional[bytes]]:
    """Apply (or reverse) `patches` in scratch; the results, checked against
    the manifest's hashes. The package itself is not touched."""
    order = list(reversed(patches)) if reverse else list(patches)
    new = run_in_scratch(
        s.pkg.root, _files_of(patches), order, reverse=reverse, progress=progress
    )
    for rel, data in new.items():
        if sha256_bytes(data) != expected[rel]:
            raise SglpatchError(
                f"the result for {rel} does not match the manifest; "
                f"the series is inconsistent (re-export it)"
            )
    return new


@dataclass
class _Change:
    """Everything one command writes (None: removes), in one transaction."""

    contents: Dict[str, Content]
    # The sha256 (None: absent) that files must still have when written over:
    # what this command read them as.
    expected: Dict[str, Optional[str]] = field(default_factory=dict)
    forget: Tuple[str, ...] = ()  # RECORD rows to drop, whether the files exist or not
    bytecode: List[str] = field(default_factory=list)  # removed: stale .pyc
    prefixed: List[Path] = field(default_factory=list)  # the same, under a pycache prefix

    def finish(self, pkg: SglangPackage) -> None:
        """Bytecode and pip's RECORD follow the files; then check and write."""
        root = pkg.root
        touched = [rel for rel in self.contents if not rel.startswith(STORE_DIR)]
        self.bytecode = [b for b in stale_bytecode(root, touched) if b not in self.contents]
        self.prefixed = prefixed_bytecode(pkg.spellings(), touched)
        found = find_record(pkg)
        if found is not None:
            record, name = found
            data = record.read_bytes()
            rel = record_rel(root, record)
            self.expected[rel] = sha256_bytes(data)
            self.contents[rel] = updated_record(
                data, name, {r: content_bytes(v) for r, v in self.contents.items()},
                forget=self.forget,
            )
        for rel in self.bytecode:
            self.contents[rel] = None
        _require_changeable(root, list(self.contents))
        _require_space(root, self.contents)

    def write(self, root: Path, progress: Progress) -> None:
        self._remove_prefixed(progress)
        progress(f"writing {len(self.contents)} files")
        try:
            replace_files(root, self.contents, self.expected)
        except OSError as e:
            where = f" ({e.filename})" if e.filename else ""
            if leftovers(root):
                raise SglpatchError(
                    f"could not write to {root}: {e.strerror or e}{where}; the "
                    f"rollback failed too, and {RECOVER_HINT}"
                ) from None
            raise SglpatchError(
                f"could not write to {root}: {e.strerror or e}{where}; "
                f"rolled back, nothing changed"
            ) from None

    def _remove_prefixed(self, progress: Progress) -> None:
        """Bytecode outside the package is a cache: removed first, not journaled."""
        kept = []
        for path in self.prefixed:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as e:
                kept.append(path)
                progress(f"warning: could not remove {path} ({e.strerror or e}); "
                         f"Python may run the old code from it: delete it")
        self.prefixed = [p for p in self.prefixed if p not in kept]

    def bytecode_note(self) -> str:
        count = len(self.bytecode) + len(self.prefixed)
        if not count:
            return ""
        where = " and the pycache prefix" if self.prefixed else ""
        return (f"; removed {count} compiled bytecode file(s) of the changed modules "
                f"(__pycache__{where})")


def _require_changeable(root: Path, files: List[str]) -> None:
    blocked = unwritable_dirs(root, files)
    if blocked:
        raise SglpatchError(
            "cannot write to " + ", ".join(blocked) + " (read-only sglang install?)"
        )
    frozen = unchangeable_files(root, [f for f in files if (root / f).exists()])
    if frozen:
        raise SglpatchError(
            "marked immutable or append-only (chattr): " + ", ".join(frozen[:5])
        )


def _require_space(root: Path, contents: Dict[str, Content]) -> None:
    """Refuse up front: a full disk half-way is rolled back, but need not be met."""
    need = sum(len(content_bytes(d)) for d in contents.values() if d is not None)
    need += _SPACE_MARGIN
    st = os.statvfs(root)
    free = st.f_bavail * st.f_frsize
    if free < need:
        raise SglpatchError(
            f"not enough free space for {root}: the change needs about "
            f"{need / 2**20:.1f} MiB, {free / 2**20:.1f} MiB is free; nothing changed"
        )


def _read(path: Path) -> Optional[bytes]:
    return path.read_bytes() if path.is_file() else None


def _pristine_bytes(s: Survey, done: int, files: List[str]) -> Dict[str, Optional[bytes]]:
    """Pristine content of `files`, each checked against the manifest: the
    package's kept copies, or the files themselves where no applied patch
    touched them, or reversed in scratch."""
    want = s.series.pristine_hashes()
    kept = stored_pristine(s.pkg.root, s.state) or {}
    applied_files = set(_files_of(s.series.patches[:done]))
    pristine, missing = {}, []
    for rel in files:
        if rel not in applied_files:
            data = _read(s.pkg.root / rel)
            if sha256_bytes(data) != want[rel]:  # it was pristine in the survey
                raise changed_under_us(rel, "nothing changed")
            pristine[rel] = data
        elif rel in kept and sha256_bytes(kept[rel]) == want[rel]:
            pristine[rel] = kept[rel]
        else:
            missing.append(rel)
    if missing:
        reversed_ = _staged(s, s.series.patches[:done], want, reverse=True)
        pristine.update({rel: reversed_[rel] for rel in missing})
    return pristine


def _links(s: Survey, done: int, files: List[str]) -> Dict[str, str]:
    """The touched files that were symbolic links before sglpatch replaced
    them, and the links' text: read from the package, or from the state
    file for the files an applied patch replaced already."""
    applied_files = set(_files_of(s.series.patches[:done]))
    recorded = s.state.files if s.state is not None and not s.state.problem else {}
    links = {}
    for rel in files:
        path = s.pkg.root / rel
        if rel in applied_files:
            link = recorded.get(rel, {}).get("link")
        else:
            link = os.readlink(path) if path.is_symlink() else None
        if link:
            links[rel] = link
    return links


def _store_contents(root: Path, pristine: Dict[str, Optional[bytes]]) -> Dict[str, bytes]:
    """Copies of the pristine files that the package does not keep yet."""
    store = {}
    for data in pristine.values():
        if data is None:
            continue
        digest = sha256_bytes(data)
        if sha256_file(root / store_path(digest)) != digest:
            store[store_path(digest)] = data
    return store


def apply(
    sglang_dir: Optional[str] = None,
    dry_run: bool = False,
    progress: Progress = _quiet,
    patches_dir: Path = PATCHES_DIR,
    through: Optional[str] = None,
) -> Outcome:
    """Apply the series (or its patches up to `through`) from wherever it is."""
    with _prologue(sglang_dir, patches_dir, write=not dry_run, progress=progress) as s:
        require_version(s.pkg, s.series.base_version)
        if dry_run:
            _refuse_if_interrupted(s)
        series, root = s.series, s.pkg.root
        goal = series.count_through(through) if through is not None else len(series.patches)
        done = s.applied_prefix()
        if done > goal:
            raise SglpatchError(
                f"patches {_numbers(series.patches[:done])} are applied to {root}, "
                f"more than --through {through}; `sglpatch revert` first"
            )
        todo = series.patches[done:goal]
        if not todo:
            return Outcome(
                f"patches {_numbers(series.patches[:goal])} already applied to "
                f"{root}; nothing changed",
                changed=False,
            )
        # Refused before any work; _Change.finish checks again, in full.
        _require_changeable(root, _files_of(todo) + [STATE_FILE])
        after = series.hashes_after(goal)
        new = _staged(s, todo, after, progress=progress)
        names = _numbers(todo)
        skipped = s.skipped_note(todo)
        change = _Change(dict(new), expected={rel: s.hashes[rel] for rel in new})
        files = _files_of(series.patches[:goal])
        pristine = _pristine_bytes(s, done, files)
        links = _links(s, done, files)
        change.contents.update(_store_contents(root, pristine))
        new_state = NewState(
            sglang_version=s.pkg.version,
            applied=_applied_record(series.patches[:goal]),
            files={rel: {"before": sha256_bytes(pristine[rel]), "after": after[rel],
                         **({"link": links[rel]} if rel in links else {})}
                   for rel in files},
        )
        change.contents[STATE_FILE] = new_state.to_bytes()
        change.expected[STATE_FILE] = s.state.digest if s.state is not None else None
        change.finish(s.pkg)  # refuses here what the writing would meet
        if dry_run:
            return Outcome(
                f"dry run: patches {names} apply cleanly to {root} ({len(new)} "
                f"files){skipped}; nothing changed",
                changed=False,
            )
        change.write(root, progress)
        return Outcome(
            f"applied patches {names} to {root}{skipped}{change.bytecode_note()}",
            changed=True,
        )


def _sglpatch_leftovers(root: Path) -> Dict[str, None]:
    """The state file and kept copies, to be removed."""
    gone: Dict[str, None] = {}
    if os.path.lexists(root / STATE_FILE):
        gone[STATE_FILE] = None
    store = root / STORE_DIR
    if store.is_dir() and not store.is_symlink():
        for path in sorted(store.rglob("*")):
            if path.is_symlink() or path.is_file():
                gone[str(path.relative_to(root))] = None
    return gone


def _empty_store(root: Path) -> bool:
    """A kept-copies directory with no file in it (left by an older sglpatch
    killed while it cleaned up)."""
    store = root / STORE_DIR
    return (store.is_dir() and not store.is_symlink()
            and not any(p.is_symlink() or not p.is_dir() for p in store.rglob("*")))


def _remove_empty_store(root: Path) -> bool:
    if not _empty_store(root):
        return False
    for directory in sorted((root / STORE_DIR).rglob("*"), reverse=True):
        directory.rmdir()
    (root / STORE_DIR).rmdir()
    return True


@dataclass
class _Restore:
    """What revert writes back, and what it read the files as."""

    contents: Dict[str, Content]
    count: int  # patches reverted
    expected: Dict[str, Optional[str]]
    unchecked: List[str] = field(default_factory=list)  # not in this manifest


def revert(
    sglang_dir: Optional[str] = None,
    progress: Progress = _quiet,
    patches_dir: Path = PATCHES_DIR,
) -> Outcome:
    """Take the package back to pristine from wherever it is."""
    with _prologue(sglang_dir, patches_dir, write=True, progress=progress) as s:
        root = s.pkg.root
        if s.state is not None:
            _require_changeable(root, list(s.state.files) + [STATE_FILE])
        plan = _revert_plan(s, progress)
        change = _Change(dict(plan.contents), expected=dict(plan.expected),
                         forget=(STORE_DIR + "/", STATE_FILE))
        change.contents.update(_sglpatch_leftovers(root))
        if s.state is not None:
            change.expected[STATE_FILE] = s.state.digest
        if not change.contents:
            if _remove_empty_store(root):
                return Outcome(f"removed sglpatch's leftover files from {root}",
                               changed=True)
            return Outcome(f"no patch is applied to {root}; nothing to revert",
                           changed=False)
        change.finish(s.pkg)
        change.write(root, progress)
        _remove_empty_store(root)
        if not plan.contents:
            what = ("removed a stale sglpatch state file (the files were already "
                    "pristine: sglang reinstalled?)" if s.state else
                    "removed sglpatch's leftover files")
            return Outcome(f"{what} from {root}{change.bytecode_note()}", changed=True)
        return Outcome(f"reverted {plan.count} patches; {_revert_note(s, plan)}"
                       f"{change.bytecode_note()}", changed=True)


def _revert_note(s: Survey, plan: _Restore) -> str:
    """What revert can say of the files it wrote: byte-identity only where
    this sglpatch's manifest let it check."""
    checked = len(plan.contents) - len(plan.unchecked)
    parts = []
    if checked:
        parts.append(f"{checked} files are byte-identical to sglang {s.pkg.version_text} "
                     f"(checked against the manifest of sglpatch {__version__})")
    if plan.unchecked:
        names = ", ".join(plan.unchecked[:5]) + (" ..." if len(plan.unchecked) > 5 else "")
        parts.append(f"{len(plan.unchecked)} files put back from the copies "
                     f"{s.state.written_by()} kept, which this sglpatch's manifest does "
                     f"not list, so not checked: {names}")
    return "; ".join(parts)


def _manifest_pristine(s: Survey) -> Dict[str, Optional[str]]:
    """The pristine sha256 of every file the manifest knows (none when the
    package is not the version the manifest describes)."""
    if s.pkg.version != s.series.base_version:
        return {}
    return s.series.pristine_hashes()


def _revert_plan(s: Survey, progress: Progress) -> _Restore:
    copies = stored_pristine(s.pkg.root, s.state)
    if copies is None:  # none kept (sglpatch 0.1.0), or not all of them
        return _restore_by_series(s, progress)
    want = _manifest_pristine(s)
    wrong = [rel for rel, hashes in s.state.files.items()
             if rel in want and hashes.get("before") != want[rel]]
    if not wrong:
        return _restore_from_copies(s, copies, want)
    try:  # the state file is wrong about a file the manifest knows
        return _restore_by_series(s, progress)
    except SglpatchError:
        raise SglpatchError(
            f"{s.pkg.root / STATE_FILE} records {wrong[0]} as it is not in sglang "
            f"{s.series.base_version} (this sglpatch's manifest says otherwise), and "
            f"the files are not what the series makes either; the state file is "
            f"damaged: reinstall sglang"
        ) from None


def _restored(s: Survey, rel: str, data: Optional[bytes]) -> Content:
    """The pristine bytes, as the symbolic link they were read through if the
    state file records one that still reads them."""
    usable = s.state is not None and not s.state.problem
    link = s.state.files.get(rel, {}).get("link") if usable else None
    if not link or data is None:
        return data
    through = Path(link) if os.path.isabs(link) else (s.pkg.root / rel).parent / link
    return Link(link, data) if sha256_file(through) == sha256_bytes(data) else data


def _restore_from_copies(s: Survey, pristine: Dict[str, Optional[bytes]],
                         want: Dict[str, Optional[str]]) -> _Restore:
    """What to write back, from the copies the state file points at."""
    restore, expected, edited = {}, {}, []
    for rel, hashes in s.state.files.items():
        current = sha256_file(s.pkg.root / rel)
        if current == hashes.get("before"):
            continue  # already pristine (e.g. sglang was reinstalled)
        if current != hashes.get("after"):
            edited.append(rel)
        restore[rel] = _restored(s, rel, pristine[rel])
        expected[rel] = current
    if edited:
        raise SglpatchError(
            f"{len(edited)} file(s) were changed after sglpatch patched them: "
            + ", ".join(edited[:5]) + (" ..." if len(edited) > 5 else "")
            + "; restore them (e.g. reinstall sglang) and try again"
        )
    return _Restore(restore, len(s.state.applied), expected,
                    unchecked=[rel for rel in restore if rel not in want])


def _restore_by_series(s: Survey, progress: Progress) -> _Restore:
    """No usable kept copies (patched by sglpatch 0.1.0, or by hand): reverse
    the series, each result checked against the manifest."""
    done = s.applied_prefix()
    applied = s.series.patches[:done]
    if not applied:
        return _Restore({}, 0, {})
    require_version(s.pkg, s.series.base_version)
    restore = _staged(s, applied, s.series.pristine_hashes(), reverse=True,
                      progress=progress)
    return _Restore({rel: _restored(s, rel, data) for rel, data in restore.items()}, done,
                    {rel: s.hashes[rel] for rel in restore})


def _state_report(s: Survey, prefix: Optional[int]) -> Optional[dict]:
    """The state file, and whether it agrees with the files."""
    state = s.state
    if state is None:
        return None
    report = {"format": state.format, "written_by": state.written_by(),
              "applied": state.applied_names, "problem": state.problem}
    if state.problem:
        report["problem"] = (f"the state file is {state.problem}; `sglpatch revert` "
                             f"or `sglpatch apply` replaces it")
        return report
    hashes = {rel: sha256_file(s.pkg.root / rel) for rel in state.files}
    changed = [rel for rel, h in state.files.items() if h.get("before") != h.get("after")]
    # sglang's own files, and those the series created (absent when pristine,
    # unknown to sglang: a reinstall that keeps unknown files leaves them)
    shipped = [rel for rel in changed if state.files[rel].get("before") is not None]
    left = sorted(rel for rel in changed
                  if state.files[rel].get("before") is None and hashes[rel] is not None)
    if shipped and all(hashes[rel] == state.files[rel].get("before") for rel in shipped):
        report["problem"] = (
            f"the state file is stale: it says {len(state.applied)} patches are "
            f"applied, but every sglang file it lists is pristine (sglang was "
            f"reinstalled after sglpatch patched it?)"
            + (f" and only the files the series created are left ({', '.join(left)})"
               if left else "")
            + "; `sglpatch revert` removes it, `sglpatch apply` applies the series again"
        )
    elif prefix is not None and state.applied_names != [
        p.name for p in s.series.patches[:prefix]
    ]:
        report["problem"] = (
            f"the state file (written by {state.written_by()}) names other patches "
            f"than the files show; `sglpatch revert` goes back to pristine"
        )
    return report


def _leftover_names(s: Survey) -> List[str]:
    names = leftovers(s.pkg.root)
    if s.state is None and os.path.lexists(s.pkg.root / STORE_DIR):
        names.append(STORE_DIR)
    return names


def status_report(sglang_dir: Optional[str] = None,
                  patches_dir: Path = PATCHES_DIR) -> dict:
    with _prologue(sglang_dir, patches_dir, write=False) as s:
        try:
            prefix: Optional[int] = s.applied_prefix()
        except SglpatchError:
            prefix = None
        return {
            "sglang_version": s.pkg.version,
            "sglang_dir": str(s.pkg.root),
            "series_base_version": s.series.base_version,
            "version_supported": s.pkg.version == s.series.base_version,
            "state_file": s.state is not None,
            "state": _state_report(s, prefix),
            # The last patch of the applied prefix; None: none, or no prefix.
            "applied_through": s.series.patches[prefix - 1].name if prefix else None,
            # A journal left by a killed run; the next apply/revert finishes it.
            "interrupted_run_pending": bool(leftovers(s.pkg.root)),
            # Everything of sglpatch's that no run should have left: journal
            # directories, and kept copies without a state file.
            "leftovers": _leftover_names(s),
            # Why the journal cannot be rolled back, if it cannot.
            "journal_problem": _journal_problem(s),
            "patches": [
                {
                    "name": st.name,
                    "status": st.status,
                    "files": st.files,
                    "locally_edited": st.locally_edited,
                    "not_installed": st.not_installed,
                }
                for st in s.statuses
            ],
        }


def check(sglang_dir: Optional[str] = None, patches_dir: Path = PATCHES_DIR) -> Outcome:
    """Verify the series; and, with a package, that it is applied or applies."""
    series = load_series(patches_dir)
    if sglang_dir is None:
        try:
            sglang_dir = str(default_sglang_dir())
        except SglpatchError:
            return Outcome(
                f"series OK: {len(series.patches)} patches, checksums match "
                f"(no sglang found to check against)",
                changed=False,
            )
    with _prologue(sglang_dir, patches_dir, write=False) as s:
        require_version(s.pkg, series.base_version)
        _refuse_if_interrupted(s)
        done = s.applied_prefix()
        skipped = s.skipped_note(series.patches)
        if done == len(series.patches):
            return Outcome(f"series OK and fully applied to {s.pkg.root}{skipped}",
                           changed=False)
        todo = series.patches[done:]
        _staged(s, todo, series.final_hashes())
        return Outcome(
            f"series OK; patches {_numbers(todo)}, still to apply to {s.pkg.root}, "
            f"apply cleanly{skipped}",
            changed=False,
        )
