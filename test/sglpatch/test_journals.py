"""Journals this sglpatch did not write, or cannot read.

A killed sglpatch 0.1.0 left `.sglpatch-journal/` with `journal.json` and
`originals/`: it is rolled back like a journal of this release. A journal
that cannot be read (no index, an unparsable one, one naming a path outside
the package) is left as it is: `status` reports it, every other command
refuses naming the directory, and no message sends the user to a command
that would only refuse again.
"""

import json
import shutil

import pytest
from conftest import hinted_commands, one_error_line, sglpatch_cli, snapshot

from sglpatch import engine
from sglpatch.series import load_series
from sglpatch.txn import JOURNAL_DIR

_COMMANDS = (["apply"], ["revert"], ["check"], ["apply", "--dry-run"])


def _unreadable(root, kind):
    journal = root / JOURNAL_DIR
    (journal / "saved").mkdir(parents=True)
    (journal / "saved" / "0").write_bytes(b"kept original\n")
    if kind == "unparsable":
        (journal / "index.json").write_text('{"entries": [')
    elif kind == "outside":
        (journal / "index.json").write_text(json.dumps(
            {"entries": [{"path": "../victim.py", "existed": True}], "made_dirs": []}))
    return journal


@pytest.mark.parametrize("kind", ["no-index", "unparsable", "outside"])
def test_an_unreadable_journal_is_named_and_never_guessed_at(pristine, kind):
    victim = pristine.parent / "victim.py"
    victim.write_text("not sglpatch's\n")
    journal = _unreadable(pristine, kind)
    before = snapshot(pristine.parent)

    status = sglpatch_cli("status", "--json", "--sglang-dir", str(pristine))
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert str(journal) in report["journal_problem"]
    for command in _COMMANDS:
        message = one_error_line(sglpatch_cli(*command, "--sglang-dir", str(pristine)))
        assert str(journal) in message, command
        for hint in hinted_commands(message):  # none of them may just refuse again
            result = sglpatch_cli(*hint.split(), "--sglang-dir", str(pristine))
            assert result.returncode == 0, (command, hint, result.stderr)
    assert snapshot(pristine.parent) == before  # the journal and the victim as they were


def _files(n):
    return load_series().patches[0].files[:n]


def _old_journal(root, originals, created):
    """What sglpatch 0.1.0 left when it was killed while replacing files."""
    journal = root / JOURNAL_DIR
    files = {}
    for rel in originals:
        saved = journal / "originals" / rel
        saved.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, saved)
        files[rel] = True
    for rel in created:
        files[rel] = False
    (journal / "journal.json").write_text(json.dumps({"files": files}))
    return journal


def test_a_killed_0_1_0_runs_journal_is_rolled_back(pristine):
    before = snapshot(pristine)
    first, second = _files(2)
    journal = _old_journal(pristine, [first, second], ["srt/sglpatch_added.py"])
    (pristine / first).write_text("# half written by sglpatch 0.1.0\n")
    (pristine / "srt" / "sglpatch_added.py").write_text("ADDED = 1\n")
    tmp = pristine / (second + ".sglpatch-tmp")
    tmp.write_text("# 0.1.0's temporary file\n")

    report = engine.status_report(str(pristine))
    assert report["interrupted_run_pending"] and report["journal_problem"] is None
    reverted = sglpatch_cli("revert", "--sglang-dir", str(pristine))
    assert reverted.returncode == 0, reverted.stderr
    assert snapshot(pristine) == before
    assert not journal.exists()


@pytest.mark.parametrize("left", ["writing", "deleting"])
def test_a_0_1_0_journal_with_nothing_to_put_back_is_removed(pristine, left):
    journal = _old_journal(pristine, _files(2), [])
    if left == "writing":  # killed before it wrote its index: nothing touched
        (journal / "journal.json").unlink()
    else:  # killed while deleting the journal of a finished run
        shutil.rmtree(journal / "originals")
    applied = sglpatch_cli("apply", "--sglang-dir", str(pristine))
    assert applied.returncode == 0, applied.stderr
    assert not journal.exists()
    report = engine.status_report(str(pristine))
    assert {p["status"] for p in report["patches"]} == {"applied"}
