"""The cubins inside a CUDA library's `.nv_fatbin` section, and zeroing the
ones a GPU never loads.

A fatbin section holds fatbins (magic 0xBA55ED50, then the header size and
the payload size); each payload is a run of entries (a header whose size it
states, the entry's payload size and, at offset 28, its sm architecture).
Zeroing an entry's payload keeps every header and offset intact, so the
library still loads; CUDA loads modules lazily, so a zeroed cubin fails only
if one of its kernels is launched, and zeros compress to almost nothing.
"""

import os
import struct
import subprocess
import tempfile

FATBIN_MAGIC = 0xBA55ED50


def section(blob):
    """(offset, size) of the `.nv_fatbin` section of an ELF library (readelf)."""
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(blob)
    try:
        out = subprocess.check_output(["readelf", "-S", "-W", f.name]).decode()
    finally:
        os.unlink(f.name)
    for line in out.splitlines():
        if ".nv_fatbin" in line:
            parts = line.split("]")[1].split()
            return int(parts[3], 16), int(parts[4], 16)
    raise SystemExit("no .nv_fatbin section")


def entries(buf, off, size):
    """(payload offset, payload size, sm arch) of every entry in the section."""
    pos, end_sec = off, off + size
    while pos < end_sec - 16:
        magic, _ver, hsz, fsz = struct.unpack_from("<IHHQ", buf, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # fatbins are 8-byte aligned: padding between them
            continue
        e, end = pos + hsz, pos + hsz + fsz
        while e < end:
            _kind, _v, ehs, psz = struct.unpack_from("<HHIQ", buf, e)
            arch = struct.unpack_from("<I", buf, e + 28)[0]
            yield e + ehs, psz, arch
            e += ehs + psz
        pos = end


def zero_entries(blob, keep):
    """`blob` with the payload of every entry for which keep(arch, payload)
    is false zeroed; returns (new blob, bytes kept, bytes zeroed)."""
    b = bytearray(blob)
    kept = zeroed = 0
    for start, psz, arch in entries(b, *section(blob)):
        if keep(arch, bytes(b[start:start + psz])):
            kept += psz
        else:
            b[start:start + psz] = bytes(psz)
            zeroed += psz
    return bytes(b), kept, zeroed


def zero_foreign_cubins(blob, keep_arch=90):
    """Zero every cubin that is not for sm `keep_arch`."""
    out, kept, zeroed = zero_entries(blob, lambda arch, _payload: arch == keep_arch)
    print(f"  fatbin: kept {kept / 1e6:.1f} MB of sm{keep_arch} cubins, zeroed {zeroed / 1e6:.1f} MB")
    return out
