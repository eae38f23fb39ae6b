#!/bin/bash
# One device call: the load/fault mode (e2e run --faults) of every deployment
# shape at once, base and patched side by side in each, on a 4-GPU machine:
#   GPU 0      aggregated, TP=1
#   GPU 1      disaggregated decode (fake transfer), TP=1
#   GPUs 2,3   aggregated, TP=2
# Each shape is its own e2e run (own ports, work dir and results file); they
# share nothing but the host. These runs check correctness under load (chain,
# liveness, retractions, aborts), not speed, so running them together is fine.
# usage: OUT=dir benchmark/device_faults.sh KIT BUDGET_S [e2e run options for every shape]
#   e.g. SGLANG_DEBUG_CHECK_SEQ_LENS_TRUTH=1 benchmark/device_faults.sh .kit 560 \
#          --speculative EAGLE3 --piecewise default --greedy-prompts 96
# Returns under $OUT: faults-<shape>.json per shape, compare.log, env.txt,
# server-logs.tgz (every shape's server and bench logs).
KIT=$1
LOG_NAME=compare.log
. "$(dirname "$0")/lib.sh"
budget_start "$2"
shift 2
WORK=/tmp/sglpatch-faults
gpu_env
kit_install "$KIT" /tmp/sb 0.5.12.post1 || exit 3
patched_site /tmp/sb /tmp/sp || exit 4
export PYTHONPATH=/tmp/sb  # the harness itself needs the kit's tokenizers
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
[ "$gpus" -ge 4 ] || { log "ERROR: $gpus GPUs; this call needs 4"; exit 5; }

shape() {  # shape NAME GPUS PORT_BASE [extra e2e options]
  local name=$1 devices=$2 port=$3; shift 3
  rm -rf "${WORK:?}/$name"
  CUDA_VISIBLE_DEVICES=$devices python3 benchmark/e2e.py run \
    --variant base=/tmp/sb --variant patched=/tmp/sp --no-apply \
    --side-by-side --max-total-tokens 6000 --no-bench --faults \
    --work-dir "$WORK/$name" --out-dir "$WORK/$name/out" --port-base "$port" \
    --deadline-s $(( $(left) - 25 )) "$@" 2>&1 | sed -u "s/^/[$name] /" >> "$OUT/compare.log"
  local rc=${PIPESTATUS[0]}
  cp "$WORK/$name"/out/*.json "$OUT/faults-$name.json" 2>/dev/null
  log "$name: rc=$rc"
}
log "faults: every shape at once, KV pool 6000 tokens per server"
shape tp1 0 30000 "$@" &
shape disagg 1 31000 --disaggregation-decode "$@" &
shape tp2 2,3 32000 --tp 2 "$@" &
wait
tar_logs "$WORK"
grep -hE "fault storm|idle: greedy|ERROR|Traceback" "$OUT/compare.log" | tail -40
log "done"
