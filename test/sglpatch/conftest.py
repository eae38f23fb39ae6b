"""Fixtures for the tool's tests: pristine sglang 0.5.12.post1 copies from the wheel."""

import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sglpatch.series import PATCHES_DIR, load_series

REPO = Path(__file__).resolve().parents[2]


def base_wheel() -> Path:
    """The sglang 0.5.12.post1 wheel scripts/setup_cpu_venv.sh keeps in the venv."""
    explicit = os.environ.get("SGLPATCH_SGLANG_WHEEL")
    candidates = [Path(explicit)] if explicit else sorted(
        (REPO / ".venv" / "sglang-wheel").glob("sglang-0.5.12.post1-*.whl")
    )
    if not candidates or not candidates[0].is_file():
        pytest.fail("no sglang 0.5.12.post1 wheel: run `make venv` "
                    "(or set SGLPATCH_SGLANG_WHEEL)")
    return candidates[0]


# A few files the series never touches, to prove they are left alone too.
_BYSTANDERS = ("sglang/version.py", "sglang/srt/managers/io_struct.py")


@pytest.fixture(scope="session")
def wheel_path() -> Path:
    return base_wheel()


@pytest.fixture
def pristine(tmp_path, wheel_path) -> Path:
    """A minimal pristine sglang package: the files the series touches + a few."""
    wanted = {"sglang/__init__.py", "sglang/_version.py", *_BYSTANDERS}
    wanted |= {f"sglang/{rel}" for rel in load_series().touched_files()}
    with zipfile.ZipFile(wheel_path) as zf:
        for name in wanted:
            if name in zf.namelist():
                zf.extract(name, tmp_path)
    root = tmp_path / "sglang"
    assert (root / "srt").is_dir()
    return root


@pytest.fixture
def installed(tmp_path, wheel_path) -> Path:
    """Like `pristine`, laid out as pip installs it: the package in a site
    directory beside its dist-info (RECORD included)."""
    site = tmp_path / "site"
    wanted = {"sglang/__init__.py", "sglang/_version.py", *_BYSTANDERS}
    wanted |= {f"sglang/{rel}" for rel in load_series().touched_files()}
    with zipfile.ZipFile(wheel_path) as zf:
        for name in zf.namelist():
            if name in wanted or ".dist-info/" in name:
                zf.extract(name, site)
    return site / "sglang"


def sglpatch_cli(*args, env_extra=None, **kwargs):
    """`python -m sglpatch ARGS` from the repository."""
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "sglpatch", *args],
                          capture_output=True, text=True, cwd=REPO, env=env, **kwargs)


def snapshot(root: Path) -> dict:
    """Every file below root with its bytes (the state files included)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def patches_copy(tmp_path) -> Path:
    """A writable copy of the repository's series, for corrupting."""
    dest = tmp_path / "patches"
    shutil.copytree(PATCHES_DIR, dest)
    return dest


def make_read_only(root: Path) -> None:
    for d in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
        d.chmod(d.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def make_writable(root: Path) -> None:
    for d in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
        d.chmod(d.stat().st_mode | stat.S_IWUSR)


def hinted_commands(message: str) -> list:
    """The sglpatch commands a message tells the user to run (`sglpatch X`)."""
    import re

    return re.findall(r"`sglpatch ([a-z-]+(?: --[a-z-]+)*)`", message)


def one_error_line(result) -> str:
    """The single `sglpatch: error:` line of a refused command (exit 2)."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sglpatch: error: "), lines
    return lines[0]


@pytest.fixture
def fast(monkeypatch):
    """Neither git apply in scratch nor the disk's durability is under test
    here: run each distinct staging once, and skip fsync (hundreds of runs)."""
    from sglpatch import engine

    monkeypatch.setattr(os, "fsync", lambda fd: None)
    real, memo = engine.run_in_scratch, {}

    def cached(root, files, patches, reverse=False, progress=None):
        key = (tuple(files), tuple(p.name for p in patches), reverse,
               tuple((root / f).read_bytes() if (root / f).is_file() else None
                     for f in files))
        if key not in memo:
            memo[key] = real(root, files, patches, reverse=reverse)
        return dict(memo[key])

    monkeypatch.setattr(engine, "run_in_scratch", cached)
