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
from typing import Dict, List, Optional


def find_record(root: Path) -> Optional[Path]:
    """The RECORD of the distribution that installed this package, if pip did."""
    marker = f"{root.name}/__init__.py,".encode()
    for dist_info in sorted(root.parent.glob("*.dist-info")):
        record = dist_info / "RECORD"
        try:
            if record.is_file() and marker in record.read_bytes():
                return record
        except OSError:
            continue
    return None


def _hash_field(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _row(path: str, data: bytes, eol: str) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator=eol).writerow([path, _hash_field(data), len(data)])
    return out.getvalue()


def updated_record(
    record_bytes: bytes, package: str, changes: Dict[str, Optional[bytes]]
) -> bytes:
    """RECORD with the rows of `changes` (paths relative to the package; None:
    the file is gone) rewritten, dropped or appended."""
    text = record_bytes.decode("utf-8")
    lines: List[str] = text.splitlines(keepends=True)
    eol = "\r\n" if (lines and lines[0].endswith("\r\n")) else "\n"
    wanted = {f"{package}/{rel}": data for rel, data in changes.items()}
    out, seen = [], set()
    for line in lines:
        fields = next(csv.reader([line.rstrip("\r\n")]), [])
        path = fields[0] if fields else None
        if path not in wanted:
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
