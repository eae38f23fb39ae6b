"""`pip install .` from a checkout it may not write to: building sglpatch
writes nothing into the source tree, and the wheel holds the tool and its
series, and the `sglpatch` command."""

import configparser
import os
import subprocess
import sys
import zipfile

import pytest
from conftest import REPO

from sglpatch.series import PATCHES_DIR


def _tree(root):
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
            for p in root.rglob("*")}


@pytest.fixture
def checkout(tmp_path):
    """The files git tracks that a build reads, as a clean clone has them."""
    listed = subprocess.run(["git", "ls-files", "-z", "pyproject.toml", "README.md",
                             "python/sglpatch"], cwd=REPO, capture_output=True,
                            check=True).stdout.split(b"\0")
    dest = tmp_path / "checkout"
    for rel in filter(None, listed):
        source = REPO / rel.decode()
        if source.is_file():
            (dest / rel.decode()).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel.decode()).write_bytes(source.read_bytes())
    return dest


def test_building_writes_nothing_into_the_checkout(checkout, tmp_path):
    before = _tree(checkout)
    out = tmp_path / "wheels"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-index",
         "--no-build-isolation", "-w", str(out), str(checkout)],
        capture_output=True, text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert _tree(checkout) == before

    wheel = next(out.glob("sglpatch-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        series = zf.read("sglpatch/patches/series")
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        scripts = configparser.ConfigParser()
        scripts.read_string(zf.read(entry_points).decode())
    assert series == (PATCHES_DIR / "series").read_bytes()
    shipped = {f"sglpatch/patches/{p.name}" for p in PATCHES_DIR.iterdir() if p.is_file()}
    assert shipped <= names and "sglpatch/cli.py" in names
    assert scripts["console_scripts"]["sglpatch"] == "sglpatch.cli:main"
