"""All-or-nothing replacement of a set of files inside the sglang package.

Before the first file is touched, the originals are copied into a journal
directory inside the package. On any failure (an exception, Ctrl-C) every
file is restored from it. If the process dies hard (SIGKILL, power loss), the
journal is still there, and the next sglpatch command rolls it back first
(`recover_interrupted`), so a package is never left half-patched.
"""

import json
import os
import shutil
from pathlib import Path
from typing import Dict, Optional

JOURNAL_DIR = ".sglpatch-journal"
_JOURNAL_INDEX = "journal.json"


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".sglpatch-tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if path.exists():
        shutil.copymode(path, tmp)
    os.replace(tmp, path)


def _set_content(path: Path, data: Optional[bytes]) -> None:
    """None means the file must not exist."""
    if data is None:
        if path.exists():
            path.unlink()
    else:
        _write_atomic(path, data)


def _rollback(root: Path) -> None:
    journal = root / JOURNAL_DIR
    index = json.loads((journal / _JOURNAL_INDEX).read_text(encoding="utf-8"))
    for rel, existed in index["files"].items():
        saved = journal / "originals" / rel
        _set_content(root / rel, saved.read_bytes() if existed else None)
    shutil.rmtree(journal)


def recover_interrupted(root: Path) -> bool:
    """Roll back a transaction a killed process left behind. True if there was one."""
    journal = root / JOURNAL_DIR
    if not journal.exists():
        return False
    if (journal / _JOURNAL_INDEX).is_file():
        _rollback(root)
    else:  # died while writing the journal itself: nothing was touched yet
        shutil.rmtree(journal)
    return True


def replace_files(root: Path, new_contents: Dict[str, Optional[bytes]]) -> None:
    """Give each file (relative to root) its new content, or none of them."""
    journal = root / JOURNAL_DIR
    originals = journal / "originals"
    existed = {}
    originals.mkdir(parents=True)
    try:
        for rel in new_contents:
            current = root / rel
            existed[rel] = current.is_file()
            if existed[rel]:
                saved = originals / rel
                saved.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(current, saved)
        # The index is written last: its presence means the journal is complete.
        index = journal / _JOURNAL_INDEX
        index.write_text(json.dumps({"files": existed}), encoding="utf-8")
    except BaseException:
        shutil.rmtree(journal, ignore_errors=True)
        raise

    try:
        for rel, data in new_contents.items():
            write_file(root / rel, data)
    except BaseException:
        _rollback(root)
        raise
    shutil.rmtree(journal)


# Indirection so tests can inject a failure after N files were written.
write_file = _set_content
