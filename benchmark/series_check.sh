#!/bin/bash
# One device call: is the patched series correct on the GPU?
#   - greedy EAGLE3 == no-spec (64 prompts x 64 tokens), triton, CUDA graphs on,
#     overlap on and off; then CUDA graphs off; then flashinfer
#   - with SGLANG_DEBUG_CHECK_SEQ_LENS_MIRROR=1 (patch 0004) and, with
#     STALE_PLAN_CHECK=1, SGLANG_DEBUG_STALE_ATTN_PLAN=1 (patch 0007) on: they
#     must stay silent
#   - the seq_lens pull probe (benchmark/probes/sitecustomize.py): host pulls
#     per relayed decode step, triton vs flashinfer (patch 0006)
#   - the startup refusal of flashinfer with SGLANG_ENABLE_OVERLAP_PLAN_STREAM=1
#     (patch 0001; SKIP_REFUSAL=1 skips it)
# usage: OUT_DIR=dir [SKIP_REFUSAL=1] [STALE_PLAN_CHECK=1] benchmark/series_check.sh KIT_DIR [BUDGET_S]
# Everything lands in $OUT_DIR/series-check.tgz (+ summary.txt; $OUT_DIR: the folder
# that comes back, benchmark/kit/README.md), so a call cut
# short by its time limit still returns what was done.
KIT=$1
LOG_NAME=series-check.log
. "$(dirname "$0")/lib.sh"
budget_start "${2:-520}"
SITE=/tmp/site-patched WORK=/tmp/sglpatch-check
mkdir -p "$WORK"
gpu_env

kit_install "$KIT" /tmp/sb 0.5.12.post1 || exit 3
patched_site /tmp/sb "$SITE" || exit 4
cp benchmark/probes/sitecustomize.py "$SITE/"
export PYTHONPATH=$SITE
export SGLANG_DEBUG_CHECK_SEQ_LENS_MIRROR=1 SGLANG_DEBUG_STALE_ATTN_PLAN=${STALE_PLAN_CHECK:-0}

e2e() {  # e2e NAME [options]: greedy only, patched variant, its own results dir
  local name=$1; shift
  SGLPATCH_PROBE_DIR=$WORK/$name/probe timeout $(( $(left) - 5 )) \
    python3 benchmark/e2e.py run --variant "patched=$SITE" --no-apply --no-bench \
      --work-dir "$WORK" --out-dir "$WORK/$name" --piecewise default \
      --deadline-s $(( $(left) - 60 )) "$@" 2>&1 | tail -n 40 > "$WORK/$name.log"
}
e2e triton-graphs --overlap on,off --speculative EAGLE3,none
e2e triton-nographs --overlap on --speculative EAGLE3,none --server-arg=--disable-cuda-graph

# Startup refusal: flashinfer cannot serve the plan stream (no CUDA graphs:
# the refusal does not depend on them, and it comes before any capture).
M=$WORK/models-small
[ -z "$SKIP_REFUSAL" ] && SGLANG_ENABLE_OVERLAP_PLAN_STREAM=1 timeout 240 python3 -m sglang.launch_server \
  --model-path "$M/target" --speculative-algorithm EAGLE3 \
  --speculative-draft-model-path "$M/draft" --speculative-num-steps 3 \
  --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 \
  --attention-backend flashinfer --sampling-backend pytorch --grammar-backend none \
  --disable-cuda-graph --host 127.0.0.1 --port 31999 > "$WORK/refusal.log" 2>&1
[ -z "$SKIP_REFUSAL" ] && echo "refusal exit code: $? after $(( $(date +%s) - t0 ))s" >> "$WORK/refusal.log"

[ "$(left)" -gt 200 ] && e2e flashinfer --attention-backend flashinfer --overlap on --speculative EAGLE3,none

{
  for f in "$WORK"/*.log; do echo "== $f"; tail -n 8 "$f"; done
  for d in "$WORK"/*/probe; do echo "== $d"; cat "$d"/*.json 2>/dev/null; echo; done
} > "$OUT_DIR/summary.txt" 2>&1
tar czf "$OUT_DIR/series-check.tgz" -C "$WORK" --exclude='models-*' .
