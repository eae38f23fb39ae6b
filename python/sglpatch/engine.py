"""apply / revert / status / check on one sglang package."""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

from sglpatch import __version__
from sglpatch.errors import SglpatchError
from sglpatch.series import PATCHES_DIR, Series, load_series, sha256_bytes
from sglpatch.staging import run_in_scratch
from sglpatch.status import (
    APPLIED,
    CONFLICTING,
    PatchStatus,
    current_hashes,
    patch_statuses,
)
from sglpatch.target import (
    SglangPackage,
    default_sglang_dir,
    open_sglang,
    require_version,
    unwritable_dirs,
)
from sglpatch.txn import JOURNAL_DIR, recover_interrupted, replace_files

# Lives inside the target package, like patch-package's state file.
STATE_FILE = ".sglpatch-state.json"

Progress = Callable[[str], None]


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
    state: Optional[dict]
    recovered: bool

    def applied_prefix(self) -> int:
        """How many leading patches are applied; refuse any other shape."""
        conflicting = [s for s in self.statuses if s.state == CONFLICTING]
        if conflicting:
            foreign = sorted({f for s in conflicting for f in s.foreign_files})
            if foreign:
                hint = ""
                if self.state and self.state.get("applied") != _applied_record(
                    self.series.patches
                ):
                    hint = (
                        f" (it was patched by sglpatch "
                        f"{self.state.get('sglpatch_version')} with another series)"
                    )
                raise SglpatchError(
                    f"{len(foreign)} file(s) the series touches differ from both "
                    f"their pristine and their patched form{hint}: "
                    + ", ".join(foreign[:5])
                    + (" ..." if len(foreign) > 5 else "")
                    + "; restore them (e.g. reinstall sglang) and try again"
                )
            names = ", ".join(s.name for s in conflicting)
            raise SglpatchError(f"patches only partly applied: {names}")
        prefix = 0
        while prefix < len(self.statuses) and self.statuses[prefix].state == APPLIED:
            prefix += 1
        if any(s.state == APPLIED for s in self.statuses[prefix:]):
            raise SglpatchError(
                "the package has later patches of the series without earlier ones"
            )
        return prefix


def _applied_record(patches) -> list:
    return [{"name": p.name, "sha256": p.sha256} for p in patches]


def read_state(root: Path) -> Optional[dict]:
    path = root / STATE_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return {"unreadable": True}


def survey(
    sglang_dir: Optional[str],
    patches_dir: Path = PATCHES_DIR,
    read_only: bool = False,
) -> Survey:
    """Read the package; unless read_only, first roll back an interrupted run."""
    series = load_series(patches_dir)
    pkg = open_sglang(sglang_dir)
    if not read_only:
        require_version(pkg, series.base_version)
    recovered = False if read_only else recover_interrupted(pkg.root)
    statuses = patch_statuses(series, current_hashes(pkg.root, series))
    return Survey(pkg, series, statuses, read_state(pkg.root), recovered)


def _require_writable(pkg: SglangPackage, files: List[str]) -> None:
    blocked = unwritable_dirs(pkg.root, files)
    if blocked:
        raise SglpatchError(
            "cannot write to " + ", ".join(blocked) + " (read-only sglang install?)"
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


def _state_bytes(pkg: SglangPackage, series: Series, before, after) -> bytes:
    state = {
        "sglpatch_version": __version__,
        "sglang_version": pkg.version,
        "applied": _applied_record(series.patches),
        "files": {rel: {"before": before[rel], "after": after[rel]} for rel in after},
    }
    return (json.dumps(state, indent=2, sort_keys=True) + "\n").encode()


def apply(
    sglang_dir: Optional[str] = None,
    dry_run: bool = False,
    progress: Progress = _quiet,
    patches_dir: Path = PATCHES_DIR,
) -> Outcome:
    s = survey(sglang_dir, patches_dir)
    if s.recovered:
        progress("rolled back an interrupted sglpatch run found in the package")
    done = s.applied_prefix()
    series = s.series
    todo = series.patches[done:]
    if not todo:
        return Outcome(
            f"all {len(series.patches)} patches already applied to {s.pkg.root}; "
            f"nothing changed",
            changed=s.recovered,
        )
    _require_writable(s.pkg, _files_of(todo) + [STATE_FILE])
    new = _staged(s, todo, series.final_hashes(), progress=progress)
    names = ", ".join(p.name.split("-", 1)[0] for p in todo)
    if dry_run:
        return Outcome(
            f"dry run: patches {names} apply cleanly to {s.pkg.root} "
            f"({len(new)} files); nothing changed",
            changed=False,
        )
    progress(f"writing {len(new)} files")
    contents = dict(new)
    contents[STATE_FILE] = _state_bytes(
        s.pkg,
        series,
        before=series.pristine_hashes(),
        after=series.final_hashes(),
    )
    replace_files(s.pkg.root, contents)
    return Outcome(f"applied patches {names} to {s.pkg.root}", changed=True)


def revert(
    sglang_dir: Optional[str] = None,
    progress: Progress = _quiet,
    patches_dir: Path = PATCHES_DIR,
) -> Outcome:
    s = survey(sglang_dir, patches_dir)
    if s.recovered:
        progress("rolled back an interrupted sglpatch run found in the package")
    done = s.applied_prefix()
    applied = s.series.patches[:done]
    state_present = (s.pkg.root / STATE_FILE).exists()
    if not applied:
        if state_present:
            _require_writable(s.pkg, [STATE_FILE])
            replace_files(s.pkg.root, {STATE_FILE: None})
        return Outcome(f"no patch is applied to {s.pkg.root}; nothing to revert",
                       changed=state_present or s.recovered)
    _require_writable(s.pkg, _files_of(applied) + [STATE_FILE])
    new = _staged(
        s, applied, s.series.pristine_hashes(), reverse=True, progress=progress
    )
    progress(f"restoring {len(new)} files")
    contents = dict(new)
    contents[STATE_FILE] = None
    replace_files(s.pkg.root, contents)
    return Outcome(
        f"reverted {len(applied)} patches; {len(new)} files are byte-identical "
        f"to sglang {s.pkg.version}",
        changed=True,
    )


def status_report(sglang_dir: Optional[str] = None,
                  patches_dir: Path = PATCHES_DIR) -> dict:
    s = survey(sglang_dir, patches_dir, read_only=True)
    return {
        "sglang_version": s.pkg.version,
        "sglang_dir": str(s.pkg.root),
        "series_base_version": s.series.base_version,
        "version_supported": s.pkg.version == s.series.base_version,
        "state_file": s.state is not None,
        # A journal left by a killed run; the next apply/revert rolls it back.
        "interrupted_run_pending": (s.pkg.root / JOURNAL_DIR).exists(),
        "patches": [
            {
                "name": st.name,
                "status": st.state,
                "files": st.files,
                "locally_modified": st.foreign_files,
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
    s = survey(sglang_dir, patches_dir)
    done = s.applied_prefix()
    if done == len(series.patches):
        return Outcome(f"series OK and fully applied to {s.pkg.root}", changed=False)
    todo = series.patches[done:]
    _staged(s, todo, series.final_hashes())
    return Outcome(
        f"series OK; {len(todo)} patches not yet applied to {s.pkg.root} apply cleanly",
        changed=False,
    )


