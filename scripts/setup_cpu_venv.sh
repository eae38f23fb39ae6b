#!/usr/bin/env bash
# Creates .venv from scratch (pinned), installs pristine sglang 0.5.12.post1
# and sglpatch, and applies the series to that venv's sglang.
# Idempotent: re-running reinstalls pristine sglang and re-applies the series,
# so the venv always holds exactly the series in python/sglpatch/patches/.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
SGLANG_VERSION=0.5.12.post1
TORCHVISION_VERSION=0.28.0
WHEEL_DIR="$VENV/sglang-wheel"
say() { echo "[setup] $*" >&2; }

if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV with $($PYTHON --version 2>&1)"
    "$PYTHON" -m venv "$VENV"
fi
# --no-compile: pip would byte-compile every installed module (torch, triton,
# transformers, ...), which took about 40 of a clean setup's 75 s; Python
# compiles the few the tests import at their first import instead.
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
INSTALL=(install --no-compile)

say "installing the pinned test requirements (torch 2.13.0 CPU, ...)"
"${PIP[@]}" "${INSTALL[@]}" -r test/requirements-cpu.txt 2>&1 | { grep -v "^WARNING: Location" || true; }

# sglang pins torch 2.11.0 (a multi-GB CUDA build): take it without deps. The
# wheel is kept in the venv: the tool's tests unpack pristine copies from it.
say "installing pristine sglang $SGLANG_VERSION and torchvision $TORCHVISION_VERSION (--no-deps)"
mkdir -p "$WHEEL_DIR"
if ! ls "$WHEEL_DIR"/sglang-"$SGLANG_VERSION"-*.whl >/dev/null 2>&1; then
    "${PIP[@]}" download --no-deps --only-binary=:all: -d "$WHEEL_DIR" \
        "sglang==$SGLANG_VERSION" 2>&1 | { grep -v "^WARNING: Location" || true; }
fi
"${PIP[@]}" "${INSTALL[@]}" --no-deps --force-reinstall "$WHEEL_DIR"/sglang-"$SGLANG_VERSION"-*.whl \
    "torchvision==$TORCHVISION_VERSION" 2>&1 | { grep -v "^WARNING: Location" || true; }

# Test-harness work-around (see test/harness/sglpatch_cpu_env.py): lets the
# CUDA-built torchvision import beside CPU torch. sglang is not edited.
SITE=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
cp test/harness/sglpatch_cpu_env.py "$SITE/"
echo "import sglpatch_cpu_env; sglpatch_cpu_env.install()" > "$SITE/sglpatch_cpu_env.pth"

say "installing sglpatch (editable)"
"${PIP[@]}" "${INSTALL[@]}" --no-deps -e . 2>&1 | { grep -v "^WARNING: Location" || true; }

say "applying the series"
"$VENV/bin/sglpatch" apply
"$VENV/bin/sglpatch" status
