"""Finding the sglang package to patch and checking it is one we can patch."""

import importlib.util
import os
import re
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from sglpatch.errors import SglpatchError

# `sglang/_version.py` (written by setuptools-scm into the wheel) holds e.g.
#     __version__ = version = '0.5.12.post1'
_VERSION_RE = re.compile(
    r"""^(?:__version__|version)\s*(?::\s*str\s*)?=.*?['"]([^'"]+)['"]""", re.M
)


@dataclass(frozen=True)
class SglangPackage:
    root: Path  # the `sglang/` package directory itself
    version: str


def default_sglang_dir() -> Path:
    """The `sglang` package the running Python would import (without importing it)."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise SglpatchError(
            "no sglang package is importable by this Python; pass --sglang-dir"
        )
    return Path(list(spec.submodule_search_locations)[0])


def read_version(root: Path) -> Optional[str]:
    """The version recorded in the package directory itself, or None."""
    version_file = root / "_version.py"
    if not version_file.is_file():
        return None
    match = _VERSION_RE.search(version_file.read_text(encoding="utf-8"))
    return match.group(1) if match else None


def open_sglang(sglang_dir: Optional[str]) -> SglangPackage:
    root = Path(sglang_dir) if sglang_dir else default_sglang_dir()
    root = root.resolve()
    if not root.is_dir():
        raise SglpatchError(f"{root} is not a directory")
    if not (root / "__init__.py").is_file() or not (root / "srt").is_dir():
        raise SglpatchError(
            f"{root} is not an sglang package (expected __init__.py and srt/ inside)"
        )
    version = read_version(root)
    if version is None:
        raise SglpatchError(f"cannot read the sglang version from {root}/_version.py")
    return SglangPackage(root=root, version=version)


def require_version(pkg: SglangPackage, expected: str) -> None:
    if pkg.version != expected:
        raise SglpatchError(
            f"{pkg.root} is sglang {pkg.version}; this series is for sglang "
            f"{expected} only"
        )


def _is_writable_dir(path: Path) -> bool:
    # Mode bits first: root passes os.access() on a `chmod a-w` directory, but
    # a package someone made read-only is not ours to change. Then a real
    # probe, which also catches read-only mounts.
    if not path.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        return False
    if not os.access(path, os.W_OK | os.X_OK):
        return False
    try:
        fd, probe = tempfile.mkstemp(prefix=".sglpatch-probe-", dir=path)
    except OSError:
        return False
    os.close(fd)
    os.unlink(probe)
    return True


def unwritable_dirs(root: Path, rel_paths) -> list:
    """Directories we would need to write but cannot (files are replaced by rename)."""
    dirs = {root}
    for rel in rel_paths:
        parent = (root / rel).parent
        # A file the series creates may live in a directory that is not there yet.
        while not parent.exists():
            parent = parent.parent
        dirs.add(parent)
    return sorted(str(d) for d in dirs if not _is_writable_dir(d))
