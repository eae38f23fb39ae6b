"""Every bad input is refused with a one-line reason, and changes nothing."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO, make_read_only, make_writable, sglpatch_cli, snapshot

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


# Every failure: one line on stderr, exit 2 (Ctrl-C: 130), nothing changed.


def test_state_file_that_is_json_but_not_an_object(pristine):
    rel = load_series().patches[0].files[0]
    with open(pristine / rel, "a") as f:
        f.write("# local edit\n")
    (pristine / ".sglpatch-state.json").write_text("[1, 2]\n")
    before = snapshot(pristine)
    message = refused("apply", "--sglang-dir", str(pristine))
    assert "locally edited" in message and "None" not in message
    status = sglpatch_cli("status", "--sglang-dir", str(pristine))
    assert status.returncode == 0 and "not an object" in status.stdout
    assert snapshot(pristine) == before


def test_state_file_without_a_version_never_says_sglpatch_none(pristine):
    engine.apply(str(pristine))
    state_path = pristine / ".sglpatch-state.json"
    state = json.loads(state_path.read_text())
    del state["sglpatch_version"]
    state["applied"][0]["sha256"] = "0" * 64  # from another series
    state_path.write_text(json.dumps(state))
    rel = load_series().patches[0].files[0]
    with open(pristine / rel, "a") as f:
        f.write("# local edit\n")
    message = refused("apply", "--sglang-dir", str(pristine))
    assert "another series" in message and "None" not in message


def test_name_too_long(tmp_path):
    message = refused("status", "--sglang-dir", str(tmp_path / ("x" * 300)))
    assert "too long" in message


def test_empty_sglang_dir_is_refused():
    assert "empty" in refused("status", "--sglang-dir", "")


def test_site_directory_given_for_the_package(pristine):
    message = refused("apply", "--sglang-dir", str(pristine.parent))
    assert f"did you mean {pristine}?" in message


def test_package_without_version_file_still_reports(pristine):
    (pristine / "_version.py").unlink()
    status = sglpatch_cli("status", "--sglang-dir", str(pristine))
    assert status.returncode == 0, status.stderr
    assert "version unknown" in status.stdout and "not applied" in status.stdout
    assert "_version.py" in refused("apply", "--sglang-dir", str(pristine))


def test_unreadable_file_is_one_line(pristine, monkeypatch, capsys):
    from pathlib import Path

    from sglpatch import cli

    rel = load_series().patches[0].files[0]
    real = Path.read_bytes

    def read_bytes(path):
        if path.name == Path(rel).name:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    assert cli.main(["status", "--sglang-dir", str(pristine)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Permission denied" in err[0] and rel in err[0], err


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod 000 directory")
def test_unreadable_package_as_a_user(pristine):
    target = pristine / "srt" / "speculative"
    target.chmod(0)
    try:
        assert "Permission denied" in refused("status", "--sglang-dir", str(pristine))
    finally:
        target.chmod(0o755)


def test_immutable_file_is_refused_by_dry_run_and_apply(pristine):
    rel = load_series().patches[-1].files[0]
    if subprocess.run(["chattr", "+i", str(pristine / rel)],
                      capture_output=True).returncode != 0:
        pytest.skip("chattr +i needs root and a file system that supports it")
    try:
        before = snapshot(pristine)
        for args in (["apply", "--dry-run"], ["apply"]):
            message = refused(*args, "--sglang-dir", str(pristine))
            assert "immutable" in message and rel in message
        assert snapshot(pristine) == before
    finally:
        subprocess.run(["chattr", "-i", str(pristine / rel)])


def test_worktree_onto_a_file_or_a_missing_wheel(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("")
    assert "not a directory" in refused("worktree", str(a_file), "--wheel", "x.whl")
    assert "no wheel" in refused("worktree", str(tmp_path / "wt"), "--wheel",
                                 str(tmp_path / "missing.whl"))
    assert not (tmp_path / "wt").exists()


def test_non_utf8_path_with_utf8_output(pristine, tmp_path):
    odd = tmp_path.as_posix().encode() + b"/caf\xe9"
    os.mkdir(odd)
    os.rename(pristine, odd + b"/sglang")
    package = odd + b"/sglang"
    for args in ([b"apply"], [b"status"], [b"revert"]):
        result = subprocess.run(
            [sys.executable, "-m", "sglpatch", *args, b"--sglang-dir", package],
            capture_output=True, cwd=REPO,
            env=dict(os.environ, PYTHONIOENCODING="utf-8"))
        assert result.returncode == 0, result.stderr
        assert b"Traceback" not in result.stderr
    assert not os.path.exists(package + b"/.sglpatch-state.json")


def _wait_until_it_opens(proc, path, timeout_s=60.0):
    """Until PROC holds an open descriptor of PATH: the package directory,
    which sglpatch opens to take its lock and keeps open while it waits."""
    want = os.path.realpath(path)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            fds = os.listdir(f"/proc/{proc.pid}/fd")
        except FileNotFoundError:
            fds = []
        for fd in fds:
            try:
                if os.readlink(f"/proc/{proc.pid}/fd/{fd}") == want:
                    return
            except OSError:
                continue
        time.sleep(0.02)
    raise AssertionError(f"sglpatch never opened {want}")


def test_ctrl_c_while_waiting_is_exit_130_in_one_line(pristine):
    from sglpatch.lock import package_lock

    before = snapshot(pristine)
    with package_lock(pristine, exclusive=True):
        # A shell's background job inherits SIGINT ignored; a user's Ctrl-C
        # reaches a foreground sglpatch with the default disposition.
        proc = subprocess.Popen(
            [sys.executable, "-m", "sglpatch", "apply", "--sglang-dir", str(pristine)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        _wait_until_it_opens(proc, pristine)  # started, and waiting for the lock
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "interrupted" in lines[0], lines
    assert snapshot(pristine) == before


def test_subcommand_help():
    for command, words in (("apply", ["--through", "all patches or none"]),
                           ("revert", ["pristine"]), ("export", ["--patches-dir"])):
        result = sglpatch_cli(command, "--help")
        assert result.returncode == 0
        assert all(word in result.stdout for word in words), result.stdout
