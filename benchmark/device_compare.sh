#!/bin/bash
# One device call that compares builds on one machine.
#   - installs the kit once per machine (a warm machine keeps /tmp between
#     calls): .kit -> base at /tmp/sb and, with the series applied by
#     sglpatch, patched at /tmp/sp; a kit of upstream release X.Y.Z (.kit13:
#     0.5.13, .kit17: 0.5.17) -> upstream-X.Y.Z at /tmp/su-X.Y.Z (0.5.13: /tmp/su)
#   - SYNC_TRACE=1: first runs a short patched (or upstream) EAGLE3 server
#     with benchmark/probes/sitecustomize.py, which lists every host sync of
#     the scheduler over 100 steady decode forwards (TRACE_ARGS: extra e2e
#     options for that server, e.g. "--piecewise disabled")
#   - then `benchmark/e2e.py run` with the variants and options given
#   - a variant patched-through-NNNN (e.g. patched-through-0002: patches 0001
#     and 0002 only) is a site with the series' first patches applied. With
#     SIDE_BY_SIDE it is one more server of the comparison, under that name
#     (bisecting the series: base, patched-through-0004, patched side by
#     side); without, it runs first, as its own e2e run (variant name
#     "patched", so its numbers never mix with those of every patch) -> through-NNNN.tgz
#   - a variant candidate-NAME is a site with every patch of the series and then the
#     trial patch benchmark/candidates/NAME.patch (not in the series; its
#     README says why each one waits), one more server of the comparison;
#     candidate-A+B has trial patches A and then B on top of the series
#   - the variant base-again is a second unpatched server from base's site,
#     and patched-again a second server from the patched site, each with
#     SIDE_BY_SIDE one more server of the comparison: an A/A control of what
#     a server's place (its CPU set, its turn) alone does to its numbers, and
#     (--greedy-logprobs) of a build's own scatter of logprobs
#   - HOST_TIME=1: every build under test loads the host-time probe
#     (benchmark/probes/host_time.py: host wall time per scheduler iteration,
#     by function, per rank) -> host-time.tgz and a side-by-side table in
#     compare.log; its numbers carry the probe's cost, in every build alike
#   - STARTUP_STACKS=1: every build under test loads the start-up sampler
#     (benchmark/probes/startup_stacks.py: each process's start by Python
#     stack, until it serves) -> startup-stacks.tgz and rank 0's table per
#     build in compare.log; with HOST_TIME=1 too, both load
#   - KEEP_SERVERS=1 (with SIDE_BY_SIDE): e2e --keep-servers, the servers
#     run on after the call, and the next call on the warm machine measures
#     them again instead of starting them anew (those whose launch is the
#     same, and those still starting when the last call's time ran out;
#     benchmark/keep.py); a call without it stops them first
#   - ADDON=DIR: after the sites are installed, an add-on kit's wheels over
#     each of them (.kitfa3: sgl-kernel with FA3, benchmark/kit/README.md);
#     .kitfi: flashinfer's modules prebuilt on an earlier machine, so its
#     servers skip their compiles); an add-on travels alone, in a call after
#     the one that carried the kit, and that call may measure too
#   - SAVE_FLASHINFER_AOT=1: the flashinfer modules the call's servers
#     compiled come back as flashinfer-aot-VERSION-ARCH.tgz.NN, the parts of
#     that add-on
#   - INSTALL_ONLY=1: install the sites and stop
#   - SIDE_BY_SIDE=K: the K servers of the call run at the same time and are
#     measured in turn (e2e --side-by-side), each with a fixed KV pool
#     (KV_TOKENS=N: that pool instead, e.g. 60000 for --preset llama-8b-shape)
#   - PIN=1: e2e --pin-cpus, each server of the comparison and the bench
#     client on whole physical cores of their own (with PAIRS: within each
#     copy's slice)
#   - ROTATE=1 (with PIN=1 and SIDE_BY_SIDE): e2e --rotate-cpus, before each
#     repeat every server moves to the next server's CPU set, so no build
#     keeps one place for the whole call
#   - PAIRS=P (with SIDE_BY_SIDE): P copies of that comparison at once, each
#     on 1/P of the GPUs and CPUs, repeats pooled (benchmark/pairs.py); e.g.
#     PAIRS=2 --tp 2 on four GPUs gives twice the repeats in the same time
#   - VARY="OPTS;OPTS..." (with PAIRS, a multiple of their number): the
#     copies run that many comparisons at once, each adding its OPTS to the
#     call's options and pooled into a folder of its own under OUT_DIR
#     (pairs.py --vary), e.g. VARY="--attention-backend triton;--attention-backend default"
# usage: OUT_DIR=dir [SYNC_TRACE=1] [SIDE_BY_SIDE=K [PAIRS=P [VARY=OPTS;...]]] [PIN=1] benchmark/device_compare.sh KIT BUDGET_S VARIANTS [e2e run options]
#   e.g. benchmark/device_compare.sh .kit 560 base,patched --piecewise default \
#          --concurrency 1,8,32 --repeats 3 --min-seconds 8
# Returns under $OUT_DIR (the folder whose files come back from the GPU machine,
# benchmark/kit/README.md): the results JSON (+ PNG if matplotlib is there),
# compare.log, env.txt, probe.tgz (SYNC_TRACE), server-logs.tgz and
# profiles.tgz (e2e --profile-steps: the torch-profiler traces, a PAIRS
# copy's under pair<i>/profiles; the stack traces in profiles-stack.tgz where
# all would not fit one file).
KIT=$1
LOG_NAME=compare.log
. "$(dirname "$0")/lib.sh"
budget_start "$2"
VARIANTS=$3
shift 3
# the sites (COMPARE_SITES: another folder, e.g. a test's) and the harness's work folder
S=${COMPARE_SITES:-/tmp} WORK=${COMPARE_WORK:-/tmp/sglpatch-bench}
mkdir -p "$WORK"
# a warm machine keeps /tmp: only this call's traces and logs go back
rm -rf "$WORK/profiles" "$WORK"/pair*/profiles
# (but those the servers an earlier call kept still write: KEEP_SERVERS)
python3 benchmark/keep.py prune-logs "$WORK" > /dev/null
gpu_env

args=() partial=() UP_SITE= UP_NAME=
for v in ${VARIANTS//,/ }; do
  case $v in
    base|base-again)
      # base-again, an A/A control: a second server from base's own site
      kit_install "$KIT" "$S/sb" 0.5.12.post1 || exit 3; args+=(--variant "$v=$S/sb") ;;
    patched|patched-again)
      # patched-again, the series' A/A control: a second server from its site
      kit_install "$KIT" "$S/sb" 0.5.12.post1 || exit 3
      patched_site "$S/sb" "$S/sp" || exit 4
      args+=(--variant "$v=$S/sp" --no-apply) ;;
    upstream-*)
      # an upstream release, unpatched, from a kit of that very version
      ver=${v#upstream-}
      site=$(upstream_site "$ver" "$S") || { echo "unknown variant $v (upstream-X.Y.Z[.postN])" >&2; exit 2; }
      kit_install "$KIT" "$site" "$ver" || exit 3
      UP_SITE=${UP_SITE:-$site} UP_NAME=${UP_NAME:-$v}
      args+=(--variant "$v=$site") ;;
    patched-through-*)
      n=${v#patched-through-}
      kit_install "$KIT" "$S/sb" 0.5.12.post1 || exit 3
      patched_site "$S/sb" "$S/sp-$n" "$n" || exit 4
      # side by side: a server beside the others, under its own name (a
      # bisection of the series in one comparison); else a run of its own
      if [ -n "$SIDE_BY_SIDE" ]; then
        args+=(--variant "$v=$S/sp-$n" --no-apply)
      else
        partial+=("$n")
      fi ;;
    candidate-*)
      # every patch of the series and trial patches of benchmark/candidates/
      # on top: candidate-A+B applies A, then B
      paths=$(candidate_trials "${v#candidate-}") || exit 2
      mapfile -t trials <<< "$paths"
      kit_install "$KIT" "$S/sb" 0.5.12.post1 || exit 3
      candidate_site "$S/sb" "$S/sc-${v#candidate-}" "${trials[@]}" || exit 4
      args+=(--variant "$v=$S/sc-${v#candidate-}" --no-apply) ;;
    *) echo "unknown variant $v" >&2; exit 2 ;;
  esac
done
if [ -n "$ADDON" ]; then
  addon_install "$ADDON" "$S"/sb "$S"/sp "$S"/sp-[0-9]* "$S"/sc-* "$S"/su "$S"/su-[0-9]*[0-9] || exit 3
fi
# INSTALL_ONLY=1: only put the sites on the machine (the other kit comes in
# the next call, as both kits together exceed what one call can send)
[ "$INSTALL_ONLY" = 1 ] && { log "installed only"; exit 0; }
if [ "$HOST_TIME" = 1 ] || [ "$STARTUP_STACKS" = 1 ]; then
  rm -rf /tmp/probe-host && mkdir -p /tmp/probe-host
  for i in "${!args[@]}"; do
    case ${args[$i]} in
      *="$S"/s[bpu] | *="$S"/sp-[0-9]* | *="$S"/sc-* | *="$S"/su-[0-9]*[0-9])
        probe_site "${args[$i]#*=}" "${args[$i]#*=}-probe" || exit 4
        args[$i]=${args[$i]}-probe ;;
    esac
  done
  export SGLPATCH_PROBE_DIR=/tmp/probe-host
  [ "$HOST_TIME" = 1 ] && export SGLPATCH_HOST_TIME=1
  [ "$STARTUP_STACKS" = 1 ] && export SGLPATCH_STARTUP_STACKS=1
  log "probes (host time ${HOST_TIME:-0}, start-up stacks ${STARTUP_STACKS:-0}) in: ${args[*]}"
fi
SITE0=$(ls -d "$S"/sb "$S"/su "$S"/su-[0-9]*[0-9] 2>/dev/null | head -1)
export PYTHONPATH=$SITE0  # the harness itself needs the kit's tokenizers

if [ "$SYNC_TRACE" = 1 ]; then
  # The probe goes into a copy of the site, so the measured servers never load it.
  src=$S/sp name=patched
  [ -d "$S/sp" ] || { src=${UP_SITE:-$S/su} name=${UP_NAME:-upstream-0.5.13}; }
  rm -rf /tmp/probe && probe_site "$src" /tmp/probe-site || exit 4
  log "sync trace: $name"
  SGLPATCH_PROBE_DIR=/tmp/probe SGLPATCH_SYNC_TRACE=1 SGLPATCH_SYNC_SKIP=20 SGLPATCH_SYNC_STEPS=100 \
    timeout $(( $(left) - 20 )) python3 benchmark/e2e.py run --variant "$name=/tmp/probe-site" --no-apply \
      --speculative EAGLE3 --concurrency 1 --repeats 1 --min-seconds 3 --greedy-prompts 8 \
      --work-dir "$WORK" --out-dir /tmp/probe/results --deadline-s 200 $TRACE_ARGS >> "$OUT_DIR/compare.log" 2>&1
  tar czf "$OUT_DIR/probe.tgz" -C /tmp probe
  for f in /tmp/probe/*-sync.json; do [ -f "$f" ] && { log "$f"; tee -a "$OUT_DIR/compare.log" < "$f"; }; done
fi

if [ -n "$SIDE_BY_SIDE" ]; then
  # each server a fixed KV pool that leaves room for the others (lib.sh)
  mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
  kv=$(side_by_side_kv "$mib" "$SIDE_BY_SIDE" "$KV_TOKENS") || exit 5
  log "side by side: $SIDE_BY_SIDE servers, --max-total-tokens $kv each"
  set -- "$@" --side-by-side --max-total-tokens "$kv"
fi

[ "$PIN" = 1 ] && set -- "$@" --pin-cpus
[ "$ROTATE" = 1 ] && set -- "$@" --rotate-cpus
[ "$KEEP_SERVERS" = 1 ] && set -- "$@" --keep-servers
rc=0
[ -n "$PAIRS" ] && [ -z "$SIDE_BY_SIDE" ] && { log "ERROR: PAIRS needs SIDE_BY_SIDE"; exit 2; }
[ -n "$VARY" ] && [ -z "$PAIRS" ] && { log "ERROR: VARY needs PAIRS"; exit 2; }
vary=()
IFS=';' read -ra sets <<< "$VARY"
for o in "${sets[@]}"; do vary+=("--vary=$o"); done  # = : an OPTS like "--flag" is a value
e2e() {  # e2e OUT_DIR VARIANT_ARGS... -- e2e options
  local dir=$1; shift
  local runner=(benchmark/e2e.py run)
  [ -n "$PAIRS" ] && runner=(benchmark/pairs.py --pairs "$PAIRS" "${vary[@]}" --)
  log "e2e${PAIRS:+ x$PAIRS pairs}${VARY:+ varying $VARY} -> $dir: $*"
  python3 "${runner[@]}" "$@" --work-dir "$WORK" --out-dir "$dir" \
    --deadline-s $(( $(left) - 25 )) 2>&1 | tee -a "$OUT_DIR/compare.log" \
    | grep -E "rep |ready|ERROR|deadline|greedy|pair[0-9]+:|pooled"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
}
for n in "${partial[@]}"; do
  e2e "/tmp/through-$n" --variant "patched=/tmp/sp-$n" --no-apply "$@"
  tar czf "$OUT_DIR/through-$n.tgz" -C /tmp "through-$n"
done
[ ${#args[@]} -gt 0 ] && e2e "$OUT_DIR" "${args[@]}" "$@"
if [ "$HOST_TIME" = 1 ]; then
  tar czf "$OUT_DIR/host-time.tgz" -C /tmp probe-host
  python3 benchmark/probes/host_time.py /tmp/probe-host >> "$OUT_DIR/compare.log" 2>&1
fi
if [ "$STARTUP_STACKS" = 1 ]; then
  (cd /tmp/probe-host && find . -name '*-startup.json' -print0 | xargs -0 -r tar czf "$OUT_DIR/startup-stacks.tgz")
  python3 benchmark/probes/startup_stacks.py /tmp/probe-host --rank 0 >> "$OUT_DIR/compare.log" 2>&1
fi
if [ "$SAVE_FLASHINFER_AOT" = 1 ]; then
  # the flashinfer modules this machine compiled, back for the add-on that
  # spares the next fresh machine those compiles (benchmark/kit/README.md)
  fv=$(site_version "$S/sb" flashinfer_python)
  [ -n "$fv" ] && { flashinfer_aot_save "$WORK" "$fv" || rc=1; }
fi
tar_logs "$WORK"  # also those of PAIRS copies (pair<i>/*.log)
pack_profiles "$WORK"  # e2e --profile-steps: the traces, in one or two files back
log "done rc=$rc"
exit $rc
