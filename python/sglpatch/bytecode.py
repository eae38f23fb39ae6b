"""Compiled bytecode of the modules a change touches, to be removed with it.

Python trusts a `.pyc` compiled in unchecked-hash mode (`compileall
--invalidation-mode unchecked-hash`, used by some images) without looking at
the source, so after a patch it would go on running the old code. Removing
the touched modules' bytecode makes the next import compile the new source.

With a pycache prefix (PYTHONPYCACHEPREFIX, `-X pycache_prefix`) Python
keeps the bytecode outside the package, in a tree that mirrors the source's
absolute path; the copies there (as this Python's prefix names it) go too.
"""

import os
import sys
from pathlib import Path
from typing import Iterable, List, Optional


def _compiled(directory: Path, stem: str) -> List[Path]:
    # `{stem}.*.pyc` (e.g. `x.cpython-311.opt-1.pyc`) cannot match another
    # module's bytecode: a module name has no dot.
    return sorted(directory.glob(f"{stem}.*.pyc")) if directory.is_dir() else []


def stale_bytecode(root: Path, touched: List[str]) -> List[str]:
    """Bytecode files (relative to root) compiled from the touched modules."""
    found = []
    for rel in touched:
        if not rel.endswith(".py"):
            continue
        source = root / rel
        candidates = _compiled(source.parent / "__pycache__", source.name[: -len(".py")])
        legacy = source.with_suffix(".pyc")  # beside the source (Python 2 style)
        if legacy.is_file():
            candidates.append(legacy)
        found.extend(str(path.relative_to(root)) for path in candidates)
    return found


def prefixed_bytecode(spellings: Iterable[Path], touched: List[str],
                      prefix: Optional[str] = None) -> List[Path]:
    """Bytecode of the touched modules under the pycache prefix (default:
    this Python's), for each spelling of the package's path (as imported,
    and resolved: the mirror follows the path Python imported from)."""
    prefix = sys.pycache_prefix if prefix is None else prefix
    if not prefix:
        return []
    found: List[Path] = []
    for root in spellings:
        for rel in touched:
            if rel.endswith(".py"):
                source = Path(os.path.abspath(root / rel))
                mirror = Path(prefix) / str(source.parent).lstrip(os.sep)
                found.extend(_compiled(mirror, source.name[: -len(".py")]))
    return list(dict.fromkeys(found))
