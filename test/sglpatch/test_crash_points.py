"""A kill at every single file-system step of apply and of revert.

On a small synthetic series (seriesmaker), so that every step can be tried:
what is under test is the transaction around the files, not the series.

The process is stopped at step N (N = 1, 2, ... every step there is): from
then on nothing it does reaches the disk, as after SIGKILL. The next
command's recovery must then leave the package byte for byte pristine or
patched, and running the command again must finish the job.
"""

import builtins
import io
import os
import py_compile
import shutil

import pytest
from conftest import snapshot

from sglpatch import engine, txn
from seriesmaker import install_base, two_patch_series


class Killed(BaseException):
    """Stands for SIGKILL: no handler in the tool may swallow it."""


# Every call that changes a file system, at the level of `os` (so the test
# holds whatever the tool is built from): open for writing, rename, link,
# unlink, mkdir, rmdir.
_CHANGES = ("replace", "rename", "link", "symlink", "unlink", "remove", "mkdir", "rmdir")
_WRITE_MODES = set("wax+")


class KillAt:
    """Counts the steps; from step `at` on, every step dies before acting."""

    def __init__(self, at=None):
        self.at, self.steps = at, []

    def step(self, op, path):
        self.steps.append((op, str(path)))
        if self.at is not None and len(self.steps) >= self.at:
            raise Killed(f"step {len(self.steps)}: {op} {path}")

    def install(self, monkeypatch):
        for name in _CHANGES:
            real = getattr(os, name)

            def change(*args, _real=real, _name=name, **kwargs):
                self.step(_name, args[0])
                return _real(*args, **kwargs)

            monkeypatch.setattr(os, name, change)
        real_open = io.open

        def open_(file, mode="r", *args, **kwargs):
            if _WRITE_MODES & set(mode):
                self.step("write", file)
            return real_open(file, mode, *args, **kwargs)

        monkeypatch.setattr(io, "open", open_)
        monkeypatch.setattr(builtins, "open", open_)


def _with_bytecode(root):
    """Compiled modules (unchecked-hash), so removing them is a step too."""
    for rel in ["srt/alpha.py", "srt/beta.py", "srt/untouched.py"]:
        source = root / rel
        py_compile.compile(str(source), cfile=None, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)


def _recover(root, patches):
    """What the next writing command does first, holding the lock."""
    with engine._prologue(str(root), patches, write=True):
        pass


def _key(root):
    """Every file with its bytes, and every directory (an empty one too)."""
    dirs = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_dir())
    return tuple(snapshot(root).items()), tuple(dirs)


def _sglpatch_entries(root):
    return sorted(name for name in os.listdir(root) if name.startswith(".sglpatch-"))


@pytest.mark.parametrize("command", ["apply", "revert"])
def test_kill_at_every_step(tmp_path, monkeypatch, fast, command):
    patches = two_patch_series(tmp_path)
    installed = install_base(tmp_path / "site")
    site = installed.parent

    def run(sglang_dir, kill=None):
        with monkeypatch.context() as patched:
            if kill is not None:
                kill.install(patched)
            getattr(engine, command)(str(sglang_dir), patches_dir=patches)

    start = tmp_path / "start"  # pristine, or patched; with bytecode either way
    shutil.copytree(site, start)
    if command == "revert":
        run_apply = engine.apply(str(start / "sglang"), patches_dir=patches)
        assert run_apply.changed
    _with_bytecode(start / "sglang")
    goal = tmp_path / "goal"  # what the command makes of it, uninterrupted
    shutil.copytree(start, goal)
    run(goal / "sglang")  # (fills the staging cache: scratch work is not counted)
    shutil.rmtree(goal)
    shutil.copytree(start, goal)
    counter = KillAt()
    run(goal / "sglang", kill=counter)
    total = len(counter.steps)
    assert total > 25  # journal, every file, bytecode, RECORD, state, copies
    whole = {_key(start): "before", _key(goal): "after"}

    outcomes = set()
    for at in range(1, total + 1):
        shutil.rmtree(site)
        shutil.copytree(start, site)
        with pytest.raises(Killed):
            run(installed, kill=KillAt(at))
        where = f"killed at step {at} of {total} ({counter.steps[at - 1][0]})"

        report = engine.status_report(str(installed), patches_dir=patches)
        journals = [n for n in _sglpatch_entries(installed) if n.startswith(txn.JOURNAL_DIR)]
        assert [n for n in report["leftovers"] if n in journals] == journals, where
        assert report["interrupted_run_pending"] == bool(journals), where
        _recover(installed, patches)
        outcome = whole.get(_key(site))
        assert outcome is not None, f"{where}: not a whole state after recovery"
        outcomes.add(outcome)
        run(installed)
        assert _key(site) == _key(goal), where
        # Nothing of sglpatch's is left that the goal does not hold: no
        # journal, no empty directory of kept copies.
        assert _sglpatch_entries(installed) == _sglpatch_entries(goal / "sglang"), where
    assert outcomes == {"before", "after"}
