"""Running the series with `git apply` in a scratch copy of the touched files.

Nothing in the target package changes here: the files the series touches are
copied into a temporary directory laid out like the package, each patch is
applied (or reversed) there, and the resulting bytes are returned for the
caller to install in one transaction.

The scratch directory is laid out as upstream's tree (`python/sglang/...`),
and `git apply --include` takes only the files under `python/sglang/`: a
patch may also carry upstream's tests, which an installed package has no
place for.
"""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Dict, List, Optional

from sglpatch.errors import SglpatchError
from sglpatch.series import UPSTREAM_PREFIX, Patch



def _git_apply(patch: Patch, workdir: Path, reverse: bool) -> None:
    if shutil.which("git") is None:
        raise SglpatchError("git is needed to apply patches, and none is on PATH")
    cmd = ["git", "apply", "-p1", f"--include={UPSTREAM_PREFIX}*", "--whitespace=nowarn"]
    if reverse:
        cmd.append("--reverse")
    cmd.append(str(patch.path))
    env = dict(os.environ)
    # Never let git discover an enclosing repository: paths would then be
    # taken relative to that repository's top, not to our scratch directory.
    env["GIT_CEILING_DIRECTORIES"] = str(workdir.parent)
    env["LC_ALL"] = "C"  # messages we can quote, whatever the user's locale
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    result = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        detail = " ".join(result.stderr.split())[:500]
        action = "reverse" if reverse else "apply"
        raise SglpatchError(f"{patch.name} does not {action} cleanly: {detail}")


def run_in_scratch(
    root: Path,
    files: List[str],
    patches: List[Patch],
    reverse: bool = False,
    progress: Callable[[str], None] = lambda msg: None,
) -> Dict[str, Optional[bytes]]:
    """Apply `patches` in order (or reverse them) to copies of `files`."""
    with tempfile.TemporaryDirectory(prefix="sglpatch-") as tmp:
        workdir = Path(tmp) / "tree"
        package = workdir / UPSTREAM_PREFIX
        package.mkdir(parents=True)
        for rel in files:
            source = root / rel
            if source.is_file():
                dest = package / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, dest)
        for patch in patches:
            verb = "reversing" if reverse else "applying"
            progress(f"{verb} {patch.name} ({len(patch.files)} files)")
            _git_apply(patch, workdir, reverse)
        return {
            rel: (package / rel).read_bytes() if (package / rel).is_file() else None
            for rel in files
        }
