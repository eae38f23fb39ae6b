"""Maintainer commands: a git work tree of the series, and exporting it back.

The loop (docs/maintaining.md): `sglpatch worktree DIR` lays pristine sglang
0.5.12.post1 out in upstream's layout (`python/sglang/...`) as a git
repository tagged `v0.5.12.post1` and applies the series as one commit per
patch; edit and commit there (`git commit --amend`, `git rebase -i`); then
`sglpatch export DIR` writes `patches/`, `series` and `manifest.json` back.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable, List, Optional

from sglpatch import SGLANG_BASE_VERSION
from sglpatch.errors import SglpatchError
from sglpatch.series import (
    MANIFEST_FILE,
    PATCHES_DIR,
    SERIES_FILE,
    UPSTREAM_PREFIX,
    read_series_names,
    sha256_bytes,
)

BASE_TAG = f"v{SGLANG_BASE_VERSION}"
# Where the series lives in the sglpatch repository.
REPO_PATCHES_DIR = Path("python") / "sglpatch" / "patches"
# The wheel the base commit is made from. Its Python files are identical in
# every cpXY wheel of the release; only the compiled grpc module differs, and
# the work tree leaves compiled files out (upstream's repository has none).
WHEEL_PLATFORM = ("3.11", "manylinux_2_34_x86_64")
WHEEL_SHA256 = "94b3f3cc6b97f1364f247b8d9c1d106ec63cf22c55d6b65bc40ff29b0206ef5f"
_IDENTITY = {
    "GIT_AUTHOR_NAME": "sglpatch maintainers",
    "GIT_AUTHOR_EMAIL": "sglpatch@users.noreply.github.com",
    "GIT_COMMITTER_NAME": "sglpatch maintainers",
    "GIT_COMMITTER_EMAIL": "sglpatch@users.noreply.github.com",
}
# Settings that would change what format-patch writes, pinned.
_GIT_CONFIG = [
    "-c", "core.abbrev=12",
    "-c", "diff.noprefix=false",
    "-c", "diff.mnemonicPrefix=false",
    "-c", "diff.renames=false",
    "-c", "format.signature=",
    "-c", "core.autocrlf=false",
]


def _git(repo: Path, *args: str, env_extra=None, capture=True) -> str:
    env = dict(os.environ, **_IDENTITY)
    env.update(env_extra or {})
    result = subprocess.run(
        ["git", *_GIT_CONFIG, *args],
        cwd=repo,
        env=env,
        capture_output=capture,
        text=True,
    )
    if result.returncode != 0:
        raise SglpatchError(
            f"git {' '.join(args[:2])} failed in {repo}: "
            + " ".join((result.stderr or "").split())[:500]
        )
    return result.stdout if capture else ""


def _git_bytes(repo: Path, *args: str) -> Optional[bytes]:
    result = subprocess.run(["git", *args], cwd=repo, capture_output=True)
    return result.stdout if result.returncode == 0 else None


def download_base_wheel(dest: Path) -> Path:
    python_version, platform = WHEEL_PLATFORM
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--python-version", python_version, "--platform", platform,
        "--implementation", "cp", "-d", str(dest),
        f"sglang=={SGLANG_BASE_VERSION}",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob("sglang-*.whl"))
    if result.returncode != 0 or not wheels:
        raise SglpatchError(
            "could not download the sglang wheel: "
            + " ".join(result.stderr.split())[-400:]
        )
    return wheels[0]


def _extract_package(wheel: Path, python_dir: Path) -> int:
    count = 0
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            name = info.filename
            if not name.startswith("sglang/") or name.endswith("/"):
                continue
            if name.endswith((".so", ".pyd")):
                continue
            target = python_dir / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(info))
            count += 1
    return count


def make_worktree(
    dest: Path,
    wheel: Optional[Path] = None,
    patches_dir: Path = PATCHES_DIR,
    with_series: bool = True,
    progress: Callable[[str], None] = print,
) -> None:
    if shutil.which("git") is None:
        raise SglpatchError("git is needed, and none is on PATH")
    if dest.exists() and not dest.is_dir():
        raise SglpatchError(f"{dest} exists and is not a directory")
    if dest.exists() and any(dest.iterdir()):
        raise SglpatchError(f"{dest} exists and is not empty")
    if wheel is not None and not wheel.is_file():
        raise SglpatchError(f"no wheel at {wheel}")
    with tempfile.TemporaryDirectory(prefix="sglpatch-wheel-") as tmp:
        if wheel is None:
            progress(f"downloading sglang {SGLANG_BASE_VERSION} from PyPI")
            wheel = download_base_wheel(Path(tmp))
        digest = sha256_bytes(wheel.read_bytes())
        if digest != WHEEL_SHA256:
            progress(f"warning: {wheel.name} has sha256 {digest}, expected "
                     f"{WHEEL_SHA256} (not the reference wheel)")
        dest.mkdir(parents=True, exist_ok=True)
        count = _extract_package(wheel, dest / "python")
    progress(f"laid out {count} files of sglang {SGLANG_BASE_VERSION} in {dest}/python")
    _git(dest, "init", "-q", "-b", "main")
    _git(dest, "add", "-A")
    date = {"GIT_AUTHOR_DATE": "2026-05-23T00:00:00Z",
            "GIT_COMMITTER_DATE": "2026-05-23T00:00:00Z"}
    _git(dest, "commit", "-q", "-m",
         f"sglang {SGLANG_BASE_VERSION} (pristine, from the PyPI wheel)",
         env_extra=date)
    _git(dest, "tag", BASE_TAG)
    _git(dest, "config", "user.name", _IDENTITY["GIT_AUTHOR_NAME"])
    _git(dest, "config", "user.email", _IDENTITY["GIT_AUTHOR_EMAIL"])
    if not with_series:
        return
    for name in read_series_names(patches_dir):
        progress(f"git am {name}")
        _git(dest, "am", "-q", "--committer-date-is-author-date",
             str(patches_dir / name))
    progress(f"{dest}: {BASE_TAG} plus the series, one commit per patch")


def _touched_paths(repo: Path, commit: str) -> List[str]:
    out = _git(repo, "diff-tree", "--no-commit-id", "--name-only", "-r",
               "--no-renames", f"{commit}^", commit)
    return [line for line in out.splitlines() if line]


def default_patches_dir(cwd: Path) -> Path:
    """The series of the sglpatch repository `cwd` is in: what a maintainer
    edits and commits (not the copy an installed sglpatch runs from)."""
    result = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=cwd,
                            capture_output=True, text=True)
    top = Path(result.stdout.strip()) if result.returncode == 0 else None
    if top is None or not (top / REPO_PATCHES_DIR / SERIES_FILE).is_file():
        raise SglpatchError(
            f"{cwd} is not inside the sglpatch repository; run export there, "
            f"or say where to write with --patches-dir"
        )
    return top / REPO_PATCHES_DIR


def _require_exportable(repo: Path, commits: List[str]) -> None:
    """Refuse, before writing anything, a tree whose commits are not the series."""
    for state in ("rebase-merge", "rebase-apply", "CHERRY_PICK_HEAD", "MERGE_HEAD"):
        path = Path(_git(repo, "rev-parse", "--git-path", state).strip())
        if not path.is_absolute():
            path = repo / path
        if path.exists():
            raise SglpatchError(
                f"{repo} has a rebase, am, cherry-pick or merge in progress "
                f"({path.name}); finish or abort it, then export"
            )
    dirty = _git(repo, "status", "--porcelain", "--untracked-files=no").strip()
    if dirty:
        first = dirty.splitlines()[0].strip()
        raise SglpatchError(
            f"{repo} has uncommitted or staged changes ({first} ...); commit or "
            f"stash them, then export"
        )
    if not commits:
        raise SglpatchError(f"no commits after {BASE_TAG} in {repo}")
    for commit in commits:
        if not _touched_paths(repo, commit):
            subject = _git(repo, "log", "-1", "--format=%s", commit).strip()
            raise SglpatchError(
                f"commit {commit[:12]} ({subject}) changes nothing; drop it "
                f"(git rebase -i {BASE_TAG}), then export"
            )


def _manifest_entry(repo: Path, commit: str, name: str, data: bytes) -> dict:
    """The patch's hashes; files outside python/sglang/ only listed by name."""
    changes, not_installed = [], []
    for path in _touched_paths(repo, commit):
        if not path.startswith(UPSTREAM_PREFIX):
            not_installed.append(path)
            continue
        changes.append({
            "path": path[len(UPSTREAM_PREFIX):],
            "before": sha256_bytes(_git_bytes(repo, "show", f"{commit}^:{path}")),
            "after": sha256_bytes(_git_bytes(repo, "show", f"{commit}:{path}")),
        })
    subject = _git(repo, "log", "-1", "--format=%s", commit).strip()
    entry = {"name": name, "sha256": sha256_bytes(data), "subject": subject,
             "files": changes}
    if not_installed:  # absent when empty: manifests without it stay as they were
        entry["not_installed"] = not_installed
    return entry


def export_series(
    repo: Path,
    patches_dir: Path = PATCHES_DIR,
    progress: Callable[[str], None] = print,
) -> List[str]:
    if not (repo / ".git").exists():
        raise SglpatchError(f"{repo} is not a git work tree (see `sglpatch worktree`)")
    commits = _git(repo, "rev-list", "--reverse", f"{BASE_TAG}..HEAD").split()
    _require_exportable(repo, commits)
    manifest = {"base_version": SGLANG_BASE_VERSION, "patches": []}
    with tempfile.TemporaryDirectory(prefix="sglpatch-export-") as tmp:
        _git(repo, "format-patch", "-q", "--no-numbered", "--zero-commit", "--no-signature",
             "--no-renames", "-o", tmp, f"{BASE_TAG}..HEAD")
        names = sorted(p.name for p in Path(tmp).glob("*.patch"))
        if len(names) != len(commits):
            raise SglpatchError("format-patch wrote an unexpected number of patches")
        for name, commit in zip(names, commits):
            data = (Path(tmp) / name).read_bytes()
            manifest["patches"].append(_manifest_entry(repo, commit, name, data))
        # Everything is known; only now is the old series replaced.
        patches_dir.mkdir(parents=True, exist_ok=True)
        for old in patches_dir.glob("*.patch"):
            old.unlink()
        for name in names:
            shutil.copyfile(Path(tmp) / name, patches_dir / name)
            progress(f"exported {name}")
    (patches_dir / SERIES_FILE).write_text(
        "# Applied in this order by `sglpatch apply`; written by `sglpatch export`.\n"
        + "".join(f"{n}\n" for n in names),
        encoding="utf-8",
    )
    (patches_dir / MANIFEST_FILE).write_text(
        json.dumps(manifest, indent=2) + "\n", encoding="utf-8"
    )
    progress(f"wrote {len(names)} patches, {SERIES_FILE} and {MANIFEST_FILE} "
             f"to {patches_dir}")
    return names
