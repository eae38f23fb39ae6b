#!/bin/bash
# One device call for sglang's own EAGLE parameters: a Llama target launched
# with only the draft model path gets 5 steps, topk 4 and 8 draft tokens
# (server_args.py, auto_choose_speculative_params), which turns the overlap
# schedule off and runs spec v1. Unpatched 0.5.12.post1 decides spec v1 or v2
# before it picks them and crashes at its first decode (0015's page), so the
# comparison launches both builds with those parameters given:
#   each backend of BACKENDS (default: triton,default) on a GPU of its own
#   (more backends than GPUs: in turn), base and patched side by side
#   (default: fa3, what the auto launch picks on Hopper),
#   `e2e.py run --spec-steps 5 --spec-topk 4 --spec-draft-tokens 8` with the
#   e2e options given -> spec-<backend>.json
#   then the patched build alone with `--spec-auto` (only the draft path), a
#   greedy check whose digest must equal the explicit run's
#   -> spec-auto-<backend>.json
# The sites are installed once per machine (kit, then ADDON=.kitfa3 for the
# default backend on Hopper, each in a call of its own).
# usage: OUT_DIR=dir [BACKENDS=triton,default] [ADDON=.kitfa3] [KV_TOKENS=N] [AUTO=0]
#        benchmark/device_spec.sh KIT BUDGET_S [e2e run options]
#   e.g. ADDON=.kitfa3 OUT_DIR=out benchmark/device_spec.sh .kitfa3 560 --piecewise default \
#          --concurrency 1,8,32 --repeats 3 --min-seconds 10 --greedy-prompts 16
# Returns under $OUT_DIR: spec-*.json, spec-auto-*.json, compare.log (a summary at
# its end), env.txt, server-logs.tgz.
KIT=$1
LOG_NAME=compare.log
. "$(dirname "$0")/lib.sh"
budget_start "${2:?usage: device_spec.sh KIT BUDGET_S [e2e options]}"
shift 2
BACKENDS=${BACKENDS:-triton,default}
KV_TOKENS=${KV_TOKENS:-60000}
# what the auto-parameter check after each comparison needs (AUTO=0: none)
AUTO_S=${AUTO_S:-150}
[ "$AUTO" = 0 ] && AUTO_S=0
# the sites and work dir (elsewhere only for the script's own tests)
SB=${SITE_BASE:-/tmp/sb} SP=${SITE_PATCHED:-/tmp/sp} WORK=${SPEC_WORK:-/tmp/sglpatch-spec}
mkdir -p "$WORK"
gpu_env
kit_install "$KIT" "$SB" 0.5.12.post1 || exit 3
patched_site "$SB" "$SP" || exit 4
if [ -n "$ADDON" ]; then
  addon_install "$ADDON" "$SB" "$SP" || exit 3
fi
export PYTHONPATH=$SB  # the harness itself needs the kit's tokenizers
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
read -r -a backends <<< "${BACKENDS//,/ }"
TREE=(--speculative EAGLE3 --spec-steps 5)

spec_backend() {  # spec_backend BACKEND GPU PORT_BASE DEADLINE_S [e2e options]
  local be=$1 gpu=$2 port=$3 end=$4; shift 4
  local dir=$WORK/$be cmp=$be
  # sglang picks the default backend before the EAGLE parameters: the auto
  # launch gets fa3 on Hopper, where one that names topk 4 gets flashinfer;
  # so the comparison names the backend the auto launch runs
  [ "$be" = default ] && cmp=fa3
  rm -rf "$dir/out" "$dir/auto" "$dir-auto"/*.log
  log "$be: GPU $gpu, base and patched at 5/4/8 ($cmp), then patched with sglang's choice"
  CUDA_VISIBLE_DEVICES=$gpu python3 benchmark/e2e.py run \
    --variant "base=$SB" --variant "patched=$SP" --no-apply \
    "${TREE[@]}" --spec-topk 4 --spec-draft-tokens 8 --attention-backend "$cmp" \
    --side-by-side --start-together --max-total-tokens "$KV_TOKENS" \
    --work-dir "$dir" --out-dir "$dir/out" --port-base "$port" \
    --deadline-s $(( end - $(date +%s) - AUTO_S )) "$@" 2>&1 \
    | sed -u "s/^/[$be] /" >> "$OUT_DIR/compare.log"
  log "$be: comparison rc=${PIPESTATUS[0]}"
  cp "$dir"/out/*.json "$OUT_DIR/spec-$be.json" 2>/dev/null
  [ "$AUTO" = 0 ] && return
  # the same model pair (built anew from --spec-steps 5 and the seed), the
  # same greedy prompts; a work dir of its own, so that no log of the
  # comparison's servers is overwritten by this one's
  CUDA_VISIBLE_DEVICES=$gpu python3 benchmark/e2e.py run \
    --variant "patched=$SP" --no-apply "${TREE[@]}" --spec-auto --attention-backend "$be" \
    --max-total-tokens "$KV_TOKENS" --no-bench "$@" \
    --work-dir "$dir-auto" --out-dir "$dir/auto" --port-base $(( port + 500 )) \
    --deadline-s $(( end - $(date +%s) - 10 )) 2>&1 \
    | sed -u "s/^/[$be auto] /" >> "$OUT_DIR/compare.log"
  log "$be: auto rc=${PIPESTATUS[0]}"
  cp "$dir"/auto/*.json "$OUT_DIR/spec-auto-$be.json" 2>/dev/null
}

# a GPU a backend; with more backends than GPUs, those of one GPU in turn,
# each with its share of the time
per_gpu=$(( (${#backends[@]} + gpus - 1) / gpus ))
for (( g = 0; g < gpus && g < ${#backends[@]}; g++ )); do
  (
    for (( j = g; j < ${#backends[@]}; j += gpus )); do
      share=$(( ($(left) - 30) / (per_gpu - (j - g) / gpus) ))
      spec_backend "${backends[$j]}" "$g" $(( 44000 + 1000 * j )) \
        $(( $(date +%s) + share )) "$@"
    done
  ) &
done
wait
tar_logs "$WORK"
{
  echo "== summary"
  for f in "$OUT_DIR"/spec-*.json; do
    [ -f "$f" ] || continue
    python3 benchmark/call_summary.py "$(basename "$f")" "$f"
  done
} 2>&1 | tee -a "$OUT_DIR/compare.log"
log "done"
