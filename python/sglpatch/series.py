"""The patch series shipped as package data: `patches/series` + `manifest.json`.

`series` lists the patch files in order (blank lines and `#` comments
ignored, a UTF-8 byte-order mark too); it must name exactly the patches of
`manifest.json`, in the manifest's order, or nothing is done (a series that
names fewer would let `check` call an unpatched package fully applied).
`manifest.json`, written by `sglpatch export`, records for every
patch its sha256 and, for every file it touches (path relative to the
`sglang/` package), the file's sha256 before and after that patch (null when
the file does not exist). The manifest is what lets `status` tell pristine,
patched and locally edited files apart without shipping sglang's sources.

A patch may also carry files outside `python/sglang/` (upstream's tests, in
`test/...`): the manifest lists those under `not_installed` (upstream paths,
no hashes), `git am` onto a checkout takes them, and the tool, which works on
an installed package, skips them. A manifest without the key has none.
"""

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from sglpatch.errors import SglpatchError
from sglpatch.paths import inside_package

PATCHES_DIR = Path(__file__).resolve().parent / "patches"
SERIES_FILE = "series"
MANIFEST_FILE = "manifest.json"
# Paths inside the patches are upstream's layout; the tool works on the package.
UPSTREAM_PREFIX = "python/sglang/"


def sha256_bytes(data: Optional[bytes]) -> Optional[str]:
    return None if data is None else hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> Optional[str]:
    return sha256_bytes(path.read_bytes()) if path.is_file() else None


@dataclass(frozen=True)
class FileChange:
    path: str  # relative to the sglang package directory
    before: Optional[str]  # sha256, None = file absent
    after: Optional[str]


@dataclass
class Patch:
    name: str
    path: Path
    sha256: str
    subject: str
    changes: List[FileChange] = field(default_factory=list)
    # Upstream paths outside python/sglang/: in the patch, not in a package.
    not_installed: List[str] = field(default_factory=list)

    @property
    def files(self) -> List[str]:
        return [c.path for c in self.changes]

    @property
    def number(self) -> str:
        return self.name.split("-", 1)[0]


@dataclass
class Series:
    base_version: str
    patches: List[Patch]

    def touched_files(self) -> List[str]:
        seen: Dict[str, None] = {}
        for patch in self.patches:
            for rel in patch.files:
                seen.setdefault(rel)
        return list(seen)

    def pristine_hashes(self) -> Dict[str, Optional[str]]:
        """sha256 of each touched file before the first patch that touches it."""
        first: Dict[str, Optional[str]] = {}
        for patch in self.patches:
            for change in patch.changes:
                first.setdefault(change.path, change.before)
        return first

    def final_hashes(self) -> Dict[str, Optional[str]]:
        return self.hashes_after(len(self.patches))

    def hashes_after(self, count: int) -> Dict[str, Optional[str]]:
        """sha256 of each file the first `count` patches touch, after them."""
        last: Dict[str, Optional[str]] = {}
        for patch in self.patches[:count]:
            for change in patch.changes:
                last[change.path] = change.after
        return last

    def count_through(self, through: str) -> int:
        """How many leading patches `--through NNNN` means (by number or name)."""
        spec = through.strip()
        if not spec:
            raise SglpatchError("--through is empty; give a patch number, e.g. 0004")
        for i, patch in enumerate(self.patches):
            if spec in (patch.name, patch.number) or (
                spec.isdigit() and patch.number.isdigit()
                and int(spec) == int(patch.number)
            ):
                return i + 1
        numbers = ", ".join(p.number for p in self.patches)
        raise SglpatchError(f"--through {through}: no such patch in the series ({numbers})")


def read_series_names(patches_dir: Path) -> List[str]:
    series_file = patches_dir / SERIES_FILE
    if not series_file.is_file():
        raise SglpatchError(f"no series file at {series_file}")
    names = []
    for line in series_file.read_text(encoding="utf-8-sig").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line)
    return names


def _require_same_patches(patches_dir: Path, names: List[str], listed: List[str]) -> None:
    """The series file and the manifest name the same patches in one order."""
    if names == listed and names:
        return
    series_file = patches_dir / SERIES_FILE
    fix = "reinstall sglpatch, or re-export the series (`sglpatch export`)"
    if not names:
        raise SglpatchError(f"{series_file} names no patch ({MANIFEST_FILE} lists "
                            f"{len(listed)}); {fix}")
    for name in names:
        if not (patches_dir / name).is_file():
            raise SglpatchError(
                f"series names {name}, but there is no such patch in {patches_dir}")
        if name not in listed:
            raise SglpatchError(f"{name} is in {series_file} but not in {MANIFEST_FILE}; {fix}")
    if len(set(names)) != len(names):
        raise SglpatchError(f"{series_file} names a patch twice; {fix}")
    if sorted(names) == sorted(listed):
        raise SglpatchError(f"{series_file} lists the patches in another order than "
                            f"{MANIFEST_FILE}; {fix}")
    missing = [name for name in listed if name not in names]
    raise SglpatchError(f"{series_file} leaves out {', '.join(missing)}, which "
                        f"{MANIFEST_FILE} lists; {fix}")


def load_series(patches_dir: Path = PATCHES_DIR) -> Series:
    """Load and verify the series; any inconsistency is a clear error."""
    try:
        return _load_series(patches_dir)
    except (KeyError, TypeError, AttributeError) as e:
        raise SglpatchError(
            f"{patches_dir / MANIFEST_FILE} is malformed ({type(e).__name__}: {e}); "
            f"run `sglpatch export`"
        ) from None


def _load_series(patches_dir: Path) -> Series:
    names = read_series_names(patches_dir)
    manifest_file = patches_dir / MANIFEST_FILE
    if not manifest_file.is_file():
        raise SglpatchError(f"no manifest at {manifest_file}; run `sglpatch export`")
    try:
        manifest = json.loads(manifest_file.read_text(encoding="utf-8-sig"))
    except ValueError as e:
        raise SglpatchError(f"{manifest_file} is not valid JSON: {e}") from None
    by_name = {entry["name"]: entry for entry in manifest["patches"]}
    _require_same_patches(patches_dir, names, [entry["name"] for entry in manifest["patches"]])

    patches = []
    for name in names:
        path = patches_dir / name
        entry = by_name[name]
        digest = sha256_file(path)
        if digest != entry["sha256"]:
            raise SglpatchError(
                f"patch file {path} is corrupted or was edited by hand "
                f"(sha256 {digest[:12]}, manifest says {entry['sha256'][:12]}); "
                f"reinstall sglpatch, or re-export the series"
            )
        changes = [
            FileChange(path=c["path"], before=c["before"], after=c["after"])
            for c in entry["files"]
        ]
        outside = [c.path for c in changes if not inside_package(c.path)]
        if outside:
            raise SglpatchError(f"{manifest_file} names a path outside the package for "
                                f"{name} ({outside[0]!r}); re-export the series")
        patches.append(
            Patch(
                name=name,
                path=path,
                sha256=digest,
                subject=entry.get("subject", ""),
                changes=changes,
                not_installed=list(entry.get("not_installed", [])),
            )
        )
    return Series(base_version=manifest["base_version"], patches=patches)
