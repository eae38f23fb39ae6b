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
key, the copies and `applied` as the applied prefix of the series.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from sglpatch import __version__
from sglpatch.series import sha256_file

STATE_FILE = ".sglpatch-state.json"
STORE_DIR = ".sglpatch-pristine"
FORMAT = 2


@dataclass
class State:
    format: int
    sglpatch_version: Optional[str]
    applied: List[dict]  # [{"name", "sha256"}], the applied prefix in order
    files: Dict[str, dict]  # rel -> {"before": sha256|None, "after": sha256|None}
    problem: Optional[str] = None  # why the file could not be used, if it cannot

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
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return _unusable("not valid JSON")
    if not isinstance(data, dict):
        return _unusable("JSON, but not an object")
    applied, files = data.get("applied", []), data.get("files", {})
    if not isinstance(applied, list) or not isinstance(files, dict) or not all(
        isinstance(e, dict) and "name" in e for e in applied
    ) or not all(isinstance(v, dict) for v in files.values()):
        return _unusable("not in a format this sglpatch knows")
    fmt = data.get("format", 1)
    version = data.get("sglpatch_version")
    return State(
        format=fmt if isinstance(fmt, int) else 0,
        sglpatch_version=version if isinstance(version, str) else None,
        applied=applied,
        files=files,
    )


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
