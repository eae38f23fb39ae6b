"""pip's view of a patched package stays true: RECORD, uninstall, reinstall;
and a package patched by one sglpatch can be reverted by another."""

import base64
import csv
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import sglpatch_cli, snapshot

from sglpatch import engine
from sglpatch.series import SERIES_FILE, load_series, read_series_names

# sglpatch's files in the package, as documented (README).
STATE_FILE = ".sglpatch-state.json"
STORE_DIR = ".sglpatch-pristine"


def _record(root: Path) -> Path:
    return next(root.parent.glob("sglang-*.dist-info")) / "RECORD"


def _rows(root: Path) -> dict:
    with open(_record(root), newline="") as f:
        return {row[0]: row[1:] for row in csv.reader(f)}


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def test_record_lists_every_file_with_its_true_hash_and_revert_restores_it(installed):
    original = _record(installed).read_bytes()
    engine.apply(str(installed))
    rows = _rows(installed)
    files = [p for p in installed.rglob("*") if p.is_file()]
    assert any(STORE_DIR in str(p) for p in files)
    for path in files:
        rel = f"sglang/{path.relative_to(installed)}"
        data = path.read_bytes()
        assert rows.get(rel) == [_record_hash(data), str(len(data))], rel
    assert f"sglang/{STATE_FILE}" in rows

    engine.revert(str(installed))
    assert _record(installed).read_bytes() == original


def test_status_explains_a_stale_state_file(installed, tmp_path):
    pristine = tmp_path / "pristine-copy"
    shutil.copytree(installed, pristine)
    engine.apply(str(installed))
    # sglang's files put back by something that keeps unknown files (an old
    # sglpatch's state file survived a reinstall, `pip install --target`, ...)
    for path in pristine.rglob("*"):
        if path.is_file():
            shutil.copyfile(path, installed / path.relative_to(pristine))

    report = json.loads(sglpatch_cli("status", "--json", "--sglang-dir",
                                     str(installed)).stdout)
    # A file the series created is unknown to sglang's files and stays
    # behind: the patches that write it read as partly applied, every other
    # one as not applied.
    patches = load_series().patches
    created = {c.path for p in patches for c in p.changes if c.before is None}
    writing = {p.name for p in patches if created & set(p.files)}
    assert writing
    for patch in report["patches"]:
        want = "partly applied" if patch["name"] in writing else "not applied"
        assert patch["status"] == want, patch["name"]
    assert "stale" in report["state"]["problem"]
    assert all(path in report["state"]["problem"] for path in created)
    text = sglpatch_cli("status", "--sglang-dir", str(installed)).stdout
    assert "stale" in text and "reinstalled" in text
    # revert takes the package back to pristine, the files the series created too
    assert sglpatch_cli("revert", "--sglang-dir", str(installed)).returncode == 0
    assert snapshot(installed) == snapshot(pristine)

    reverted = sglpatch_cli("revert", "--sglang-dir", str(installed))
    assert reverted.returncode == 0, reverted.stderr
    assert "stale" in reverted.stdout
    assert snapshot(installed) == snapshot(pristine)


def test_a_later_sglpatch_with_another_series_still_reverts(installed, patches_copy):
    before = snapshot(installed.parent)
    engine.apply(str(installed))
    # The next sglpatch release ships a series that starts the same but
    # changed later patches (here: dropped them).
    names = read_series_names(patches_copy)
    (patches_copy / SERIES_FILE).write_text("".join(f"{n}\n" for n in names[:3]))
    manifest = json.loads((patches_copy / "manifest.json").read_text())
    manifest["patches"] = manifest["patches"][:3]
    (patches_copy / "manifest.json").write_text(json.dumps(manifest))
    outcome = engine.revert(str(installed), patches_dir=patches_copy)
    assert f"reverted {len(names)} patches" in outcome.message
    assert snapshot(installed.parent) == before


def test_package_patched_by_sglpatch_0_1_0_still_reverts(pristine):
    before = snapshot(pristine)
    engine.apply(str(pristine))
    # What 0.1.0 left: a state file without a format, and no kept copies.
    state = json.loads((pristine / STATE_FILE).read_text())
    del state["format"]
    (pristine / STATE_FILE).write_text(json.dumps(state))
    shutil.rmtree(pristine / STORE_DIR)
    report = engine.status_report(str(pristine))
    assert report["state"]["format"] == 1
    engine.revert(str(pristine))
    assert snapshot(pristine) == before


def _pip(venv_python: Path, *args):
    result = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv_python),
                             *args], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


def test_pip_uninstall_and_reinstall_of_a_patched_sglang(tmp_path, wheel_path):
    pip_version = subprocess.run([sys.executable, "-m", "pip", "--version"],
                                 capture_output=True, text=True).stdout.split()
    if len(pip_version) < 2 or tuple(map(int, pip_version[1].split(".")[:2])) < (22, 3):
        pytest.skip("needs pip >= 22.3 (pip --python)")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip())
    install = ("install", "-q", "--no-deps", "--no-index", "--no-compile", str(wheel_path))

    _pip(python, *install)
    applied = sglpatch_cli("apply", "--sglang-dir", str(site / "sglang"))
    assert applied.returncode == 0, applied.stderr
    _pip(python, "uninstall", "-y", "sglang")
    assert not (site / "sglang").exists()  # state file and copies went too

    _pip(python, *install)
    assert sglpatch_cli("apply", "--sglang-dir", str(site / "sglang")).returncode == 0
    _pip(python, *install, "--force-reinstall")
    report = json.loads(sglpatch_cli("status", "--json", "--sglang-dir",
                                     str(site / "sglang")).stdout)
    # Reinstalling sglang drops the series, and sglpatch's files with it.
    assert report["state"] is None
    assert {p["status"] for p in report["patches"]} == {"not applied"}
    assert not (site / "sglang" / STORE_DIR).exists()
