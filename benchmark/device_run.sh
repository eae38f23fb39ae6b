#!/bin/bash
# One device call: install a wheel kit into SITE, run the harness, keep logs.
# usage: benchmark/device_run.sh KIT_DIR SITE VARIANT [e2e.py run options...]
#   e.g. benchmark/device_run.sh .kit /tmp/site base --deadline-s 520
# Writes everything under $OUT (the device tool's return folder; default
# ./device-out): the results JSON, e2e-log.txt, env.txt and server-logs.tgz.
set -o pipefail
KIT=$1 SITE=$2 VARIANT=$3
shift 3
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  echo "git: $(command -v git || echo missing)"
  python3 -c "import matplotlib; print('matplotlib', matplotlib.__version__)" 2>&1 | tail -1
} > "$OUT/env.txt" 2>&1
t0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --upgrade --target "$SITE" "$KIT"/w/*.whl || exit 3
echo "kit install: $(( $(date +%s) - t0 ))s" >> "$OUT/env.txt"
# the harness itself needs the kit's tokenizers; servers get SITE via --variant
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
python3 benchmark/e2e.py run --variant "$VARIANT=$SITE" --out-dir "$OUT" "$@"
rc=$?
# (tar does not expand wildcards when creating: let the shell do it)
(cd /tmp/sglpatch-bench 2>/dev/null && tar czf "$OUT/server-logs.tgz" ./*.log)
exit $rc
