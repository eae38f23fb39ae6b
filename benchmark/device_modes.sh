#!/bin/bash
# One device call for two deployment checks of base and patched (0.5.12.post1
# without and with the series), each a phase that PHASES switches on:
#   dp    DP attention: `e2e.py run --preset qwen3-small --tp 2 --dp 2
#         --enable-dp-attention` (a Qwen3 target: sglang 0.5.12.post1's Llama
#         does not serve DP attention), EAGLE3 (3 steps, topk 1, 4 draft
#         tokens), the attention backend ATTN (default: sglang's own choice,
#         fa3 on Hopper, which needs the FA3 add-on: ADDON=.kitfa3 in this call
#         or an earlier one on the machine; ATTN=triton needs none), one build
#         after the other on two GPUs (DP_SIDE_BY_SIDE=1: both at once, each
#         with a DP_KV_TOKENS pool and --sleep-on-idle): the greedy check (64
#         prompts), the mixed load (new long prompts prefill on one DP rank
#         while the other decodes long generations, outputs against the chain:
#         benchmark/mixed.py), and a short bench (c=1,8, 1 repeat)
#         -> dp-attention-<builds>.json
#   kill  benchmark/kill_rank.py: a TP=2 server per build and scenario (idle,
#         busy: KILL_SCENARIOS), TP rank 1's scheduler gets SIGKILL, the seconds
#         until the server's launcher exits (KILL_CAP_S, default 120: "hung"
#         past it) -> kill-rank.json
# Each job runs on a pair of GPUs of its own where the machine has enough
# pairs (one a build, one a kill scenario where it has more: on 8 GPUs every
# server of the call at once); on 2 GPUs all in turn. Server starts take
# most of a call (TP=2: ~100-250 s each): there, one phase a call, the kill
# phase one scenario a call (KILL_SCENARIOS=idle, then busy) where the cap
# may be reached, and BUILDS=base (then patched) halves either phase.
# Extra options: DP_ARGS (e2e.py run, e.g. "--no-bench" or "--mix-prompts 32";
# later options win), KILL_ARGS (kill_rank.py, e.g. "--speculative none").
# usage: OUT_DIR=dir [PHASES=dp,kill] [BUILDS=base,patched] [ADDON=.kitfa3]
#        [ATTN=default|triton] [KILL_SCENARIOS=idle,busy] [KILL_CAP_S=120]
#        [DP_SIDE_BY_SIDE=1 [DP_KV_TOKENS=60000]] [INSTALL_ONLY=1]
#        benchmark/device_modes.sh KIT BUDGET_S
#   e.g. PHASES=kill OUT_DIR=out benchmark/device_modes.sh .kit 570
#        PHASES=dp ADDON=.kitfa3 OUT_DIR=out benchmark/device_modes.sh .kit 570
#        (the first call carries .kit, the second .kitfa3 onto the warm machine)
# Returns under $OUT_DIR: dp-attention-*.json, kill-rank.json, modes.log (with a
# summary at its end), env.txt, server-logs.tgz (every server's and bench log).
KIT=$1
LOG_NAME=modes.log
. "$(dirname "$0")/lib.sh"
budget_start "${2:?usage: device_modes.sh KIT BUDGET_S}"
PHASES=${PHASES:-dp,kill}
ATTN=${ATTN:-default}
BUILDS=${BUILDS:-base,patched}
KILL_SCENARIOS=${KILL_SCENARIOS:-idle,busy}
KILL_CAP_S=${KILL_CAP_S:-120}
DP_KV_TOKENS=${DP_KV_TOKENS:-60000}
# the sites and work dir (elsewhere only for the script's own tests)
SB=${SITE_BASE:-/tmp/sb} SP=${SITE_PATCHED:-/tmp/sp} WORK=${MODES_WORK:-/tmp/sglpatch-modes}
mkdir -p "$WORK"
gpu_env

for p in ${PHASES//,/ }; do
  case $p in dp|kill) ;; *) log "ERROR: unknown phase $p (PHASES: dp, kill)"; exit 2 ;; esac
done
# once per machine: a later call (one that carries an add-on) finds the sites
kit_install "$KIT" "$SB" 0.5.12.post1 || exit 3
patched_site "$SB" "$SP" || exit 4
if [ -n "$ADDON" ]; then
  addon_install "$ADDON" "$SB" "$SP" || exit 3
fi
[ "$INSTALL_ONLY" = 1 ] && { log "installed only"; exit 0; }
export PYTHONPATH=$SB  # the harness itself needs the kit's tokenizers

gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
[ "$gpus" -ge 2 ] || { log "ERROR: $gpus GPU(s); every phase needs 2"; exit 5; }
pairs=$(( gpus / 2 ))

# The jobs, each on a pair of GPUs of its own where the machine has enough:
# dp one job, or one a build where a pair is left for kill; kill one job, one a
# scenario, or one a build and scenario, as the pairs left allow. Where the
# pairs are too few, the jobs of a pair run in turn (2 GPUs: all of them).
# A job: PHASE:VARIANTS[:SCENARIOS], lists joined by "+".
want_dp=0 want_kill=0
[[ ",$PHASES," == *",dp,"* ]] && want_dp=1
[[ ",$PHASES," == *",kill,"* ]] && want_kill=1
read -r -a scen <<< "${KILL_SCENARIOS//,/ }"
read -r -a builds <<< "${BUILDS//,/ }"
for v in "${builds[@]}"; do
  case $v in base|patched) ;; *) log "ERROR: unknown build $v (BUILDS: base, patched)"; exit 2 ;; esac
done
all=${BUILDS//,/+}
jobs=()
if [ $want_dp = 1 ]; then
  if [ ${#builds[@]} -gt 1 ] && [ "$pairs" -ge $(( ${#builds[@]} + want_kill )) ]; then
    for v in "${builds[@]}"; do jobs+=("dp:$v"); done
  else jobs+=("dp:$all"); fi
fi
if [ $want_kill = 1 ]; then
  free=$(( pairs - ${#jobs[@]} ))
  if [ "$free" -ge $(( ${#builds[@]} * ${#scen[@]} )) ]; then
    for v in "${builds[@]}"; do for s in "${scen[@]}"; do jobs+=("kill:$v:$s"); done; done
  elif [ "$free" -ge "${#scen[@]}" ] && [ "${#scen[@]}" -gt 1 ]; then
    for s in "${scen[@]}"; do jobs+=("kill:$all:$s"); done
  else
    jobs+=("kill:$all:${KILL_SCENARIOS//,/+}")
  fi
fi
[ ${#jobs[@]} -gt 0 ] || { log "ERROR: no phase to run (PHASES=$PHASES)"; exit 2; }
log "jobs: ${jobs[*]} on $pairs GPU pair(s)"

variant_args() {  # variant_args base+patched: the --variant options
  local v
  for v in ${1//+/ }; do
    case $v in base) echo "--variant base=$SB" ;; patched) echo "--variant patched=$SP" ;; esac
  done
}

dp_phase() {  # dp_phase GPUS PORT_BASE VARIANTS
  local name=dp-${3//+/-}
  if [ "$ATTN" = default ] && ! ls "$SB"/.addon-* > /dev/null 2>&1; then
    log "ERROR: dp: ATTN=default is fa3 on Hopper, which needs the FA3 add-on in $SB" \
        "(ADDON=.kitfa3, in this call or an earlier one on this machine); or ATTN=triton"
    return 1
  fi
  local together=() how="in turn"
  # side by side (--sleep-on-idle), an idle DP rank may sleep in its poll for
  # up to 1 s while the other has work: a delay in every build alike
  if [ "$DP_SIDE_BY_SIDE" = 1 ]; then
    together=(--side-by-side --max-total-tokens "$DP_KV_TOKENS") how="side by side"
  fi
  log "$name: GPUs $1, ${3//+/ and } $how, DP attention (tp 2, dp 2), $ATTN backend"
  # shellcheck disable=SC2046,SC2086
  CUDA_VISIBLE_DEVICES=$1 python3 benchmark/e2e.py run $(variant_args "$3") --no-apply \
    --preset qwen3-small --tp 2 --dp 2 --enable-dp-attention \
    --speculative EAGLE3 --piecewise disabled --attention-backend "$ATTN" \
    "${together[@]}" --mixed-load \
    --concurrency 1,8 --repeats 1 --min-seconds 5 \
    --work-dir "$WORK/$name" --out-dir "$WORK/$name/out" --port-base "$2" \
    --deadline-s $(( $(left) - 30 )) $DP_ARGS 2>&1 | sed -u "s/^/[$name] /" \
    | tee -a "$OUT_DIR/modes.log" | grep --line-buffered -E "ready|ERROR|greedy|mixed load|rep |deadline"
  local rc=${PIPESTATUS[0]}
  log "$name: rc=$rc"
  return "$rc"
}

kill_phase() {  # kill_phase GPUS PORT_BASE VARIANTS SCENARIOS
  local name=kill-${3//+/-}-${4//+/-}
  log "$name: GPUs $1, ${3//+/ and }, scenarios ${4//+/ and }, cap ${KILL_CAP_S}s"
  # shellcheck disable=SC2046,SC2086
  CUDA_VISIBLE_DEVICES=$1 python3 benchmark/kill_rank.py $(variant_args "$3") --no-apply \
    --tp 2 --scenarios "${4//+/,}" --cap-s "$KILL_CAP_S" \
    --work-dir "$WORK/$name" --out "$WORK/$name/kill-rank.json" --port-base "$2" \
    --deadline-s $(( $(left) - 30 )) $KILL_ARGS 2>&1 | sed -u "s/^/[$name] /" \
    | tee -a "$OUT_DIR/modes.log" | grep --line-buffered -E "ready|SIGKILL|launcher|ERROR|deadline"
  local rc=${PIPESTATUS[0]}
  log "$name: rc=$rc"
  return "$rc"
}

run_job() {  # run_job JOB GPUS PORT_BASE
  local phase rest
  IFS=: read -r phase rest <<< "$1"
  case $phase in
    dp) dp_phase "$2" "$3" "$rest" ;;
    kill) kill_phase "$2" "$3" "${rest%%:*}" "${rest#*:}" ;;
  esac
}

# jobs on one pair run in turn, pairs at once; the ports lie far apart (DP
# attention also takes the server's port + 233 to + 238)
rm -f "$WORK"/rc-*
rm -rf "$WORK"/dp-*/out "$WORK"/kill-*/kill-rank.json  # an earlier call's results
for (( p = 0; p < pairs && p < ${#jobs[@]}; p++ )); do
  (
    rc=0
    for (( j = p; j < ${#jobs[@]}; j += pairs )); do
      run_job "${jobs[$j]}" "$((2 * p)),$((2 * p + 1))" $(( 31000 + 1000 * j )) || rc=1
    done
    echo $rc > "$WORK/rc-$p"
  ) &
done
wait
rc=0
for f in "$WORK"/rc-*; do [ "$(cat "$f")" = 0 ] || rc=1; done

# back: each dp job's results file (dp-attention-<builds>.json: e2e.py merge
# joins them where wanted), the kill jobs' records joined in kill-rank.json
for d in "$WORK"/dp-*/; do
  name=$(basename "$d")
  for f in "$d"out/*.json; do [ -f "$f" ] && cp "$f" "$OUT_DIR/dp-attention-${name#dp-}.json"; done
done
kill_parts=("$WORK"/kill-*/kill-rank.json)
if [ -f "${kill_parts[0]}" ]; then
  python3 - "$OUT_DIR/kill-rank.json" "${kill_parts[@]}" <<'EOF' || rc=1
import json, sys
out, parts = sys.argv[1], [json.load(open(p)) for p in sys.argv[2:]]
data = dict(parts[0], kills=[k for p in parts for k in p["kills"]],
            commands=[c for p in parts for c in p["commands"]])
with open(out, "w") as fh:
    json.dump(data, fh, indent=1)
EOF
fi

tar_logs "$WORK"
{
  echo "== summary"
  for f in "$OUT_DIR"/dp-attention-*.json; do
    [ -f "$f" ] || continue
    python3 benchmark/call_summary.py dp "$f"
  done
  if [ -f "$OUT_DIR/kill-rank.json" ]; then
    python3 - "$OUT_DIR/kill-rank.json" <<'EOF'
import json, sys
sys.path.insert(0, "benchmark")
from kill_rank import summary_line
for r in json.load(open(sys.argv[1]))["kills"]:
    print(summary_line(r))
EOF
  fi
} 2>&1 | tee -a "$OUT_DIR/modes.log"
log "done rc=$rc"
exit $rc
