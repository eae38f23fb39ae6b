"""Finding the sglang package to patch and checking it is one we can patch."""

import array
import fcntl
import importlib.util
import os
import re
import stat
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
    root: Path  # the `sglang/` package directory itself (symbolic links resolved)
    version: Optional[str]  # None: no readable _version.py
    # The package's path as given or imported, links not resolved: where
    # pip's .dist-info sits beside a package that is a symbolic link.
    given: Optional[Path] = None

    def spellings(self) -> list:
        """The package's path as given, then resolved (once if the same)."""
        return list(dict.fromkeys(p for p in (self.given, self.root) if p is not None))

    @property
    def version_text(self) -> str:
        return self.version or "(version unknown)"


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
    text = version_file.read_text(encoding="utf-8", errors="replace")
    match = _VERSION_RE.search(text)
    return match.group(1) if match else None


def _is_package(path: Path) -> bool:
    return (path / "__init__.py").is_file() and (path / "srt").is_dir()


def open_sglang(sglang_dir: Optional[str]) -> SglangPackage:
    """The package at sglang_dir (None: the one Python imports); its version
    may be unknown, which only the commands that change it refuse."""
    if sglang_dir is not None and not sglang_dir.strip():
        raise SglpatchError("--sglang-dir is empty; give the sglang package directory")
    given = Path(sglang_dir) if sglang_dir is not None else default_sglang_dir()
    given = Path(os.path.abspath(given))
    root = given.resolve()
    if not root.is_dir():
        raise SglpatchError(f"{root} is not a directory")
    if not _is_package(root):
        hint = ""
        if _is_package(root / "sglang"):
            hint = f"; did you mean {root / 'sglang'}?"
        raise SglpatchError(
            f"{root} is not an sglang package (expected __init__.py and srt/ "
            f"inside){hint}"
        )
    return SglangPackage(root=root, version=read_version(root), given=given)


def require_version(pkg: SglangPackage, expected: str) -> None:
    if pkg.version is None:
        raise SglpatchError(
            f"cannot read the sglang version from {pkg.root}/_version.py; "
            f"the series is for sglang {expected} only"
        )
    if pkg.version != expected:
        raise SglpatchError(
            f"{pkg.root} is sglang {pkg.version}; this series is for sglang "
            f"{expected} only"
        )


def _is_writable_dir(path: Path) -> bool:
    # Mode bits first: root passes os.access() on a `chmod a-w` directory, but
    # a package someone made read-only is not ours to change. Then the mount:
    # root passes os.access() on a read-only mount too. (No probe file: a
    # kill between creating and removing it would leave it in the package.)
    if not path.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        return False
    if not os.access(path, os.W_OK | os.X_OK):
        return False
    return not os.statvfs(path).f_flag & os.ST_RDONLY


# FS_IOC_GETFLAGS and its immutable / append-only bits (linux/fs.h).
_FS_IOC_GETFLAGS = 0x80086601
_FS_FLAGS_NO_REPLACE = 0x00000010 | 0x00000020


def _is_immutable(path: Path) -> bool:
    """chattr +i / +a: even root cannot replace the file. Unknown: False."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    try:
        flags = array.array("l", [0])
        fcntl.ioctl(fd, _FS_IOC_GETFLAGS, flags, True)
        return bool(flags[0] & _FS_FLAGS_NO_REPLACE)
    except OSError:  # not supported by this file system
        return False
    finally:
        os.close(fd)


def unchangeable_files(root: Path, rel_paths) -> list:
    """Files marked immutable or append-only (and their directories)."""
    found = []
    for rel in rel_paths:
        path = root / rel
        for candidate in (path, path.parent):
            if candidate.exists() and _is_immutable(candidate):
                found.append(os.path.normpath(candidate))
    return sorted(set(found))


def unwritable_dirs(root: Path, rel_paths) -> list:
    """Directories we would need to write but cannot (files are replaced by rename)."""
    dirs = {root}
    for rel in rel_paths:
        parent = (root / rel).parent
        # A file the series creates may live in a directory that is not there yet.
        while not parent.exists():
            parent = parent.parent
        dirs.add(parent)
    return sorted(os.path.normpath(d) for d in dirs if not _is_writable_dir(d))
