#!/usr/bin/env python3
"""Repack sglang_kernel wheel keeping only what an sm90 (H100) GPU needs.

Usage: slim_sgl_kernel.py SRC.whl OUTDIR [--zero-foreign-cubins] [--fa3-hdim N [--fa3-no-fp8]]
Keeps: sgl_kernel/*.py (+ subpackages quantization/, testing/), sgl_kernel/sm90/common_ops.abi3.so,
       sgl_kernel/spatial_ops.abi3.so (84 KB, lazily imported), triton_kernels/ (pure python),
       dist-info (METADATA, WHEEL, licenses) + regenerated RECORD.
Drops: sgl_kernel/flash_ops.abi3.so (FA3, ~1 GB), sgl_kernel/sm100/ (Blackwell),
       sgl_kernel/flashmla_ops.abi3.so (MLA only, import is try/except guarded),
       _mscclpp.cpython-310*.so (cp310 ABI, not importable on 3.12), lib/ lib64/ include/ (mscclpp, dev files).
--zero-foreign-cubins: zero the payload of non-sm90 cubins inside .nv_fatbin of common_ops
       (keeps every header/offset intact; zeros compress to ~nothing). Optional, off by default.
--fa3-hdim N: also keep sgl_kernel/flash_ops.abi3.so (FA3, sglang's default attention backend
       on Hopper), with every cubin zeroed except the sm90 ones whose kernels serve head dim N
       (forward kernels whose tile shapes name only N, plus the prepare/combine kernels). For
       N=128 the wheel is ~56 MB instead of ~6 MB: too big to travel with the rest of the kit,
       so build it into its own folder (build-kit.sh fa3) and send it in a second call
       onto the same machine. CUDA loads modules lazily (torch's default), so a zeroed
       cubin fails only if one of its kernels is launched: a run that needs another variant
       dies with "invalid device function" / "no kernel image" — widen the rule then.
       A cubin stored zstd-compressed in the fatbin (sglang-kernel 0.4.5 stores its largest
       ones so) is judged by its decompressed ELF (the `zstd` command) and zeroed as a whole.
--fa3-no-fp8: also zero the forward kernels for fp8 (e4m3/e5m2) inputs, which only an fp8
       KV cache runs (sglang-kernel 0.4.5's add-on does not fit one call with them).
"""
import base64, hashlib, os, re, struct, subprocess, sys, zipfile

import fatbin  # beside this script

FA3 = "sgl_kernel/flash_ops.abi3.so"

def keep(name, fa3=False):
    if name.startswith("sgl_kernel/"):
        if name.startswith("sgl_kernel/sm100/"):
            return False
        if name.endswith(".so"):
            return name in ("sgl_kernel/sm90/common_ops.abi3.so", "sgl_kernel/spatial_ops.abi3.so") or (fa3 and name == FA3)
        return True
    if name.startswith("triton_kernels/"):
        return True
    if ".dist-info/" in name:
        return not name.endswith("/RECORD")
    return False

def _cubin_functions(elf):
    """Names of the FUNC symbols of one (uncompressed) cubin ELF."""
    if elf[:4] != b"\x7fELF":
        return None
    shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names = []
    for (_n, typ, _f, _a, off, size, link, _i, _al, _es) in secs:
        if typ != 2:  # SYMTAB
            continue
        stro = secs[link][4]
        for j in range(size // 24):
            st_name, st_info = struct.unpack_from("<IB", elf, off + j * 24)
            if st_info & 0xF == 2:
                end = elf.index(b"\0", stro + st_name)
                names.append(elf[stro + st_name:end].decode("ascii", "replace"))
    return names

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

def _unzstd(payload):
    """The ELF inside a zstd-compressed fatbin entry, or None. The entry's payload may
    end in padding after the frame: zstd then exits non-zero but has written the frame."""
    try:
        out = subprocess.run(["zstd", "-d", "-c", "-q"], input=payload, capture_output=True).stdout
    except OSError:
        return None
    return out if out[:4] == b"\x7fELF" else None

def slim_fa3(blob, hdim, keep_arch=90, fp8=True):
    """Zero every FA3 cubin except the sm90 ones that serve head dim `hdim`
    (and, with fp8 False, not those for fp8 inputs)."""
    def keep(arch, payload):
        if arch != keep_arch:
            return False
        if payload[:4] == ZSTD_MAGIC:
            payload = _unzstd(payload)
            if payload is None:
                return True  # cannot look inside: leave it alone
        names = _cubin_functions(payload)
        if names is None:
            return True  # not a plain ELF (compressed/PTX): leave it alone
        j = " ".join(names)
        dims = {int(x) for x in re.findall(r"EEELi(\d+)E", j)}
        if "FlashAttnFwdSm90" in j:
            return dims == {hdim} and (fp8 or not re.search(r"float_e[45]m[23]_t", j))
        return not dims or dims == {hdim} or "Combine" in j  # prepare / combine / helpers

    out, kept, zeroed = fatbin.zero_entries(blob, keep)
    print(f"  flash_ops: kept {kept/1e6:.1f} MB (sm{keep_arch}, head dim {hdim}{'' if fp8 else ', no fp8'}), "
          f"zeroed {zeroed/1e6:.1f} MB")
    return out

def main():
    src, outdir = sys.argv[1], sys.argv[2]
    zero = "--zero-foreign-cubins" in sys.argv
    fa3 = int(sys.argv[sys.argv.index("--fa3-hdim") + 1]) if "--fa3-hdim" in sys.argv else None
    zin = zipfile.ZipFile(src)
    dist = [n for n in zin.namelist() if n.endswith(".dist-info/WHEEL")][0].rsplit("/", 1)[0]
    os.makedirs(outdir, exist_ok=True)
    dst = os.path.join(outdir, os.path.basename(src))
    records = []
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
        for info in zin.infolist():
            n = info.filename
            if n.endswith("/") or not keep(n, fa3 is not None):
                continue
            data = zin.read(n)
            if zero and n == "sgl_kernel/sm90/common_ops.abi3.so":
                data = fatbin.zero_foreign_cubins(data)
            if n == FA3:
                data = slim_fa3(data, fa3, fp8="--fa3-no-fp8" not in sys.argv)
            zi = zipfile.ZipInfo(n, date_time=info.date_time)
            zi.external_attr = info.external_attr
            zi.compress_type = zipfile.ZIP_DEFLATED
            zout.writestr(zi, data, compresslevel=9)
            h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            records.append(f"{n},sha256={h},{len(data)}")
        records.append(f"{dist}/RECORD,,")
        zi = zipfile.ZipInfo(f"{dist}/RECORD", date_time=(2026, 1, 1, 0, 0, 0))
        zi.external_attr = 0o644 << 16
        zout.writestr(zi, "\n".join(records) + "\n", compress_type=zipfile.ZIP_DEFLATED)
    print(dst, os.path.getsize(dst))

if __name__ == "__main__":
    main()
