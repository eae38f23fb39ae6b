"""Nothing of sglpatch's is left in the package after Ctrl-C or SIGTERM, and
what a killed run did leave is reported, and removed by the next run.

A left journal directory is not in pip's RECORD: `pip uninstall sglang`
would leave it, and `import sglang` would then find an empty namespace
package. So no signal may stop a run between its commit and its clean-up.
"""

import os
import shutil
import signal
import subprocess
import sys

import pytest
from conftest import REPO, hinted_commands, one_error_line, sglpatch_cli, snapshot

from sglpatch import engine, txn
from seriesmaker import install_base, two_patch_series


class Terminated(BaseException):
    """SIGTERM, as a Python handler raises it (its default action kills)."""


@pytest.fixture
def sigterm_raises():
    def handler(signum, frame):
        raise Terminated()

    old = signal.signal(signal.SIGTERM, handler)
    # Ctrl-C as a user's foreground run takes it: a shell's background job
    # (a test run started with `&`) inherits SIGINT ignored
    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGTERM, old)
    signal.signal(signal.SIGINT, old_int)


def _journals(root):
    return sorted(n for n in os.listdir(root) if n.startswith(txn.JOURNAL_DIR))


@pytest.mark.parametrize("command,signum", [("apply", signal.SIGINT),
                                            ("revert", signal.SIGTERM)])
def test_a_signal_at_any_step_leaves_no_journal(tmp_path, monkeypatch, fast, sigterm_raises,
                                               command, signum):
    patches = two_patch_series(tmp_path)
    installed = install_base(tmp_path / "site")
    site = installed.parent
    if command == "revert":
        engine.apply(str(installed), patches_dir=patches)
    start = tmp_path / "start"
    shutil.copytree(site, start)
    steps = []
    monkeypatch.setattr(txn, "fault_hook", lambda op, path: steps.append(op))
    getattr(engine, command)(str(installed), patches_dir=patches)
    whole = {"before": snapshot(start), "after": snapshot(site)}
    total = len(steps)
    assert total > 10

    for at in range(1, total + 1):
        shutil.rmtree(site)
        shutil.copytree(start, site)
        seen = []

        def signal_at(op, path):
            seen.append(op)
            if len(seen) == at:
                os.kill(os.getpid(), signum)

        monkeypatch.setattr(txn, "fault_hook", signal_at)
        with pytest.raises((KeyboardInterrupt, Terminated)):
            getattr(engine, command)(str(installed), patches_dir=patches)
        where = f"{signal.Signals(signum).name} at step {at} of {total}"
        assert _journals(installed) == [], where
        assert snapshot(site) in whole.values(), where


_SIGNAL_AT_COMMIT = """
import os, sys
from sglpatch import cli, txn
def hook(op, path):
    if op == "rename" and path.name == txn.JOURNAL_DIR + ".done":
        os.kill(os.getpid(), int(sys.argv[2]))
txn.fault_hook = hook
sys.exit(cli.main(["apply", "--sglang-dir", sys.argv[1]]))
"""


@pytest.mark.parametrize("signum,code", [(signal.SIGTERM, -signal.SIGTERM),
                                         (signal.SIGINT, 130)])
def test_a_real_signal_at_the_commit_is_delivered_after_the_clean_up(installed, signum,
                                                                     code):
    # the child takes SIGINT as a foreground run does (not ignored, as a
    # background job of a shell would inherit it)
    result = subprocess.run([sys.executable, "-c", _SIGNAL_AT_COMMIT, str(installed),
                             str(int(signum))], cwd=REPO, capture_output=True, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert result.returncode == code, result.stderr
    assert _journals(installed) == []
    report = engine.status_report(str(installed))
    assert {p["status"] for p in report["patches"]} == {"applied"}
    assert report["leftovers"] == [] and not report["interrupted_run_pending"]


@pytest.mark.parametrize("left", [[".sglpatch-journal.done"],
                                  [".sglpatch-journal.new", ".sglpatch-journal.done"]])
def test_status_reports_a_killed_runs_journal_and_the_next_run_removes_it(pristine, left):
    for name in left:  # what a run killed before its clean-up leaves
        (pristine / name / "saved").mkdir(parents=True)
        (pristine / name / "saved" / "0").write_bytes(b"an original\n")
    report = engine.status_report(str(pristine))
    assert report["interrupted_run_pending"] is True
    assert sorted(report["leftovers"]) == sorted(left)
    text = sglpatch_cli("status", "--sglang-dir", str(pristine))
    assert text.returncode == 0 and all(name in text.stdout for name in left)

    before = snapshot(pristine)
    message = one_error_line(sglpatch_cli("check", "--sglang-dir", str(pristine)))
    assert snapshot(pristine) == before  # check changes nothing
    hints = hinted_commands(message)
    assert hints
    for hint in hints:  # the commands the refusal names do remove it
        shutil.rmtree(pristine.parent / "copy", ignore_errors=True)
        copy = shutil.copytree(pristine, pristine.parent / "copy")
        result = sglpatch_cli(*hint.split(), "--sglang-dir", str(copy))
        assert result.returncode == 0, (hint, result.stderr)
        assert _journals(copy) == [], hint
    assert sglpatch_cli("check", "--sglang-dir", str(copy)).returncode == 0


def test_an_empty_store_without_a_state_file_is_reported_and_removed(pristine):
    # What an older sglpatch left when a revert was killed while cleaning up.
    (pristine / ".sglpatch-pristine").mkdir()
    before = snapshot(pristine)
    report = engine.status_report(str(pristine))
    assert ".sglpatch-pristine" in report["leftovers"]
    result = sglpatch_cli("revert", "--sglang-dir", str(pristine))
    assert result.returncode == 0, result.stderr
    assert not os.path.lexists(pristine / ".sglpatch-pristine")
    assert snapshot(pristine) == before
    assert engine.status_report(str(pristine))["leftovers"] == []
