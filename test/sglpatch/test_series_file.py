"""The series file names exactly the manifest's patches, in its order; and
--through names one of them.

A series that names fewer patches (none at all, say) would make `check`
report a pristine package as fully applied: a CI gate on `check` would pass
with nothing applied.
"""

import codecs

import pytest
from conftest import sglpatch_cli, snapshot

from sglpatch import engine
from sglpatch.errors import SglpatchError
from sglpatch.series import read_series_names


@pytest.mark.parametrize("text", ["", "# nothing yet\n\n"])
def test_a_series_naming_no_patch_is_refused(pristine, patches_copy, text):
    series_file = patches_copy / "series"
    series_file.write_text(text)
    for command in (engine.check, engine.apply, engine.revert, engine.status_report):
        with pytest.raises(SglpatchError, match=str(series_file)):
            command(str(pristine), patches_dir=patches_copy)


def test_patches_out_of_order_blame_the_series_not_the_package(pristine, patches_copy):
    series_file = patches_copy / "series"
    names = read_series_names(patches_copy)
    names[0], names[1] = names[1], names[0]
    series_file.write_text("".join(f"{n}\n" for n in names))
    before = snapshot(pristine)
    for command in (engine.check, engine.apply):
        with pytest.raises(SglpatchError, match=str(series_file)):
            command(str(pristine), patches_dir=patches_copy)
    assert snapshot(pristine) == before


def test_a_series_file_with_a_byte_order_mark_reads_as_without(pristine, patches_copy):
    series_file = patches_copy / "series"
    series_file.write_bytes(codecs.BOM_UTF8 + series_file.read_bytes())
    assert read_series_names(patches_copy) == [
        p.name for p in engine.load_series(engine.PATCHES_DIR).patches]
    outcome = engine.apply(str(pristine), patches_dir=patches_copy)
    assert outcome.changed


@pytest.mark.parametrize("through", ["", " "])
def test_an_empty_through_is_refused(installed, through):
    before = snapshot(installed.parent)
    result = sglpatch_cli("apply", "--through", through, "--sglang-dir", str(installed))
    assert result.returncode == 2, result.stdout
    assert snapshot(installed.parent) == before
