"""A device script (benchmark/device_*.sh) on CPU: a stand-in python3 that
records its GPUs and arguments and ends at once (a `pip install --target
SITE` only makes SITE), a stand-in nvidia-smi with GPUS cards, and sites
that an earlier call installed and patched (in tmp_path, which is also
device_compare.sh's folder of sites)."""

import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_script(tmp_path, script, gpus, args=(), addon=False, kit=".kit", **env):
    """(completed process, [(CUDA_VISIBLE_DEVICES, harness argv), ...])."""
    stub = tmp_path / "bin"
    stub.mkdir(exist_ok=True)
    (stub / "python3").write_text(
        f'#!/bin/bash\necho "$CUDA_VISIBLE_DEVICES|$*" >> {tmp_path}/calls\n'
        'if [ "$1 $2 $3" = "-m pip install" ]; then\n'
        '  for a in "$@"; do [ "$prev" = --target ] && mkdir -p "$a"; prev=$a; done\nfi\n')
    (stub / "nvidia-smi").write_text(  # a Hopper card: compute capability 9.0
        f'#!/bin/bash\nanswer="NVIDIA H100 80GB HBM3"; [[ "$*" == *compute_cap* ]] && answer=9.0\n'
        f'for i in $(seq {gpus}); do echo "$answer"; done\n')
    for f in ("python3", "nvidia-smi"):
        (stub / f).chmod(0o755)
    sb, sp = tmp_path / "sb", tmp_path / "sp"
    sb.mkdir(exist_ok=True)
    sp.mkdir(exist_ok=True)
    (sb / ".kit-installed").write_text("")
    (sp / ".series-applied").write_text("")
    if addon:
        (sb / ".addon-.kitfa3").write_text("")
    work = str(tmp_path / "work")
    e = dict(os.environ, OUT_DIR=str(tmp_path / "out"), PATH=f"{stub}:{os.environ['PATH']}",
             SITE_BASE=str(sb), SITE_PATCHED=str(sp), MODES_WORK=work, FAULTS_WORK=work,
             SPEC_WORK=work, COMPARE_WORK=work, COMPARE_SITES=str(tmp_path), **env)
    res = subprocess.run(["bash", f"benchmark/{script}", str(kit), "500", *args], cwd=REPO,
                         env=e, capture_output=True, text=True, timeout=120)
    calls = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    runs = [c.split("|", 1) for c in calls if "benchmark/" in c]
    return res, [(g, a.split()) for g, a in runs]


def opt(args, name):
    return args[args.index(name) + 1]
