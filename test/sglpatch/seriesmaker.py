"""A small synthetic series for the tool's tests, made the maintainer's way.

A git tree laid out like upstream (`python/sglang/...`, `test/...`) with the
base tag, one commit per patch, exported with `sglpatch export`; and a
pip-style install of its base (package + dist-info with a true RECORD).
Small, so a test can afford to run apply and revert hundreds of times.
"""

import base64
import hashlib
import os
import subprocess
from pathlib import Path
from typing import Dict, Optional

from sglpatch.maintainer import BASE_TAG, export_series

VERSION_PY = "__version__ = version = '0.5.12.post1'\n"
BASE_FILES = {
    "python/sglang/__init__.py": "",
    "python/sglang/_version.py": VERSION_PY,
    "python/sglang/srt/__init__.py": "",
    "python/sglang/srt/alpha.py": "def alpha():\n    return 1\n",
    "python/sglang/srt/beta.py": "def beta():\n    return 2\n",
    "python/sglang/srt/untouched.py": "GAMMA = 3\n",
}
_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}


def git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=tree, check=True, capture_output=True,
                          text=True, env=dict(os.environ, **_ENV)).stdout


def write_files(tree: Path, files: Dict[str, Optional[str]]) -> None:
    for rel, text in files.items():
        path = tree / rel
        if text is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)


def make_tree(tree: Path) -> Path:
    tree.mkdir(parents=True)
    git(tree, "init", "-q", "-b", "main")
    write_files(tree, BASE_FILES)
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "-m", "base")
    git(tree, "tag", BASE_TAG)
    return tree


def commit(tree: Path, subject: str, files: Dict[str, Optional[str]]) -> None:
    write_files(tree, files)
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "-m", subject)


def two_patch_series(tmp_path: Path, with_test_file: bool = False) -> Path:
    """The tree, then patches/ exported from it: 0001 edits alpha and beta,
    0002 edits beta again and adds a module (and, if asked, a test file)."""
    tree = make_tree(tmp_path / "tree")
    commit(tree, "X: first change", {
        "python/sglang/srt/alpha.py": "def alpha():\n    return 10\n",
        "python/sglang/srt/beta.py": "def beta():\n    return 20\n",
    })
    second = {
        "python/sglang/srt/beta.py": "def beta():\n    return 200\n",
        "python/sglang/srt/delta.py": "DELTA = 4\n",
    }
    if with_test_file:
        second["test/registered/unit/srt/test_beta.py"] = (
            "from sglang.srt.beta import beta\n\n\ndef test_beta():\n"
            "    assert beta() == 200\n")
    commit(tree, "Y: second change", second)
    patches = tmp_path / "patches"
    export_series(tree, patches, progress=lambda msg: None)
    return patches


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def install_base(site: Path) -> Path:
    """The base's package as pip lays it out; returns the package directory."""
    rows = []
    for rel, text in BASE_FILES.items():
        if not rel.startswith("python/sglang/"):
            continue
        path = site / rel[len("python/"):]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        data = text.encode()
        rows.append(f"{rel[len('python/'):]},{_record_hash(data)},{len(data)}\r\n")
    dist_info = site / "sglang-0.5.12.post1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Name: sglang\nVersion: 0.5.12.post1\n")
    rows.append("sglang-0.5.12.post1.dist-info/RECORD,,\r\n")
    (dist_info / "RECORD").write_text("".join(rows), newline="")
    return site / "sglang"
