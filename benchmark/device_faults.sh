#!/bin/bash
# One device call: the load/fault mode (e2e run --faults) of every deployment
# shape, base and patched side by side in each:
#   tp1      aggregated, TP=1 (one GPU)
#   disagg   disaggregated decode (fake transfer), TP=1 (one GPU)
#   tp2      aggregated, TP=2 (two GPUs)
# On 4 GPUs all at once (GPU 0, GPU 1, GPUs 2,3); on 2 GPUs tp1 and disagg at
# once, then tp2, the first wave with half the call's time; on 1 GPU tp1 and
# then disagg, each with half (SHAPES defaults to those two there, and a
# SHAPES with tp2 is refused before anything is installed). SHAPES picks
# some (e.g. SHAPES=tp2). Each shape is its own e2e run (own ports, work dir and
# results file); they share nothing but the host. These runs check
# correctness under load (chain, liveness, retractions, aborts), not speed,
# so running them together is fine. The sites are installed once per
# machine: a call after the one that carried the kit (and the FA3 add-on, for
# the default backend on Hopper: ADDON=.kitfa3) finds them.
# CANDIDATES=A,B+C adds one server per entry beside base and patched, as
# device_compare.sh's variant candidate-NAME: the series, then the trial
# patches benchmark/candidates/NAME.patch (B+C: B, then C).
# usage: OUT_DIR=dir [SHAPES=tp1,disagg,tp2] [CANDIDATES=NAME,...] [ADDON=.kitfa3] benchmark/device_faults.sh KIT BUDGET_S [e2e run options for every shape]
#   e.g. SGLANG_DEBUG_CHECK_SEQ_LENS_TRUTH=1 benchmark/device_faults.sh .kit 560 \
#          --speculative EAGLE3 --piecewise default --greedy-prompts 96
# Returns under $OUT_DIR: faults-<shape>.json per shape, compare.log, env.txt,
# server-logs.tgz (every shape's server and bench logs).
KIT=$1
LOG_NAME=compare.log
. "$(dirname "$0")/lib.sh"
budget_start "$2"
shift 2
# the sites and work dir (elsewhere only for the script's own tests)
SB=${SITE_BASE:-/tmp/sb} SP=${SITE_PATCHED:-/tmp/sp} WORK=${FAULTS_WORK:-/tmp/sglpatch-faults}
IFS=, read -ra cands <<< "${CANDIDATES:-}"
declare -A trials_of
for c in "${cands[@]}"; do  # refuse a missing trial patch before installing anything
  trials_of[$c]=$(candidate_trials "$c") || { log "ERROR: candidate-$c: a trial patch is missing"; exit 2; }
done
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
[ "$gpus" -ge 1 ] || { log "ERROR: no GPU"; exit 5; }
[ "$gpus" -ge 2 ] || SHAPES=${SHAPES:-tp1,disagg}
SHAPES=${SHAPES:-tp1,disagg,tp2}
for s in ${SHAPES//,/ }; do
  case $s in tp1|disagg|tp2) ;; *) log "ERROR: unknown shape $s (SHAPES: tp1, disagg, tp2)"; exit 2 ;; esac
done
want() { [[ ",$SHAPES," == *",$1,"* ]]; }
if want tp2 && [ "$gpus" -lt 2 ]; then
  log "ERROR: shape tp2 needs 2 GPUs and this machine has 1 (SHAPES=tp1,disagg runs on one)"; exit 5
fi
gpu_env
kit_install "$KIT" "$SB" 0.5.12.post1 || exit 3
patched_site "$SB" "$SP" || exit 4
cand_args=() cand_sites=()
for c in "${cands[@]}"; do
  mapfile -t trials <<< "${trials_of[$c]}"
  site="$(dirname "$SB")/sc-$c"
  candidate_site "$SB" "$site" "${trials[@]}" || exit 4
  cand_args+=(--variant "candidate-$c=$site" --no-apply)
  cand_sites+=("$site")
done
export PYTHONPATH=$SB  # the harness itself needs the kit's tokenizers
if [ -n "$ADDON" ]; then
  addon_install "$ADDON" "$SB" "$SP" "${cand_sites[@]}" || exit 3
fi

shape() {  # shape NAME GPUS PORT_BASE DEADLINE_S [extra e2e options]
  local name=$1 devices=$2 port=$3 deadline=$4; shift 4
  rm -rf "${WORK:?}/$name"
  CUDA_VISIBLE_DEVICES=$devices python3 benchmark/e2e.py run \
    --variant "base=$SB" --variant "patched=$SP" --no-apply "${cand_args[@]}" \
    --side-by-side --start-together --max-total-tokens 6000 --no-bench --faults \
    --work-dir "$WORK/$name" --out-dir "$WORK/$name/out" --port-base "$port" \
    --deadline-s "$deadline" "$@" 2>&1 | sed -u "s/^/[$name] /" >> "$OUT_DIR/compare.log"
  local rc=${PIPESTATUS[0]}
  cp "$WORK/$name"/out/*.json "$OUT_DIR/faults-$name.json" 2>/dev/null
  log "$name: rc=$rc"
}
log "faults: shapes $SHAPES on $gpus GPU(s), KV pool 6000 tokens per server"
if [ "$gpus" -eq 1 ]; then  # one GPU: the one-GPU shapes in turn
  want tp1 && want disagg && first=$(( ($(left) - 25) / 2 )) || first=$(( $(left) - 25 ))
  want tp1 && shape tp1 0 40000 "$first" "$@"
  want disagg && shape disagg 0 41000 $(( $(left) - 25 )) --disaggregation-decode "$@"
elif [ "$gpus" -ge 4 ] || ! want tp2; then
  want tp1 && shape tp1 0 40000 $(( $(left) - 25 )) "$@" &
  want disagg && shape disagg 1 41000 $(( $(left) - 25 )) --disaggregation-decode "$@" &
  want tp2 && shape tp2 2,3 42000 $(( $(left) - 25 )) --tp 2 "$@" &
  wait
else  # 2 GPUs and tp2: the one-GPU shapes first, with half the time left
  if want tp1 || want disagg; then
    first=$(( ($(left) - 25) / 2 ))
    want tp1 && shape tp1 0 40000 "$first" "$@" &
    want disagg && shape disagg 1 41000 "$first" --disaggregation-decode "$@" &
    wait
  fi
  shape tp2 0,1 42000 $(( $(left) - 25 )) --tp 2 "$@"
fi
tar_logs "$WORK"
grep -hE "fault storm|idle: greedy|ERROR|Traceback" "$OUT_DIR/compare.log" | tail -40
log "done"
