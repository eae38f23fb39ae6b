"""Two sglpatch commands on one package: the second waits, or refuses, and
never touches a journal its first is still writing."""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO, sglpatch_cli, snapshot

from sglpatch.series import PATCHES_DIR, read_series_names

from sglpatch import engine
from sglpatch.txn import JOURNAL_DIR


def _start(*args, timeout_s="30"):
    env = dict(os.environ, SGLPATCH_LOCK_TIMEOUT=timeout_s)
    return subprocess.Popen([sys.executable, "-m", "sglpatch", *args], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _freeze_when_journal_appears(proc, root, exact=False):
    """SIGSTOP `proc` the moment it has a journal in the package (exact: the
    complete one, which is being rolled forward into the package)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        names = os.listdir(root)
        if (JOURNAL_DIR in names) if exact else any(
                name.startswith(JOURNAL_DIR) for name in names):
            os.kill(proc.pid, signal.SIGSTOP)
            return
    pytest.fail(f"no journal appeared: {proc.communicate()}")


@pytest.fixture
def states(installed, tmp_path):
    """The package's bytes pristine and fully patched."""
    site = installed.parent
    pristine = snapshot(site)
    patched_copy = tmp_path / "patched"
    shutil.copytree(site, patched_copy)
    engine.apply(str(patched_copy / "sglang"))
    return {"pristine": pristine, "patched": snapshot(patched_copy)}


@pytest.mark.parametrize("second", [["check"], ["apply", "--dry-run"], ["apply"],
                                    ["revert"], ["status"]])
def test_second_command_refuses_while_a_frozen_apply_holds_the_package(
        installed, states, second):
    site = installed.parent
    first = _start("apply", "--sglang-dir", str(installed))
    _freeze_when_journal_appears(first, installed)
    try:
        other = sglpatch_cli(*second, "--sglang-dir", str(installed),
                             env_extra={"SGLPATCH_LOCK_TIMEOUT": "1"})
    finally:
        os.kill(first.pid, signal.SIGCONT)
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    assert other.returncode == 2, (other.stdout, other.stderr)
    lines = other.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert f"pid {first.pid}" in lines[0] and str(installed) in lines[0]
    assert snapshot(site) == states["patched"]  # the first finished, untouched


def test_revert_waits_for_a_frozen_apply_then_reverts(installed, states):
    first = _start("apply", "--sglang-dir", str(installed))
    _freeze_when_journal_appears(first, installed)
    second = _start("revert", "--sglang-dir", str(installed))
    time.sleep(1.0)  # the revert is waiting for the lock now
    assert second.poll() is None
    os.kill(first.pid, signal.SIGCONT)
    assert first.wait(timeout=60) == 0
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert f"reverted {len(read_series_names(PATCHES_DIR))} patches" in out
    assert snapshot(installed.parent) == states["pristine"]


def test_concurrent_apply_check_revert_leave_a_whole_state(installed, states, tmp_path):
    site = installed.parent
    starts = [tmp_path / "pristine-copy", tmp_path / "patched"]
    shutil.copytree(site, starts[0])
    for i in range(12):
        shutil.rmtree(site)
        shutil.copytree(starts[i % 2], site)
        procs = {cmd: _start(cmd, "--sglang-dir", str(installed))
                 for cmd in ("apply", "check", "revert")}
        for command, proc in procs.items():
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, (i, command, out, err)
        assert snapshot(site) in (states["pristine"], states["patched"]), i


def test_read_only_commands_leave_a_killed_runs_journal_alone(installed, states):
    site = installed.parent
    first = _start("apply", "--sglang-dir", str(installed))
    _freeze_when_journal_appears(first, installed, exact=True)
    first.kill()  # SIGKILL, half-way through the writes
    first.wait()
    killed = snapshot(site)

    for command in (["check"], ["apply", "--dry-run"]):
        result = sglpatch_cli(*command, "--sglang-dir", str(installed))
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "journal" in lines[0], lines
        assert "sglpatch revert" in lines[0]
        assert snapshot(site) == killed  # not a byte changed
    status = sglpatch_cli("status", "--sglang-dir", str(installed))
    assert status.returncode == 0 and "sglpatch revert" in status.stdout
    assert snapshot(site) == killed

    reverted = sglpatch_cli("revert", "--sglang-dir", str(installed))
    assert reverted.returncode == 0, reverted.stderr
    assert snapshot(site) == states["pristine"]
