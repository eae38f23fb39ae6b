"""A damaged or crafted state file cannot make sglpatch read or write outside
the package (the journal's index: test_journals.py)."""

import hashlib
import json

import pytest
from conftest import sglpatch_cli, snapshot

from sglpatch import engine

EVIL = b"print('written outside the package')\n"


@pytest.mark.parametrize("how", ["path", "hash"])
def test_a_state_file_naming_a_path_outside_the_package_is_not_followed(installed, how):
    site = installed.parent
    before = snapshot(site)
    engine.apply(str(installed))
    digest = hashlib.sha256(EVIL).hexdigest()
    (installed / ".sglpatch-pristine" / digest).write_bytes(EVIL)
    (site / "secret").write_bytes(EVIL)
    state_path = installed / ".sglpatch-state.json"
    state = json.loads(state_path.read_text())
    if how == "path":  # revert would write the "pristine" bytes there
        state["files"]["../evil.py"] = {"before": digest, "after": None}
    else:  # revert would read its "kept copy" from there
        rel = next(iter(state["files"]))
        state["files"][rel]["before"] = "../../secret"
    state_path.write_text(json.dumps(state))

    report = engine.status_report(str(installed))
    assert report["state"]["problem"]
    result = sglpatch_cli("revert", "--sglang-dir", str(installed))
    assert result.returncode == 0, result.stderr  # by the series instead
    assert not (site / "evil.py").exists()
    after = snapshot(site)
    assert after.pop("secret") == EVIL
    assert after == before
