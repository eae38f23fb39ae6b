"""What sglpatch keeps inside a patched package, so it can be undone later.

`sglang/.sglpatch-state.json` says which patches are applied and, for every
file they touch, its sha256 before (pristine) and after. Beside it,
`sglang/.sglpatch-pristine/<sha256>` holds the pristine bytes of each touched
file, named by their hash (as quilt keeps originals in `.pc/`). `revert`
restores from those copies, so it needs neither the series nor `git`: a
package patched by one sglpatch release can be reverted by a later one
whose series differs.

Format history: sglpatch 0.1.0 wrote the state file without a `format` key
and kept no copies (format 1: revert reverses the series); format 2 adds the
key, the copies and `applied` as the applied prefix of the series. A file
that was a symbolic link before sglpatch replaced it has `link` (the link's
text) beside its hashes, so that revert can put the link back; readers that
do not know the key ignore it.

Nothing in the state file is trusted further than it can be checked: every
path must lie inside the package and every hash must be a sha256, or the
file is reported as unusable (and revert goes by the series instead).
"""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from sglpatch import __version__
from sglpatch.paths import inside_package, is_sha256
from sglpatch.series import sha256_bytes, sha256_file

STATE_FILE = ".sglpatch-state.json"
STORE_DIR = ".sglpatch-pristine"
FORMAT = 2


@dataclass
class State:
    format: int
    sglpatch_version: Optional[str]
    applied: List[dict]  # [{"name", "sha256"}], the applied prefix in order
    files: Dict[str, dict]  # rel -> {"before": sha256|None, "after": sha256|None[, "link"]}
    problem: Optional[str] = None  # why the file could not be used, if it cannot
    digest: Optional[str] = None  # sha256 of the state file's bytes, as read

    @property
    def applied_names(self) -> List[str]:
        return [entry["name"] for entry in self.applied]

    def written_by(self) -> str:
        if self.sglpatch_version:
            return f"sglpatch {self.sglpatch_version}"
        return "an unknown sglpatch version"


@dataclass
class NewState:
    """What a new state file will say."""

    sglang_version: Optional[str]
    applied: List[dict]
    files: Dict[str, dict] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        state = {
            "format": FORMAT,
            "sglpatch_version": __version__,
            "sglang_version": self.sglang_version,
            "applied": self.applied,
            "files": self.files,
        }
        return (json.dumps(state, indent=2, sort_keys=True) + "\n").encode()


def read_state(root: Path) -> Optional[State]:
    """The state file, or None if there is none; never raises on bad content."""
    path = root / STATE_FILE
    if not path.is_file():
        return None
    raw = path.read_bytes()
    state = _parse(raw)
    state.digest = sha256_bytes(raw)
    return state


def _parse(raw: bytes) -> State:
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return _unusable("not valid JSON")
    if not isinstance(data, dict):
        return _unusable("JSON, but not an object")
    applied, files = data.get("applied", []), data.get("files", {})
    if not isinstance(applied, list) or not isinstance(files, dict) or not all(
        isinstance(e, dict) and isinstance(e.get("name"), str) for e in applied
    ) or not all(isinstance(v, dict) for v in files.values()):
        return _unusable("not in a format this sglpatch knows")
    outside = [rel for rel in files if not inside_package(rel)]
    if outside:
        return _unusable(f"naming a path outside the package ({outside[0]!r})")
    if not all(_file_entry_ok(v) for v in files.values()):
        return _unusable("not in a format this sglpatch knows (a file's hashes)")
    fmt = data.get("format", 1)
    version = data.get("sglpatch_version")
    return State(
        format=fmt if isinstance(fmt, int) else 0,
        sglpatch_version=version if isinstance(version, str) else None,
        applied=applied,
        files=files,
    )


def _file_entry_ok(hashes: dict) -> bool:
    link = hashes.get("link")
    return (all(hashes.get(key) is None or is_sha256(hashes.get(key))
                for key in ("before", "after"))
            and (link is None or (isinstance(link, str) and link and "\0" not in link)))


def _unusable(problem: str) -> State:
    return State(format=0, sglpatch_version=None, applied=[], files={}, problem=problem)


def store_path(digest: str) -> str:
    """Where the pristine bytes with this sha256 are kept (relative to the package)."""
    return f"{STORE_DIR}/{digest}"


def stored_pristine(root: Path, state: Optional[State]) -> Optional[Dict[str, Optional[bytes]]]:
    """The pristine bytes of every file the state records, from the package's
    own copies; None unless every one is there and intact."""
    if state is None or state.problem or state.format < 2:
        return None
    pristine: Dict[str, Optional[bytes]] = {}
    for rel, hashes in state.files.items():
        before = hashes.get("before")
        if before is None:
            pristine[rel] = None
            continue
        kept = root / store_path(before)
        if sha256_file(kept) != before:
            return None
        pristine[rel] = kept.read_bytes()
    return pristine
