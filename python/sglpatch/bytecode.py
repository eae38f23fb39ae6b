"""Compiled bytecode of the modules a change touches, to be removed with it.

Python trusts a `.pyc` compiled in unchecked-hash mode (`compileall
--invalidation-mode unchecked-hash`, used by some images) without looking at
the source, so after a patch it would go on running the old code. Removing
the touched modules' bytecode makes the next import compile the new source.
"""

from pathlib import Path
from typing import List


def stale_bytecode(root: Path, touched: List[str]) -> List[str]:
    """Bytecode files (relative to root) compiled from the touched modules."""
    found = []
    for rel in touched:
        if not rel.endswith(".py"):
            continue
        source = root / rel
        stem = source.name[: -len(".py")]
        cache = source.parent / "__pycache__"
        candidates = sorted(cache.glob(f"{stem}.*.pyc")) if cache.is_dir() else []
        legacy = source.with_suffix(".pyc")  # beside the source (Python 2 style)
        if legacy.is_file():
            candidates.append(legacy)
        # `{stem}.*.pyc` (e.g. `x.cpython-311.opt-1.pyc`) cannot match another
        # module's bytecode: a module name has no dot.
        found.extend(str(path.relative_to(root)) for path in candidates)
    return found
