"""What sglpatch keeps as pristine, and what revert writes back, is checked
against the manifest; a file that another program changes while sglpatch
works (an editor, an older sglpatch: neither takes the lock) is never kept
as pristine nor written over unseen.

The other writer is made deterministic here: it writes at a chosen point of
the command (after the survey, while the journal is written, after sglpatch
wrote the file).
"""

import json
import re
import shutil

import pytest
from conftest import hinted_commands, one_error_line, sglpatch_cli, snapshot

from sglpatch import engine, txn
from sglpatch.errors import SglpatchError
from sglpatch.series import load_series, read_series_names

OTHER = b"# written by another program while sglpatch worked\n"


def _first_file():
    return load_series().patches[0].files[0]


def _write_other(path):
    tmp = path.with_name("other-writer.tmp")
    tmp.write_bytes(OTHER)
    tmp.replace(path)  # as editors and sglpatch 0.1.0 write: a rename


def test_a_file_changed_after_the_survey_is_not_kept_as_pristine(installed, monkeypatch):
    rel = _first_file()
    before = snapshot(installed.parent)
    real = engine.run_in_scratch

    def staged_then_written(root, files, patches, **kwargs):
        result = real(root, files, patches, **kwargs)
        _write_other(root / rel)  # lands between the survey and the copies
        return result

    monkeypatch.setattr(engine, "run_in_scratch", staged_then_written)
    with pytest.raises(SglpatchError, match=re.escape(rel)):
        engine.apply(str(installed))
    expected = dict(before, **{f"sglang/{rel}": OTHER})
    assert snapshot(installed.parent) == expected  # nothing kept, nothing written


@pytest.mark.parametrize("when", ["journal", "written"])
def test_a_file_changed_while_the_files_are_replaced_is_refused(installed, monkeypatch,
                                                                when):
    rel = _first_file()
    target = installed / rel
    before = snapshot(installed.parent)
    fired = []

    renamed = []

    def other_writer(op, path):
        # "journal": the originals are kept, no file replaced yet;
        # "written": sglpatch's new file is in place (the next file's turn).
        if op != "rename" or fired:
            return
        if when == "journal" and path.name == txn.JOURNAL_DIR or (
                when == "written" and renamed and renamed[-1] == target):
            fired.append(path)
            _write_other(target)
        renamed.append(path)

    monkeypatch.setattr(txn, "fault_hook", other_writer)
    with pytest.raises(SglpatchError, match=re.escape(rel)):
        engine.apply(str(installed))
    assert fired
    after = snapshot(installed.parent)
    assert not any(".sglpatch" in name for name in after)  # no state, no copies
    # Every other file as it was; this one as the other program wrote it.
    assert {k: v for k, v in after.items() if k != f"sglang/{rel}"} == {
        k: v for k, v in before.items() if k != f"sglang/{rel}"}
    assert after[f"sglang/{rel}"] == OTHER


def test_a_state_file_wrong_about_a_pristine_file_does_not_delete_it(pristine):
    before = snapshot(pristine)
    engine.apply(str(pristine))
    state_path = pristine / ".sglpatch-state.json"
    state = json.loads(state_path.read_text())
    rel = _first_file()
    state["files"][rel]["before"] = None  # valid JSON, wrong: "did not exist"
    state_path.write_text(json.dumps(state))
    result = sglpatch_cli("revert", "--sglang-dir", str(pristine))
    assert result.returncode == 0, result.stderr
    assert snapshot(pristine) == before  # the module is back, byte for byte


def test_revert_claims_byte_identity_only_for_files_the_manifest_knows(installed,
                                                                      patches_copy):
    before = snapshot(installed.parent)
    engine.apply(str(installed))
    # A later sglpatch whose series keeps only the first patch.
    names = read_series_names(patches_copy)
    (patches_copy / "series").write_text(names[0] + "\n")
    manifest = json.loads((patches_copy / "manifest.json").read_text())
    manifest["patches"] = manifest["patches"][:1]
    (patches_copy / "manifest.json").write_text(json.dumps(manifest))
    known = {f["path"] for f in manifest["patches"][0]["files"]}

    outcome = engine.revert(str(installed), patches_dir=patches_copy)
    assert snapshot(installed.parent) == before
    claimed = re.search(r"(\d+) files are byte-identical", outcome.message)
    assert claimed and int(claimed.group(1)) == len(known)


def test_a_package_patched_by_0_1_0_with_another_series_names_what_works(pristine):
    engine.apply(str(pristine))
    # What sglpatch 0.1.0 left: no format, no copies, its own series' patches.
    state_path = pristine / ".sglpatch-state.json"
    state = json.loads(state_path.read_text())
    del state["format"]
    state["sglpatch_version"] = "0.1.0"
    for entry in state["applied"]:
        entry["sha256"] = "0" * 64
    state_path.write_text(json.dumps(state))
    shutil.rmtree(pristine / ".sglpatch-pristine")
    rel = _first_file()
    with open(pristine / rel, "a") as f:
        f.write("# as 0.1.0's version of the patch left it\n")
    before = snapshot(pristine)

    message = one_error_line(sglpatch_cli("revert", "--sglang-dir", str(pristine)))
    assert "0.1.0" in message and rel in message
    for hint in hinted_commands(message):  # it names no command that refuses again
        assert sglpatch_cli(*hint.split(), "--sglang-dir", str(pristine)).returncode == 0
    assert snapshot(pristine) == before
