"""export writes where the maintainer works, says where, and refuses
(writing nothing) a work tree whose commits are not a series yet."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import REPO, snapshot
from seriesmaker import git, install_base, two_patch_series

from sglpatch import engine
from sglpatch.maintainer import BASE_TAG
from sglpatch.series import MANIFEST_FILE, read_series_names


def export(tree, *args, cwd=REPO, pythonpath=None):
    env = None if pythonpath is None else dict(os.environ, PYTHONPATH=str(pythonpath))
    return subprocess.run([sys.executable, "-m", "sglpatch", "export", str(tree), *args],
                          capture_output=True, text=True, cwd=cwd, env=env)


@pytest.fixture
def series(tmp_path):
    """A work tree of two commits, and the patches exported from it."""
    patches = two_patch_series(tmp_path)
    return tmp_path / "tree", patches


def _refused_writing_nothing(tree, patches, reason):
    before = snapshot(patches)
    result = export(tree, "--patches-dir", str(patches))
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and reason in lines[0], lines
    assert snapshot(patches) == before


def test_rebase_in_progress_is_refused(series):
    tree, patches = series
    stopped = subprocess.run(["git", "rebase", "--exec", "false", BASE_TAG], cwd=tree,
                             capture_output=True)
    assert stopped.returncode != 0  # stopped after the first commit
    _refused_writing_nothing(tree, patches, "in progress")


def test_empty_commit_is_refused(series):
    tree, patches = series
    git(tree, "commit", "-q", "--allow-empty", "-m", "Z: nothing")
    _refused_writing_nothing(tree, patches, "changes nothing")


@pytest.mark.parametrize("staged", [False, True])
def test_uncommitted_or_staged_changes_are_refused(series, staged):
    tree, patches = series
    path = tree / "python" / "sglang" / "srt" / "alpha.py"
    path.write_text(path.read_text() + "# not committed\n")
    if staged:
        git(tree, "add", str(path))
    _refused_writing_nothing(tree, patches, "uncommitted or staged")


def test_default_is_the_repository_it_runs_in(series, tmp_path):
    tree, _ = series
    # An installed sglpatch (a copy, so its own patches/ can be checked).
    installed = tmp_path / "installed"
    shutil.copytree(REPO / "python" / "sglpatch", installed / "sglpatch")
    shipped = snapshot(installed / "sglpatch" / "patches")
    checkout = tmp_path / "checkout"
    (checkout / "python" / "sglpatch" / "patches").mkdir(parents=True)
    (checkout / "python" / "sglpatch" / "patches" / "series").write_text("")
    subprocess.run(["git", "init", "-q"], cwd=checkout, check=True)

    result = export(tree, cwd=checkout / "python", pythonpath=installed)
    assert result.returncode == 0, result.stderr
    target = checkout / "python" / "sglpatch" / "patches"
    assert f"to {target}" in result.stderr
    assert len(read_series_names(target)) == 2
    assert snapshot(installed / "sglpatch" / "patches") == shipped

    elsewhere = export(tree, cwd=tmp_path, pythonpath=installed)
    assert elsewhere.returncode == 2 and "--patches-dir" in elsewhere.stderr


def test_apply_skips_and_reports_files_outside_the_package(tmp_path):
    patches = two_patch_series(tmp_path, with_test_file=True)
    test_path = "test/registered/unit/srt/test_beta.py"
    manifest = json.loads((patches / MANIFEST_FILE).read_text())
    assert [p.get("not_installed") for p in manifest["patches"]] == [None, [test_path]]
    assert f"b/{test_path}" in (patches / read_series_names(patches)[1]).read_text()

    root = install_base(tmp_path / "site")
    checked = engine.check(str(root), patches_dir=patches)
    assert "skipped 1 file(s) outside python/sglang/" in checked.message
    outcome = engine.apply(str(root), patches_dir=patches)
    assert "skipped 1 file(s)" in outcome.message
    assert (root / "srt" / "beta.py").read_text() == "def beta():\n    return 200\n"
    assert not list((tmp_path / "site").rglob("test_beta.py"))
    report = engine.status_report(str(root), patches_dir=patches)
    assert [p["not_installed"] for p in report["patches"]] == [[], [test_path]]
    assert {p["status"] for p in report["patches"]} == {"applied"}

    # The tree reproduces the test file, and re-exporting is byte-identical.
    again = tmp_path / "again"
    export(tmp_path / "tree", "--patches-dir", str(again))
    assert snapshot(again) == snapshot(patches)

    engine.revert(str(root), patches_dir=patches)
    assert (root / "srt" / "beta.py").read_text() == "def beta():\n    return 2\n"
