"""Files sglpatch creates take the package's modes, not the umask's; and root
patching a package another user owns leaves it that user's.

Under umask 077 (root's hardening default) a state file made 0600 cannot be
read by other users' `sglpatch status`, nor by the patched server's start-up
line; a package whose files root now owns cannot be reverted by its owner.
"""

import os
import stat
import subprocess
import sys

import pytest
from conftest import REPO

from sglpatch import engine


def _modes(root):
    return {str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode)
            for p in [root, *root.rglob("*")]}


def test_under_umask_077_new_files_take_the_packages_modes(installed):
    file_mode = stat.S_IMODE((installed / "__init__.py").stat().st_mode)
    dir_mode = stat.S_IMODE(installed.stat().st_mode)
    result = subprocess.run(
        [sys.executable, "-m", "sglpatch", "apply", "--sglang-dir", str(installed)],
        cwd=REPO, capture_output=True, text=True, preexec_fn=lambda: os.umask(0o077))
    assert result.returncode == 0, result.stderr
    modes = _modes(installed)
    store = installed / ".sglpatch-pristine"
    assert modes[".sglpatch-state.json"] == file_mode
    assert modes[".sglpatch-pristine"] == dir_mode
    assert {modes[str(p.relative_to(installed))] for p in store.iterdir()} == {file_mode}
    record = next(installed.parent.glob("*.dist-info")) / "RECORD"
    assert stat.S_IMODE(record.stat().st_mode) == file_mode


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can patch another user's files")
def test_root_patching_a_users_package_leaves_every_file_the_users(installed):
    site = installed.parent
    user, group = 4242, 4343
    for path in [site, *site.rglob("*")]:
        os.lchown(path, user, group)

    def owners():
        return {(p.lstat().st_uid, p.lstat().st_gid) for p in [site, *site.rglob("*")]}

    engine.apply(str(installed))
    assert (installed / ".sglpatch-state.json").exists()
    assert owners() == {(user, group)}
    engine.revert(str(installed))
    assert owners() == {(user, group)}
