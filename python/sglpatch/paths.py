"""Paths that sglpatch reads from its own files (the state file, a journal's
index) stay inside the package: such a file may be damaged or crafted, and
nothing sglpatch writes may land outside the package because of it."""

import os
import re

_SHA256 = re.compile(r"[0-9a-f]{64}")


def inside_package(rel) -> bool:
    """True for a plain relative path below the package directory (no `..`,
    no absolute path, no empty or `.` component)."""
    if not isinstance(rel, str) or not rel or "\0" in rel or os.path.isabs(rel):
        return False
    return all(part not in ("", ".", "..") for part in rel.split("/"))


def is_sha256(value) -> bool:
    return isinstance(value, str) and _SHA256.fullmatch(value) is not None
