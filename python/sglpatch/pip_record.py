"""Keeping pip's RECORD of the sglang distribution true while files change.

`pip uninstall` removes exactly the files RECORD lists, and `pip check`-style
tools compare its hashes. So every file sglpatch writes into the package is
listed with its new sha256 and size, every file it removes is dropped, and
the rows of files it does not touch keep their bytes. The rows of compiled
bytecode are left alone: pip lists `__pycache__/*.pyc` without a hash, and
Python writes them again at the same paths.
"""

import base64
import csv
import hashlib
import io
import os
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from sglpatch.errors import SglpatchError


def _listing(pkg) -> List[Tuple[Path, str]]:
    """Every (dist-info, package name) whose RECORD lists this package, from
    beside the package as given (a symbolic link) and as resolved."""
    found = []
    for spelling in pkg.spellings():
        for dist_info in sorted(spelling.parent.glob("*.dist-info")):
            try:
                data = (dist_info / "RECORD").read_bytes()
            except OSError:
                continue
            if f"{spelling.name}/__init__.py,".encode() in data:
                found.append((dist_info, spelling.name))
    return list(dict.fromkeys(found))


def _dist_version(dist_info: Path) -> Optional[str]:
    try:
        text = (dist_info / "METADATA").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        if not line.strip():
            break  # the headers end at the first blank line
        key, _, value = line.partition(":")
        if key.strip().lower() == "version":
            return value.strip()
    name = dist_info.name[: -len(".dist-info")]
    return name.split("-", 1)[1] if "-" in name else None


def find_record(pkg) -> Optional[Tuple[Path, str]]:
    """The RECORD of the distribution that installed this package, if pip did,
    and the package's name in it. With several .dist-info listing it, the one
    of the package's own version (its _version.py), or a refusal."""
    found = _listing(pkg)
    if len(found) <= 1 and (not found or pkg.version is None):
        return (found[0][0] / "RECORD", found[0][1]) if found else None
    wanted = (pkg.version or "").lower()
    matching = [(d, name) for d, name in found
                if (_dist_version(d) or "").lower() == wanted]
    if len(matching) == 1:
        return matching[0][0] / "RECORD", matching[0][1]
    listed = ", ".join(str(d) for d, _ in found)
    raise SglpatchError(
        f"{'none' if not matching else 'more than one'} of the pip records listing "
        f"{pkg.root} ({listed}) is of its version {pkg.version} (_version.py), so "
        f"pip's RECORD cannot be kept true; remove the stale .dist-info (or "
        f"reinstall sglang) and try again"
    )


def record_candidates(pkg) -> List[str]:
    """Every RECORD path (relative to the package) a journal may name."""
    return [os.path.relpath(d / "RECORD", pkg.root) for d, _ in _listing(pkg)]


def _hash_field(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _row(path: str, data: bytes, eol: str) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator=eol).writerow([path, _hash_field(data), len(data)])
    return out.getvalue()


def updated_record(
    record_bytes: bytes, package: str, changes: Dict[str, Optional[bytes]],
    forget: Tuple[str, ...] = (),
) -> bytes:
    """RECORD with the rows of `changes` (paths relative to the package; None:
    the file is gone) rewritten, dropped or appended; and with no row left of
    the paths under `forget` (relative to the package) that `changes` does
    not write, whether or not the files are there."""
    text = record_bytes.decode("utf-8")
    lines: List[str] = text.splitlines(keepends=True)
    eol = "\r\n" if (lines and lines[0].endswith("\r\n")) else "\n"
    wanted = {f"{package}/{rel}": data for rel, data in changes.items()}
    gone = tuple(f"{package}/{rel}" for rel in forget)
    out, seen = [], set()
    for line in lines:
        fields = next(csv.reader([line.rstrip("\r\n")]), [])
        path = fields[0] if fields else None
        if path not in wanted:
            if not (gone and path and path.startswith(gone)):
                out.append(line)
            continue
        seen.add(path)
        data = wanted[path]
        if data is not None:
            out.append(_row(path, data, eol))
    if out and not out[-1].endswith(("\n", "\r")):
        out[-1] += eol
    for path, data in wanted.items():
        if path not in seen and data is not None:
            out.append(_row(path, data, eol))
    return "".join(out).encode("utf-8")


def record_rel(root: Path, record: Path) -> str:
    """The RECORD's path relative to the package directory (for the journal)."""
    return os.path.relpath(record, root)
