"""apply --through NNNN: a prefix of the series, continued or reverted later."""

import json

from conftest import sglpatch_cli, snapshot

from sglpatch.series import load_series


def _status(root):
    result = sglpatch_cli("status", "--json", "--sglang-dir", str(root))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_through_then_continue_then_revert(installed):
    site = installed.parent
    names = [p.name for p in load_series().patches]
    before = snapshot(site)

    first = sglpatch_cli("apply", "--through", "0003", "--sglang-dir", str(installed))
    assert first.returncode == 0, first.stderr
    assert "applied patches 0001, 0002, 0003 " in first.stdout
    report = _status(installed)
    assert report["applied_through"] == names[2]
    assert [p["status"] for p in report["patches"]] == (
        ["applied"] * 3 + ["not applied"] * (len(names) - 3))
    text = sglpatch_cli("status", "--sglang-dir", str(installed)).stdout
    assert f"applied through 0003 of {len(names)} patches" in text

    again = sglpatch_cli("apply", "--through", "3", "--sglang-dir", str(installed))
    assert again.returncode == 0 and "already applied" in again.stdout
    fewer = sglpatch_cli("apply", "--through", "0001", "--sglang-dir", str(installed))
    assert fewer.returncode == 2 and "sglpatch revert" in fewer.stderr

    rest = sglpatch_cli("apply", "--sglang-dir", str(installed))
    assert rest.returncode == 0, rest.stderr
    later = ", ".join(name[:4] for name in names[3:])
    assert f"applied patches {later} to " in rest.stdout
    assert _status(installed)["applied_through"] == names[-1]

    sglpatch_cli("revert", "--sglang-dir", str(installed))
    sglpatch_cli("apply", "--through", "0005", "--sglang-dir", str(installed))
    reverted = sglpatch_cli("revert", "--sglang-dir", str(installed))
    assert reverted.returncode == 0, reverted.stderr
    assert "reverted 5 patches" in reverted.stdout
    assert snapshot(site) == before


def test_through_an_unknown_patch_is_refused(installed):
    before = snapshot(installed.parent)
    result = sglpatch_cli("apply", "--through", "0042", "--sglang-dir", str(installed))
    assert result.returncode == 2
    assert "0042" in result.stderr and "0001" in result.stderr
    assert snapshot(installed.parent) == before
