"""worktree -> export reproduces the repository's series byte for byte, and the
work tree holds the repository's unit tests of the patched sglang."""

import json
import subprocess
import sys

import pytest
from conftest import REPO

from sglpatch.maintainer import _IDENTITY, BASE_TAG
from sglpatch.series import MANIFEST_FILE, PATCHES_DIR, SERIES_FILE, read_series_names


def run(*args, cwd=REPO):
    result = subprocess.run([sys.executable, "-m", "sglpatch", *args],
                            capture_output=True, text=True, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return result


def git(repo, *args):
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                          check=True).stdout


@pytest.fixture(scope="module")
def series_tree(tmp_path_factory, wheel_path):
    """One `sglpatch worktree` of python/sglpatch/patches for this module's tests
    (about 5 s of CPU each): tests that change it work on a clone, with the
    work tree's identity."""
    tree = tmp_path_factory.mktemp("maintainer") / "wt"
    run("worktree", str(tree), "--wheel", str(wheel_path))
    return tree


def test_worktree_then_export_round_trip(tmp_path, series_tree):
    tree = series_tree

    names = read_series_names(PATCHES_DIR)
    log = git(tree, "log", "--format=%s", f"{BASE_TAG}..HEAD").splitlines()
    assert len(log) == len(names)  # one commit per patch
    assert log[-1].startswith("attention: ")  # the first patch is the oldest commit
    assert (tree / "python" / "sglang" / "_version.py").is_file()
    assert git(tree, "status", "--porcelain") == ""

    # The series carries its unit tests: the work tree (git am of every
    # patch onto the base tag) holds the repository's test/registered/unit
    # byte for byte, so sglang's own CI finds them in a fork too.
    unit = REPO / "test" / "registered" / "unit"
    ours = {p.relative_to(unit): p.read_bytes() for p in unit.rglob("*.py")}
    theirs = {p.relative_to(tree / "test" / "registered" / "unit"): p.read_bytes()
              for p in (tree / "test" / "registered" / "unit").rglob("*.py")}
    assert sorted(theirs) == sorted(ours)
    for rel, data in ours.items():
        assert theirs[rel] == data, rel

    out = tmp_path / "exported"
    run("export", str(tree), "--patches-dir", str(out))
    for name in names:
        assert (out / name).read_bytes() == (PATCHES_DIR / name).read_bytes(), name
    assert (out / SERIES_FILE).read_text() == (PATCHES_DIR / SERIES_FILE).read_text()
    assert (out / MANIFEST_FILE).read_text() == (PATCHES_DIR / MANIFEST_FILE).read_text()


def test_export_sees_a_new_commit(tmp_path, series_tree):
    tree = tmp_path / "wt"
    git(tmp_path, "clone", "-q", str(series_tree), str(tree))
    git(tree, "config", "user.name", _IDENTITY["GIT_AUTHOR_NAME"])
    git(tree, "config", "user.email", _IDENTITY["GIT_AUTHOR_EMAIL"])
    target = tree / "python" / "sglang" / "srt" / "server_args.py"
    target.write_text(target.read_text() + "\n# sglpatch: a maintainer's edit\n")
    git(tree, "commit", "-q", "-am", "Z: a maintainer's edit")

    out = tmp_path / "exported"
    run("export", str(tree), "--patches-dir", str(out))
    names = read_series_names(out)
    assert len(names) == len(read_series_names(PATCHES_DIR)) + 1
    assert names[-1].endswith("-Z-a-maintainer-s-edit.patch")
    assert "+# sglpatch: a maintainer's edit" in (out / names[-1]).read_text()


def test_a_series_carrying_upstream_tests_round_trips(tmp_path, wheel_path):
    """Files outside python/sglang/ travel in the patches (git am, worktree,
    export) and are listed, not hashed, in the manifest."""
    tree = tmp_path / "wt"
    run("worktree", str(tree), "--wheel", str(wheel_path), "--base-only")
    source = tree / "python" / "sglang" / "srt" / "server_args.py"
    source.write_text(source.read_text() + "\n# carries its test\n")
    test_file = tree / "test" / "registered" / "unit" / "srt" / "test_marker.py"
    test_file.parent.mkdir(parents=True)
    test_file.write_text("def test_marker():\n    assert True\n")
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "-m", "T: a change with its test")

    out = tmp_path / "exported"
    run("export", str(tree), "--patches-dir", str(out))
    manifest = json.loads((out / MANIFEST_FILE).read_text())
    entry = manifest["patches"][0]
    assert entry["not_installed"] == ["test/registered/unit/srt/test_marker.py"]
    assert [f["path"] for f in entry["files"]] == ["srt/server_args.py"]

    again = tmp_path / "wt2"
    run("worktree", str(again), "--wheel", str(wheel_path), "--patches-dir", str(out))
    assert (again / test_file.relative_to(tree)).read_bytes() == test_file.read_bytes()
    out2 = tmp_path / "exported2"
    run("export", str(again), "--patches-dir", str(out2))
    for path in out.iterdir():
        assert (out2 / path.name).read_bytes() == path.read_bytes(), path.name
