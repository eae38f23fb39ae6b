"""benchmark/kit/fatbin.py on a small ELF with a hand-made .nv_fatbin
section: cubins of other architectures are zeroed, every header is kept."""

import os
import shutil
import struct
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "benchmark", "kit"))

import fatbin  # noqa: E402

ENTRY_HEADER = 64  # bytes; the arch sits at offset 28


def entry(arch, payload):
    head = struct.pack("<HHIQ", 2, 0, ENTRY_HEADER, len(payload)) + bytes(12)
    head += struct.pack("<I", arch)
    return head + bytes(ENTRY_HEADER - len(head)) + payload


def fatbin_blob(*entries):
    body = b"".join(entries)
    return struct.pack("<IHHQ", fatbin.FATBIN_MAGIC, 1, 16, len(body)) + body


@pytest.fixture
def library(tmp_path):
    if not all(shutil.which(t) for t in ("gcc", "objcopy", "readelf")):
        pytest.skip("needs gcc, objcopy and readelf")
    (tmp_path / "x.c").write_text("int x(void) { return 1; }\n")
    subprocess.run(["gcc", "-c", "-o", tmp_path / "x.o", tmp_path / "x.c"], check=True)
    section = fatbin_blob(entry(90, b"\x11" * 40), entry(100, b"\x22" * 24)) \
        + bytes(8) + fatbin_blob(entry(80, b"\x33" * 16), entry(90, b"\x44" * 8))
    (tmp_path / "fatbin").write_bytes(section)
    subprocess.run(["objcopy", "--add-section", f".nv_fatbin={tmp_path / 'fatbin'}",
                    tmp_path / "x.o", tmp_path / "lib.so"], check=True)
    return (tmp_path / "lib.so").read_bytes(), section


def test_entries_are_found_in_both_fatbins(library):
    blob, _ = library
    found = [(size, arch) for _, size, arch in fatbin.entries(blob, *fatbin.section(blob))]
    assert found == [(40, 90), (24, 100), (16, 80), (8, 90)]


def test_foreign_cubins_are_zeroed_and_headers_kept(library, capsys):
    blob, section = library
    out = fatbin.zero_foreign_cubins(blob, keep_arch=90)
    off, size = fatbin.section(out)
    assert len(out) == len(blob) and size == len(section)
    new = out[off:off + size]
    assert b"\x11" * 40 in new and b"\x44" * 8 in new
    assert b"\x22" not in new and b"\x33" not in new
    # only payload bytes changed
    changed = [i for i in range(size) if new[i] != section[i]]
    assert len(changed) == 24 + 16
    assert "zeroed 0.0 MB" in capsys.readouterr().out
