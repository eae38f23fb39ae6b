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
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)

# The installs go through uv (from PyPI, pinned, into the venv): pip unpacked
# the requirements one wheel after another on one core (about 65 s of a clean
# setup's 80 s); uv takes the same pinned files in under 10 s. uv reads none
# of pip's configuration, so it is handed pip's package sources (index, extra
# indexes, find-links, constraints, CA file) as pip sees them, and looks at
# every index for the best match as pip does. Nothing is byte-compiled here
# (see the end of this script).
UV_VERSION=0.13.8
if ! "$VENV/bin/uv" --version 2>/dev/null | grep -qx "uv $UV_VERSION"; then
    say "installing uv $UV_VERSION"
    "${PIP[@]}" install --no-compile "uv==$UV_VERSION" 2>&1 | { grep -v "^WARNING: Location" || true; }
fi
PIP_SOURCES=$("$VENV/bin/python" - <<'PY'
import ast, shlex, subprocess, sys
out = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                     capture_output=True, text=True).stdout
flags = {"index-url": "--index-url", "extra-index-url": "--extra-index-url",
         "find-links": "--find-links", "constraint": "--constraint"}
args, cert = [], None
for line in out.splitlines():
    key, _, value = line.partition("=")
    name = key.split(".", 1)[-1]
    try:
        value = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        continue
    if name in flags:
        args += [x for v in value.split() for x in (flags[name], v)]
    elif name == "cert":
        cert = value
print(shlex.join(args))
print(cert or "")
PY
)
read -r -a UV_SOURCES <<< "$(sed -n 1p <<< "$PIP_SOURCES")"
UV_CERT=$(sed -n 2p <<< "$PIP_SOURCES")
uv_install() {
    env ${UV_CERT:+SSL_CERT_FILE="$UV_CERT"} "$VENV/bin/uv" pip install -q \
        --python "$VENV/bin/python" --index-strategy unsafe-best-match \
        ${UV_SOURCES[@]+"${UV_SOURCES[@]}"} "$@"
}

say "installing the pinned test requirements (torch 2.13.0 CPU, ...)"
uv_install -r test/requirements-cpu.txt

# Bytecode, written where `make test` has Python look for it (its
# PYTHONPYCACHEPREFIX), on every core: left to the tests, each of the
# pytest-xdist workers compiled torch, transformers and sglang at once while
# collecting (the test modules import them), the same files four times over
# (about 110 s of CPU in a clean `make test`). Only the packages the tests
# import the bulk of; the rest compiles at first import as before. A file
# that does not compile (a few in these packages are not Python 3.11) is
# compiled by nobody, as before: the exit status is not the setup's.
PYCACHE="$(cd "$VENV" && pwd)/pycache"
SITE=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
compile_bytecode() {
    PYTHONPYCACHEPREFIX="$PYCACHE" PYTHONDONTWRITEBYTECODE= "$VENV/bin/python" -m compileall \
        -q -j 0 --invalidation-mode timestamp "${@/#/$SITE/}" >/dev/null || true
}
say "compiling torch's and transformers' bytecode (in the background)"
compile_bytecode torch transformers &
COMPILING=$!

# Beside it, the bytecode of the other third-party modules the tests import
# the most of (about 2000: sympy, pandas, openai, networkx, datasets...),
# written by importing those packages once; none needs torch. Left to the
# tests, every pytest-xdist worker compiled them at once while collecting
# (a collection with only torch, transformers and sglang compiled took
# about 11 s more CPU than one with everything compiled).
say "compiling the bytecode of the other packages the tests import (in the background)"
PYTHONPYCACHEPREFIX="$PYCACHE" PYTHONDONTWRITEBYTECODE= OMP_NUM_THREADS=1 \
    "$VENV/bin/python" -W ignore -c '
import importlib
for name in ("sympy", "pandas", "openai", "networkx", "datasets", "numpy", "IPython",
             "pyarrow", "aiohttp", "pydantic", "rich", "huggingface_hub", "fsspec",
             "zmq", "PIL", "loguru", "pytest", "xdist", "pygments", "jinja2", "httpx",
             "fastapi", "uvicorn", "requests", "mpmath", "filelock"):
    try:
        importlib.import_module(name)
    except Exception:
        pass
' >/dev/null 2>&1 &
WARMING=$!

# sglang pins torch 2.11.0 (a multi-GB CUDA build): take it without deps. The
# wheel is kept in the venv: the tool's tests unpack pristine copies from it.
say "installing pristine sglang $SGLANG_VERSION and torchvision $TORCHVISION_VERSION (--no-deps)"
mkdir -p "$WHEEL_DIR"
if ! ls "$WHEEL_DIR"/sglang-"$SGLANG_VERSION"-*.whl >/dev/null 2>&1; then
    "${PIP[@]}" download --no-deps --only-binary=:all: -d "$WHEEL_DIR" \
        "sglang==$SGLANG_VERSION" 2>&1 | { grep -v "^WARNING: Location" || true; }
fi
uv_install --no-deps --reinstall "$WHEEL_DIR"/sglang-"$SGLANG_VERSION"-*.whl \
    "torchvision==$TORCHVISION_VERSION"

# Test-harness work-around (see test/harness/sglpatch_cpu_env.py): lets the
# CUDA-built torchvision import beside CPU torch. sglang is not edited.
cp test/harness/sglpatch_cpu_env.py "$SITE/"
echo "import sglpatch_cpu_env; sglpatch_cpu_env.install()" > "$SITE/sglpatch_cpu_env.pth"

say "installing sglpatch (editable)"
uv_install --no-deps -e .

say "applying the series"
"$VENV/bin/sglpatch" apply
"$VENV/bin/sglpatch" status

say "compiling sglang's bytecode"
compile_bytecode sglang
wait "$COMPILING"
wait "$WARMING" || true
