"""A full disk: refused up front, or rolled back without needing new space."""

import errno
import os

import pytest
from conftest import snapshot

from sglpatch import cli, engine, txn


def _cli(capsys, *args):
    code = cli.main(list(args))
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if "error" in line]
    return code, captured.out, errors


class _Statvfs:
    f_flag = 0
    f_frsize = 4096
    f_bavail = 100  # 400 KiB free


def test_too_little_free_space_is_refused_before_anything_changes(
        installed, monkeypatch, capsys):
    site = installed.parent
    before = snapshot(site)
    monkeypatch.setattr(os, "statvfs", lambda path: _Statvfs())
    code, out, errors = _cli(capsys, "apply", "--sglang-dir", str(installed))
    assert code == 2
    assert len(errors) == 1 and "not enough free space" in errors[0], errors
    assert "nothing changed" in errors[0]
    assert snapshot(site) == before


def _disk_full_from_write(number):
    """The `number`-th write meets a full disk, and so does every later
    step that would need new space: only renames and unlinks still work."""
    seen = []

    def hook(op, path):
        if op in ("write", "link", "mkdir"):
            seen.append(path)
            if len(seen) >= number:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    return hook


@pytest.mark.parametrize("number", [1, 20, 40, 60, 90])
def test_disk_full_half_way_rolls_back_and_says_so_in_one_line(
        installed, monkeypatch, capsys, number):
    site = installed.parent
    before = snapshot(site)
    monkeypatch.setattr(txn, "fault_hook", _disk_full_from_write(number))
    code, out, errors = _cli(capsys, "apply", "--sglang-dir", str(installed))
    assert code == 2
    assert len(errors) == 1 and "No space left on device" in errors[0], errors
    assert "nothing changed" in errors[0]
    assert snapshot(site) == before  # no half file, no journal, no tmp file


def test_disk_full_during_revert_keeps_the_package_patched(
        installed, monkeypatch, capsys):
    engine.apply(str(installed))
    site = installed.parent
    patched = snapshot(site)
    monkeypatch.setattr(txn, "fault_hook", _disk_full_from_write(30))
    code, out, errors = _cli(capsys, "revert", "--sglang-dir", str(installed))
    assert code == 2 and len(errors) == 1, errors
    assert snapshot(site) == patched


@pytest.mark.parametrize("number", [1, 10, 30])
def test_disk_full_seen_at_fsync_rolls_back(installed, monkeypatch, capsys, number):
    """ext4 with delayed allocation reports a full disk at fsync; from then on
    every fsync fails (nothing new fits), but the rollback must still work."""
    site = installed.parent
    before = snapshot(site)
    real_fsync, calls = os.fsync, []

    def fsync(fd):
        calls.append(fd)
        if len(calls) >= number:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    code, out, errors = _cli(capsys, "apply", "--sglang-dir", str(installed))
    assert code == 2
    assert len(errors) == 1 and "No space left on device" in errors[0], errors
    assert snapshot(site) == before
