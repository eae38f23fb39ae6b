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


def cubin(tmp_path, name, *symbols):
    """An ELF object whose functions carry `symbols` (a stand-in for a cubin)."""
    src = "".join(f'void f{i}(void) __asm__("{s}");\nvoid f{i}(void) {{}}\n'
                  for i, s in enumerate(symbols))
    (tmp_path / f"{name}.c").write_text(src)
    subprocess.run(["gcc", "-c", "-o", tmp_path / f"{name}.o", tmp_path / f"{name}.c"], check=True)
    return (tmp_path / f"{name}.o").read_bytes()


def test_fa3_addon_keeps_one_head_dim_and_judges_compressed_cubins(tmp_path):
    """slim_sgl_kernel's FA3 rule: the sm90 forward kernels of head dim 128
    stay; other head dims, other archs and (with fp8 off) fp8 inputs are
    zeroed; a zstd-compressed cubin is judged by what it holds."""
    if not all(shutil.which(t) for t in ("gcc", "objcopy", "readelf", "zstd")):
        pytest.skip("needs gcc, objcopy, readelf and zstd")
    import slim_sgl_kernel

    fwd = "_ZN5flash16FlashAttnFwdSm90I{}EEELi{}E{}v"
    bf16 = cubin(tmp_path, "bf16", fwd.format("bfloat16_t", 128, 1), fwd.format("bfloat16_t", 128, 2))
    fp8 = cubin(tmp_path, "fp8", fwd.format("float_e4m3_t", 128, 1))
    d64 = cubin(tmp_path, "d64", fwd.format("bfloat16_t", 64, 1))
    mixed = cubin(tmp_path, "mixed", *(fwd.format("bfloat16_t", d, 1) for d in (128, 256, 512)))
    combine = cubin(tmp_path, "combine", "_ZN5flash19FlashAttnFwdCombineILi8EEEv")
    packed = subprocess.run(["zstd", "-q", "-c"], input=mixed, capture_output=True,
                            check=True).stdout + bytes(5)  # padding after the frame
    packed_bf16 = subprocess.run(["zstd", "-q", "-c"], input=bf16, capture_output=True,
                                 check=True).stdout
    kept = [(90, bf16), (90, combine), (90, packed_bf16)]
    gone = [(90, fp8), (90, d64), (90, packed), (100, bf16)]
    section = fatbin_blob(*(entry(a, p) for a, p in kept + gone))
    (tmp_path / "x.c").write_text("int x(void) { return 1; }\n")
    subprocess.run(["gcc", "-c", "-o", tmp_path / "x.o", tmp_path / "x.c"], check=True)
    (tmp_path / "fatbin").write_bytes(section)
    subprocess.run(["objcopy", "--add-section", f".nv_fatbin={tmp_path / 'fatbin'}",
                    tmp_path / "x.o", tmp_path / "lib.so"], check=True)
    blob = (tmp_path / "lib.so").read_bytes()
    out = slim_sgl_kernel.slim_fa3(blob, 128, fp8=False)
    payloads = [out[o:o + n] for o, n, _ in fatbin.entries(out, *fatbin.section(out))]
    assert payloads[:3] == [p for _, p in kept]
    assert all(p == bytes(len(p)) for p in payloads[3:])
    # with fp8 on (the default), the fp8 kernels of that head dim stay too
    out = slim_sgl_kernel.slim_fa3(blob, 128)
    payloads = [out[o:o + n] for o, n, _ in fatbin.entries(out, *fatbin.section(out))]
    assert payloads[3] == fp8 and payloads[4] == bytes(len(d64))


def test_build_kit_drops_and_strips_what_a_list_line_names(tmp_path):
    """build-kit.sh: several drop=PATTERN and strip=PATTERN on one line of the
    list, from a wheel already in the download cache."""
    if not all(shutil.which(t) for t in ("gcc", "strip", "readelf")):
        pytest.skip("needs gcc, strip and readelf")
    import zipfile

    (tmp_path / "lib.c").write_text("int lib(int x) { return x + 1; }\n")
    subprocess.run(["gcc", "-g", "-shared", "-fPIC", "-o", tmp_path / "lib.so",
                    tmp_path / "lib.c"], check=True)
    cache = tmp_path / "cache"
    cache.mkdir()
    with zipfile.ZipFile(cache / "foo-1.0-py3-none-any.whl", "w") as z:
        for name in ("foo/__init__.py", "foo/a/x.txt", "foo/b/y.txt", "foo/b/keep.py",
                     "foo-1.0.dist-info/WHEEL", "foo-1.0.dist-info/RECORD"):
            z.writestr(name, "x\n")
        z.write(tmp_path / "lib.so", "foo/lib.so")
    with zipfile.ZipFile(cache / "bar-2.0-py3-none-any.whl", "w") as z:
        z.writestr("bar/__init__.py", "")
    (tmp_path / "list.txt").write_text(
        "# a comment\nbar==2.0\nfoo==1.0 drop=foo/a/ drop=foo/b/*.txt strip=foo/*.so\n")
    res = subprocess.run(["bash", "benchmark/kit/build-kit.sh", tmp_path / "list.txt",
                          tmp_path / "out"], cwd=REPO, capture_output=True, text=True,
                         env=dict(os.environ, KIT_CACHE=str(cache)))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "kit: 2 wheels" in res.stdout
    z = zipfile.ZipFile(tmp_path / "out" / "foo-1.0-py3-none-any.whl")
    names = set(z.namelist())
    assert {"foo/__init__.py", "foo/b/keep.py", "foo/lib.so"} <= names
    assert not {"foo/a/x.txt", "foo/b/y.txt"} & names
    (tmp_path / "stripped.so").write_bytes(z.read("foo/lib.so"))
    assert (tmp_path / "stripped.so").stat().st_size < (tmp_path / "lib.so").stat().st_size
    sections = subprocess.run(["readelf", "-S", tmp_path / "stripped.so"], capture_output=True,
                              text=True).stdout
    assert ".debug_info" not in sections and ".dynsym" in sections
    record = z.read("foo-1.0.dist-info/RECORD").decode()
    assert "foo/lib.so,sha256=" in record and "foo/a/x.txt" not in record
    # a line without extras travels as it came
    assert (tmp_path / "out" / "bar-2.0-py3-none-any.whl").read_bytes() == \
        (cache / "bar-2.0-py3-none-any.whl").read_bytes()
