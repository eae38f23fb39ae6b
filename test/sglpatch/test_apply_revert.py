"""apply / status / revert / check on a pristine sglang 0.5.12.post1 copy."""

import json
import subprocess
import sys

from conftest import REPO, snapshot

from sglpatch import engine
from sglpatch.engine import STATE_FILE
from sglpatch.series import load_series, sha256_bytes


def sglpatch(*args):
    return subprocess.run(
        [sys.executable, "-m", "sglpatch", *args],
        capture_output=True, text=True, cwd=REPO,
    )


def status(root):
    result = sglpatch("status", "--sglang-dir", str(root), "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_apply_then_status_then_apply_again_then_revert(pristine):
    before = snapshot(pristine)
    series = load_series()

    result = sglpatch("apply", "--sglang-dir", str(pristine))
    assert result.returncode == 0, result.stderr
    assert "applied patches 0001" in result.stdout
    assert "applying 0001-" in result.stderr  # progress goes to stderr

    report = status(pristine)
    assert report["sglang_version"] == "0.5.12.post1"
    assert report["state_file"] is True
    assert [p["status"] for p in report["patches"]] == ["applied"] * len(series.patches)
    assert report["patches"][0]["name"].startswith("0001-attention-")
    for rel, digest in series.final_hashes().items():
        assert sha256_bytes((pristine / rel).read_bytes()) == digest

    state = json.loads((pristine / STATE_FILE).read_text())
    assert [p["name"] for p in state["applied"]] == [p.name for p in series.patches]
    assert state["files"][rel]["before"] == series.pristine_hashes()[rel]

    patched = snapshot(pristine)
    again = sglpatch("apply", "--sglang-dir", str(pristine))
    assert again.returncode == 0
    assert "already applied" in again.stdout
    assert snapshot(pristine) == patched

    reverted = sglpatch("revert", "--sglang-dir", str(pristine))
    assert reverted.returncode == 0, reverted.stderr
    assert snapshot(pristine) == before  # byte-identical, state file gone
    assert [p["status"] for p in status(pristine)["patches"]] == ["not applied"] * len(
        series.patches
    )


def test_bystanders_untouched(pristine):
    untouched = pristine / "srt" / "managers" / "io_struct.py"
    data = untouched.read_bytes()
    engine.apply(str(pristine))
    assert untouched.read_bytes() == data


def test_dry_run_changes_nothing(pristine):
    before = snapshot(pristine)
    result = sglpatch("apply", "--dry-run", "--sglang-dir", str(pristine))
    assert result.returncode == 0, result.stderr
    assert "apply cleanly" in result.stdout
    assert snapshot(pristine) == before


def test_revert_on_pristine_is_a_noop(pristine):
    before = snapshot(pristine)
    result = sglpatch("revert", "--sglang-dir", str(pristine))
    assert result.returncode == 0
    assert "nothing to revert" in result.stdout
    assert snapshot(pristine) == before


def test_check(pristine):
    result = sglpatch("check", "--sglang-dir", str(pristine))
    assert result.returncode == 0, result.stderr
    assert "apply cleanly" in result.stdout
    engine.apply(str(pristine))
    result = sglpatch("check", "--sglang-dir", str(pristine))
    assert result.returncode == 0
    assert "fully applied" in result.stdout


def test_status_flags_local_edit_after_apply(pristine):
    engine.apply(str(pristine))
    rel = load_series().patches[0].files[0]
    with open(pristine / rel, "a") as f:
        f.write("# local edit\n")
    report = status(pristine)
    assert report["patches"][0]["status"] == "locally edited"
    assert report["patches"][0]["locally_edited"] == [rel]


def test_python_m_and_console_script_agree():
    result = sglpatch("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("sglpatch ")
