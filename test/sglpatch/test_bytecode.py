"""Bytecode compiled from a touched module goes with the change.

A `.pyc` compiled in unchecked-hash mode is used without looking at the
source: left in place, Python would go on running the unpatched code.
"""

import compileall
import importlib.util
import py_compile
from pathlib import Path

from conftest import sglpatch_cli

from sglpatch.series import load_series

BYSTANDER = "srt/managers/io_struct.py"


def _compile_all(root: Path) -> None:
    assert compileall.compile_dir(
        str(root), quiet=2,
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)


def _bytecode(root: Path, rel: str) -> Path:
    return Path(importlib.util.cache_from_source(str(root / rel)))


def test_apply_and_revert_remove_the_touched_modules_bytecode(installed):
    # the modules sglang ships that the series changes (not those it creates)
    touched = [rel for rel in load_series().touched_files()
               if rel.endswith(".py") and (installed / rel).is_file()]
    _compile_all(installed)
    assert all(_bytecode(installed, rel).is_file() for rel in touched)
    bystander = _bytecode(installed, BYSTANDER).read_bytes()

    applied = sglpatch_cli("apply", "--sglang-dir", str(installed))
    assert applied.returncode == 0, applied.stderr
    assert f"removed {len(touched)} compiled bytecode file(s)" in applied.stdout
    assert [rel for rel in touched if _bytecode(installed, rel).exists()] == []
    assert _bytecode(installed, BYSTANDER).read_bytes() == bystander

    _compile_all(installed)  # Python ran the patched modules
    reverted = sglpatch_cli("revert", "--sglang-dir", str(installed))
    assert reverted.returncode == 0, reverted.stderr
    assert "compiled bytecode" in reverted.stdout
    assert [rel for rel in touched if _bytecode(installed, rel).exists()] == []
    assert _bytecode(installed, BYSTANDER).read_bytes() == bystander
