"""Which RECORD sglpatch keeps true: the one of the package's own version,
beside the package as it is reached (through a symbolic link too); and no
row is left for a file of sglpatch's that revert removed or found gone."""

import csv
import os
import shutil

import pytest
from conftest import snapshot

from sglpatch import engine
from sglpatch.errors import SglpatchError
from test_pip import _record_hash


def _rows(record):
    with open(record, newline="") as f:
        return {row[0]: row[1:] for row in csv.reader(f)}


def _true_for(record, site, package="sglang"):
    """Every file under the package is listed with its hash and size."""
    rows = _rows(record)
    root = site / package
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            rel = f"{package}/{path.relative_to(root)}"
            assert rows.get(rel) == [_record_hash(data), str(len(data))], rel


def _stale_dist_info(site, version, name=None):
    """Another sglang .dist-info that lists the package (a botched upgrade)."""
    ours = next(site.glob("sglang-0.5.12.post1.dist-info"))
    stale = site / (name or f"sglang-{version}.dist-info")
    shutil.copytree(ours, stale)
    metadata = (stale / "METADATA").read_text()
    (stale / "METADATA").write_text(metadata.replace("0.5.12.post1", version))
    return ours / "RECORD", stale / "RECORD"


def test_the_record_of_the_packages_own_version_is_kept_true(installed):
    site = installed.parent
    ours, stale = _stale_dist_info(site, "0.5.11")  # sorts first
    stale_bytes, ours_bytes = stale.read_bytes(), ours.read_bytes()
    engine.apply(str(installed))
    assert stale.read_bytes() == stale_bytes
    _true_for(ours, site)
    engine.revert(str(installed))
    assert ours.read_bytes() == ours_bytes and stale.read_bytes() == stale_bytes


def test_two_records_of_the_packages_version_are_refused(installed):
    site = installed.parent
    # A second one that says it is of the same version.
    _stale_dist_info(site, "0.5.12.post1", name="sglang-0.5.12.dist-info")
    before = snapshot(site)
    with pytest.raises(SglpatchError):
        engine.apply(str(installed))
    assert snapshot(site) == before


def test_a_package_reached_through_a_symbolic_link_keeps_its_record_true(installed,
                                                                         tmp_path):
    site = installed.parent
    real = tmp_path / "elsewhere" / "sglang"
    real.parent.mkdir()
    installed.rename(real)
    os.symlink(real, installed)
    record = site / "sglang-0.5.12.post1.dist-info" / "RECORD"
    original = record.read_bytes()
    engine.apply(str(installed))
    assert record.read_bytes() != original
    _true_for(record, site)
    engine.revert(str(installed))
    assert record.read_bytes() == original


def test_revert_without_every_kept_copy_leaves_no_row_of_sglpatchs_files(installed):
    site = installed.parent
    record = site / "sglang-0.5.12.post1.dist-info" / "RECORD"
    original = record.read_bytes()
    engine.apply(str(installed))
    store = installed / ".sglpatch-pristine"
    next(store.iterdir()).unlink()  # one kept copy lost
    engine.revert(str(installed))
    assert not [row for row in _rows(record) if ".sglpatch" in row]
    assert record.read_bytes() == original
