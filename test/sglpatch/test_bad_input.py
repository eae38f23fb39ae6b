"""Every bad input is refused with a one-line reason, and changes nothing."""

import os
import subprocess
import sys

import pytest
from conftest import REPO, make_read_only, make_writable, snapshot

from sglpatch import engine, txn
from sglpatch.errors import SglpatchError
from sglpatch.series import load_series


def refused(*args):
    result = subprocess.run(
        [sys.executable, "-m", "sglpatch", *args],
        capture_output=True, text=True, cwd=REPO,
    )
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sglpatch: error: "), lines
    return lines[0]


def test_wrong_sglang_version(pristine):
    version = pristine / "_version.py"
    version.write_text(version.read_text().replace("0.5.12.post1", "0.5.13"))
    before = snapshot(pristine)
    message = refused("apply", "--sglang-dir", str(pristine))
    assert "sglang 0.5.13" in message and "0.5.12.post1 only" in message
    assert snapshot(pristine) == before


def test_locally_edited_file(pristine):
    rel = load_series().patches[0].files[1]
    with open(pristine / rel, "a") as f:
        f.write("# my local fix\n")
    before = snapshot(pristine)
    message = refused("apply", "--sglang-dir", str(pristine))
    assert rel in message and "pristine" in message
    assert snapshot(pristine) == before


def test_read_only_package(pristine):
    before = snapshot(pristine)
    make_read_only(pristine)
    try:
        message = refused("apply", "--sglang-dir", str(pristine))
        assert "cannot write" in message and "read-only" in message
    finally:
        make_writable(pristine)
    assert snapshot(pristine) == before


def test_revert_of_read_only_package(pristine):
    engine.apply(str(pristine))
    before = snapshot(pristine)
    make_read_only(pristine)
    try:
        refused("revert", "--sglang-dir", str(pristine))
    finally:
        make_writable(pristine)
    assert snapshot(pristine) == before


@pytest.mark.parametrize("kind", ["missing", "empty", "no-srt"])
def test_not_an_sglang_package(tmp_path, kind):
    target = tmp_path / "pkg"
    if kind != "missing":
        target.mkdir()
    if kind == "no-srt":
        (target / "__init__.py").write_text("")
        (target / "_version.py").write_text("__version__ = version = '0.5.12.post1'\n")
    before = snapshot(tmp_path)
    message = refused("apply", "--sglang-dir", str(target))
    assert str(target) in message
    assert snapshot(tmp_path) == before


def test_corrupted_patch_file_is_caught_by_its_checksum(pristine, patches_copy):
    patch = next(patches_copy.glob("0001-*.patch"))
    patch.write_bytes(patch.read_bytes().replace(b"pass\n", b"pas\n", 1))
    before = snapshot(pristine)
    with pytest.raises(SglpatchError, match="corrupted"):
        engine.apply(str(pristine), patches_dir=patches_copy)
    assert snapshot(pristine) == before


def test_corrupted_patch_with_matching_checksum_does_not_apply(pristine, patches_copy):
    # Even if the manifest was regenerated for a broken patch, git apply
    # refuses the hunk and nothing is written.
    import json

    from sglpatch.series import sha256_file

    patch = next(patches_copy.glob("0001-*.patch"))
    lines = patch.read_text().splitlines(keepends=True)
    # Break the first context line of the first hunk: it no longer matches sglang.
    hunk = next(i for i, line in enumerate(lines) if line.startswith("@@"))
    context = next(i for i in range(hunk + 1, len(lines)) if lines[i].startswith(" "))
    lines[context] = " # not what sglang has here\n"
    patch.write_text("".join(lines))
    manifest = json.loads((patches_copy / "manifest.json").read_text())
    manifest["patches"][0]["sha256"] = sha256_file(patch)
    (patches_copy / "manifest.json").write_text(json.dumps(manifest))
    before = snapshot(pristine)
    with pytest.raises(SglpatchError, match="does not apply cleanly"):
        engine.apply(str(pristine), patches_dir=patches_copy)
    assert snapshot(pristine) == before


def test_series_names_a_missing_patch(pristine, patches_copy):
    with open(patches_copy / "series", "a") as f:
        f.write("0099-no-such-patch.patch\n")
    before = snapshot(pristine)
    with pytest.raises(SglpatchError, match="0099-no-such-patch.patch"):
        engine.apply(str(pristine), patches_dir=patches_copy)
    assert snapshot(pristine) == before


def _renames_into_package(op, path):
    return op == "rename" and ".sglpatch-journal" not in str(path)


def test_failure_after_first_written_file_rolls_back(pristine, monkeypatch):
    before = snapshot(pristine)
    written = []

    def interrupt_at_second_file(op, path):
        if _renames_into_package(op, path):
            written.append(path)
            if len(written) == 2:
                raise KeyboardInterrupt  # Ctrl-C half-way

    monkeypatch.setattr(txn, "fault_hook", interrupt_at_second_file)
    with pytest.raises(KeyboardInterrupt):
        engine.apply(str(pristine))
    assert len(written) > 2  # the rollback renamed the first one back
    assert snapshot(pristine) == before  # no state file, no journal left


_DIE_AT_SECOND_FILE = """
import os, sys
from sglpatch import engine, txn
written = []
def die_at_second_file(op, path):
    if op == "rename" and ".sglpatch-journal" not in str(path):
        if len(written) == int(sys.argv[2]):
            os._exit(9)
        written.append(path)
txn.fault_hook = die_at_second_file
engine.apply(sys.argv[1])
"""


def test_hard_kill_half_way_is_rolled_back_by_the_next_run(pristine):
    # The process dies (no except/finally runs) after one file was replaced.
    before = snapshot(pristine)
    result = subprocess.run(
        [sys.executable, "-c", _DIE_AT_SECOND_FILE, str(pristine), "1"], cwd=REPO)
    assert result.returncode == 9
    assert snapshot(pristine) != before  # half-applied, journal on disk

    report = engine.status_report(str(pristine))
    assert report["interrupted_run_pending"] is True

    engine.revert(str(pristine))  # rolls the journal back first
    assert snapshot(pristine) == before


def test_hard_kill_then_apply_completes(pristine):
    subprocess.run([sys.executable, "-c", _DIE_AT_SECOND_FILE, str(pristine), "0"],
                   cwd=REPO)
    outcome = engine.apply(str(pristine))
    assert outcome.changed
    statuses = engine.status_report(str(pristine))["patches"]
    assert {p["status"] for p in statuses} == {"applied"}
    assert not (pristine / txn.JOURNAL_DIR).exists()


def test_tool_imports_only_the_standard_library():
    script = (
        "import sys; before = set(sys.modules); import sglpatch.cli, sglpatch.maintainer; "
        "extra = {m.split('.')[0] for m in set(sys.modules) - before}; "
        "print(sorted(extra - set(sys.stdlib_module_names) - {'sglpatch'}))"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True,
                            text=True, cwd=REPO)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr
