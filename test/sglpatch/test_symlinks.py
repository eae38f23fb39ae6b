"""Per-file symbolic links inside the package (an installer that links files
from a shared store) are links again after revert, and after a rolled-back
apply; and the files they point at are never written through."""

import os
import shutil

import pytest
from conftest import snapshot

from sglpatch import engine, txn
from sglpatch.series import load_series

BYSTANDER = "srt/managers/io_struct.py"


@pytest.fixture
def linked(installed, tmp_path):
    """Some touched files and a bystander as links into a store outside."""
    store = tmp_path / "store"
    touched = load_series().touched_files()
    links = {}
    for i, rel in enumerate([*touched[:3], BYSTANDER]):
        path = installed / rel
        kept = store / rel
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(path, kept)
        # one relative link, the others absolute
        target = os.path.relpath(kept, path.parent) if i == 1 else str(kept)
        os.symlink(target, path)
        links[rel] = target
    return installed, store, links


def _links(root, links):
    return {rel: os.readlink(root / rel) for rel in links if (root / rel).is_symlink()}


def test_links_come_back_after_revert_and_their_files_are_never_written(linked):
    installed, store, links = linked
    site_before, store_before = snapshot(installed.parent), snapshot(store)
    engine.apply(str(installed))
    assert snapshot(store) == store_before
    assert _links(installed, links) == {BYSTANDER: links[BYSTANDER]}
    engine.revert(str(installed))
    assert _links(installed, links) == links
    assert snapshot(installed.parent) == site_before
    assert snapshot(store) == store_before


def test_links_stay_links_when_an_apply_is_rolled_back(linked, monkeypatch):
    installed, store, links = linked
    site_before, store_before = snapshot(installed.parent), snapshot(store)
    written = []

    def interrupt_half_way(op, path):
        if op == "rename" and ".sglpatch" not in str(path):
            written.append(path)
            if len(written) == 5:
                raise KeyboardInterrupt

    monkeypatch.setattr(txn, "fault_hook", interrupt_half_way)
    with pytest.raises(KeyboardInterrupt):
        engine.apply(str(installed))
    assert _links(installed, links) == links
    assert snapshot(installed.parent) == site_before
    assert snapshot(store) == store_before
