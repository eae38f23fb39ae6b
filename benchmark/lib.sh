# Shell library of the device scripts (device_compare.sh, series_check.sh):
# the time budget of one call, the kit install, the patched sites.
# Source it from the repository root:  . benchmark/lib.sh; budget_start SECONDS
# $OUT_DIR is the folder whose files come back from the GPU machine
# (benchmark/kit/README.md); default ./device-out.

OUT_DIR=${OUT_DIR:-$PWD/device-out}
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1

budget_start() {  # budget_start SECONDS: the call's time budget starts now
  # (T0 is also the call's start for tar_logs: once per call, before any server)
  BUDGET=$1 T0=$(date +%s)
}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }  # seconds left
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT_DIR/${LOG_NAME:-device.log}"; }

gpu_env() {  # the card and driver, into $OUT_DIR/env.txt
  { date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } \
    > "$OUT_DIR/env.txt" 2>&1
}

kit_install() {  # kit_install KIT SITE VERSION: the kit's wheels into SITE, once per machine
  local kit=$1 site=$2 version=$3
  [ -f "$site/.kit-installed" ] && { log "reuse $site"; return 0; }
  # a site is only ever filled from a kit of its own sglang version: a warm
  # machine keeps /tmp, and one call carries only one kit
  ls "$kit"/w/sglang-"$version"-*.whl > /dev/null 2>&1 || {
    log "ERROR: $site needs sglang $version, but $kit holds $(cd "$kit"/w && ls sglang-[0-9]*.whl)"
    return 1; }
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target "$site" "$kit"/w/*.whl || return 1
  touch "$site/.kit-installed"; log "installed $kit into $site"
}

upstream_site() {  # upstream_site VERSION [DIR]: the site of upstream sglang VERSION
  # (X.Y.Z or X.Y.Z.postN) in DIR (default /tmp), each release a site of its own:
  # DIR/su-VERSION; 0.5.13 keeps DIR/su, the path the results files' commands
  # name. Fails on a malformed version.
  [[ "$1" =~ ^[0-9]+\.[0-9]+\.[0-9]+(\.post[0-9]+)?$ ]] || return 1
  if [ "$1" = 0.5.13 ]; then echo "${2:-/tmp}/su"; else echo "${2:-/tmp}/su-$1"; fi
}

patched_site() {  # patched_site BASE SITE [NNNN]: a copy of BASE with the series
  # applied by the project's tool; with NNNN only patches 0001..NNNN
  local base=$1 site=$2 through=${3:-}
  [ -f "$site/.series-applied" ] && { log "reuse $site"; return 0; }
  rm -rf "$site" && cp -a "$base" "$site" || return 1
  PYTHONPATH=python python3 -m sglpatch apply ${through:+--through "$through"} \
    --sglang-dir "$site/sglang" >> "$OUT_DIR/${LOG_NAME:-device.log}" 2>&1 || return 1
  share_site "$base" "$site" || return 1  # after the series: it must write its own files
  touch "$site/.series-applied"; log "$site: series applied${through:+ through $through}"
}

candidate_apply() {  # candidate_apply SITE PATCH: a trial patch (benchmark/candidates/,
  # git format-patch on top of the series, upstream's layout) onto SITE/sglang;
  # its tests (outside python/sglang/) are left out, as sglpatch does
  local site=$1 patch
  patch=$(realpath "$2") || return 1
  (cd "$site" && GIT_CEILING_DIRECTORIES=$(dirname "$(realpath .)") \
    git apply -p2 --include='sglang/*' --whitespace=nowarn "$patch")
}

candidate_trials() {  # candidate_trials NAME: the trial patches of the variant
  # candidate-NAME, one path a line (candidate-A+B: A, then B); fails, naming
  # the first one missing, where benchmark/candidates/ lacks one
  local n names
  IFS=+ read -ra names <<< "$1"
  for n in "${names[@]}"; do
    [ -f "benchmark/candidates/$n.patch" ] || {
      echo "no trial patch benchmark/candidates/$n.patch" >&2; return 1; }
    echo "benchmark/candidates/$n.patch"
  done
}

candidate_site() {  # candidate_site BASE SITE PATCH...: a copy of BASE with every
  # patch of the series and then the trial patches in order, once per machine
  local base=$1 site=$2 patch names=""
  shift 2
  [ -f "$site/.candidate-applied" ] && { log "reuse $site"; return 0; }
  rm -f "$site/.series-applied"  # a half-made site from an earlier call is made anew
  patched_site "$base" "$site" || return 1
  for patch in "$@"; do
    candidate_apply "$site" "$patch" >> "$OUT_DIR/${LOG_NAME:-device.log}" 2>&1 || {
      log "ERROR: $(basename "$patch") does not apply on the series${names:+ and$names}"
      return 1; }
    names="$names $(basename "$patch")"
  done
  touch "$site/.candidate-applied"; log "$site: series and$names applied"
}

share_site() {  # share_site FROM SITE: SITE's packages other than sglang, and sglang's
  # JIT kernel sources where SITE's equal FROM's, become links to FROM's files.
  # flashinfer and tvm-ffi key their compile caches by the resolved paths of the
  # sources (benchmark/results/2026-11-27-h100x2-probes/README.md): with every
  # build's kernels at one path, a call compiles each kernel once, not once a build.
  local from=$1 site=$2 entry name real
  for entry in "$site"/*; do  # links an upgrade of FROM (addon_install) left dangling
    [ -L "$entry" ] && [ ! -e "$entry" ] && { rm -f "$entry" || return 1; }
  done
  for entry in "$from"/*/; do
    name=$(basename "$entry")
    # sglang and its dist-info are the site's own: the series changes the
    # package, and sglpatch keeps pip's RECORD in the dist-info true to it
    case $name in sglang|sglang-[0-9]*.dist-info) continue ;; esac
    real=$(realpath "$entry") || return 1
    [ "$(realpath -q "$site/$name")" = "$real" ] && continue
    rm -rf "${site:?}/$name" && ln -s "$real" "$site/$name" || return 1
  done
  echo "$from" > "$site/.shared-from"
  real=$(realpath -q "$from/sglang/jit_kernel") || return 0
  [ -d "$site/sglang/jit_kernel" ] || return 0
  [ "$(realpath "$site/sglang/jit_kernel")" = "$real" ] && return 0
  # a series that changed them keeps its own copy
  diff -rq "$real" "$site/sglang/jit_kernel" > /dev/null 2>&1 || return 0
  rm -rf "$site/sglang/jit_kernel" && ln -s "$real" "$site/sglang/jit_kernel"
}

site_version() {  # site_version SITE DIST: the version of the distribution DIST
  # (as its dist-info folder spells it, e.g. flashinfer_python) installed in SITE;
  # nothing where it is not
  local info
  info=$(cd "$1" 2>/dev/null && ls -d "$2"-*.dist-info 2>/dev/null | head -1)
  info=${info#"$2"-}; echo "${info%.dist-info}"
}

addon_fits() {  # addon_fits ADDON SITE: each add-on wheel's package is in SITE at the
  # wheel's version (else ADDON_MISFIT says which is not)
  local whl dist version have
  for whl in "$1"/w/*.whl; do
    whl=$(basename "$whl"); dist=${whl%%-*}; version=${whl#*-}; version=${version%%-*}
    have=$(site_version "$2" "$dist")
    [ "$have" = "$version" ] && continue
    ADDON_MISFIT="$dist ${have:-missing} there, $version in the add-on"
    return 1
  done
}

addon_install() {  # addon_install ADDON SITE...: an add-on kit's wheels over each site, once
  # (e.g. .kitfa3, build-kit.sh fa3: too big to travel beside the kit, so it
  # comes in a later call onto the same warm machine and replaces the slim
  # sgl-kernel in every site already installed); an add-on of prebuilt
  # flashinfer modules (.kitfi, no wheels) goes to flashinfer_aot_install
  local addon=$1 site name; shift
  name=$(basename "$addon")
  if ! ls "$addon"/w/*.whl > /dev/null 2>&1; then
    ls "$addon"/flashinfer-aot-*.tgz.* > /dev/null 2>&1 \
      || { log "ERROR: no wheels in $addon/w, nor flashinfer modules"; return 1; }
    flashinfer_aot_install "$addon" "$@"
    return
  fi
  for site in "$@"; do
    [ -d "$site" ] || continue
    [ -f "$site/.addon-$name" ] && { log "reuse $name in $site"; continue; }
    # an add-on replaces a package by the same version only: each sglang pins
    # its own sgl-kernel (.kitfa3 serves 0.5.12.post1, .kitfa3-13 0.5.13,
    # .kitfa3-17 0.5.17)
    addon_fits "$addon" "$site" || { log "skip $name for $site: $ADDON_MISFIT"; continue; }
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --upgrade --target "$site" "$addon"/w/*.whl || return 1
    touch "$site/.addon-$name"; log "installed $addon into $site"
  done
  # a shared site (share_site) sees FROM's upgrade through its links; a
  # package pip wrote into the site itself becomes a link to FROM's again
  for site in "$@"; do
    [ -f "$site/.shared-from" ] || continue
    share_site "$(cat "$site/.shared-from")" "$site" || return 1
  done
}

# flashinfer compiles its kernels with nvcc at a server's first start on a
# fresh machine (the kit leaves out its cubins): minutes of every call that
# starts a flashinfer server. flashinfer loads a module without building it
# where the package holds one under data/aot/NAME/NAME.so (flashinfer/jit/
# env.py, _get_aot_dir; core.py, JitSpec.is_aot). So the modules one machine
# compiled travel back (SAVE_FLASHINFER_AOT=1 in device_compare.sh: the
# parts flashinfer-aot-VERSION-ARCH.tgz.NN) and, copied here into a folder
# the .kit* rule of .gitignore keeps out of git (mkdir -p .kitfi && cp
# FILES_AT/flashinfer-aot-* .kitfi/), become an add-on of prebuilt modules
# for the next fresh machine. Like every add-on it travels in a call of its
# own, after the call that carried the kit (INSTALL_ONLY=1 ... .kit BUDGET
# VARIANTS): .kit and .kitfi together with the working tree pass the 64 MiB
# a call carries. That call may install it and measure at once (ADDON=.kitfi
# ... .kitfi BUDGET VARIANTS ...). A module the add-on lacks (another head
# dimension, dtype, mask mode) compiles as before.
AOT_PART_BYTES=${AOT_PART_BYTES:-15m}  # a part per file back (each at most 16 MiB)

flashinfer_aot_save() {  # flashinfer_aot_save WORK VERSION: the modules flashinfer
  # VERSION compiled under WORK's kernel caches (PAIRS copies' too), one of each
  # name, into $OUT_DIR/flashinfer-aot-VERSION-ARCH.tgz.NN, a set per GPU
  # architecture ARCH (e.g. 90a) they were built for
  local work=$1 version=$2 arch stage so name n prefix saved=0
  for arch in $(find "$work" -path "*/flashinfer/$version/*/cached_ops" -type d 2>/dev/null \
                | xargs -r -n1 dirname | xargs -r -n1 basename | sort -u); do
    stage=$(mktemp -d) || return 1
    while IFS= read -r so; do
      name=$(basename "$(dirname "$so")")
      # the module itself, not a library its build dropped beside it
      [ "$(basename "$so")" = "$name.so" ] || continue
      [ -e "$stage/$name/$name.so" ] && continue
      mkdir -p "$stage/$name" && cp "$so" "$stage/$name/" || { rm -rf "$stage"; return 1; }
    done < <(find "$work" -path "*/flashinfer/$version/$arch/cached_ops/*/*.so" -type f | sort)
    n=$(find "$stage" -name '*.so' | wc -l)
    if [ "$n" = 0 ]; then rm -rf "$stage"; continue; fi
    prefix="$OUT_DIR/flashinfer-aot-$version-$arch.tgz."
    rm -f "$prefix"*
    tar czf - -C "$stage" . | split -b "$AOT_PART_BYTES" -d - "$prefix" \
      || { rm -rf "$stage"; return 1; }
    rm -rf "$stage"; saved=$((saved + n))
    log "flashinfer $version: $n module(s) for $arch -> $(cd "$OUT_DIR" && ls "$(basename "$prefix")"* | tr '\n' ' ')"
    # a call's files back are at most eight (the results, its log, env.txt and
    # the server logs take four)
    [ "$(ls "$prefix"* | wc -l)" -le 4 ] \
      || log "WARNING: more than 4 parts; files back are at most 8 a call, some will stay behind"
  done
  [ "$saved" -gt 0 ] \
    || log "no flashinfer $version modules under $work (module caches there:" \
           "$(find "$work" -path '*/flashinfer/*/*/cached_ops' -type d 2>/dev/null | tr '\n' ' '))"
}

flashinfer_aot_install() {  # flashinfer_aot_install ADDON SITE...: the prebuilt modules
  # of ADDON (flashinfer-aot-VERSION-ARCH.tgz.NN) into the flashinfer package of
  # each site whose flashinfer is VERSION, once a package (derived sites link
  # to the base site's), where the GPU is of ARCH
  local addon=$1 site parts p version arch have dest name gpu; shift
  name=$(basename "$addon")
  parts=("$addon"/flashinfer-aot-*.tgz.*)
  [ -e "${parts[0]}" ] || { log "ERROR: no flashinfer modules in $addon"; return 1; }
  version=$(basename "${parts[0]}"); version=${version#flashinfer-aot-}; version=${version%.tgz.*}
  arch=${version##*-}; version=${version%-*}
  for p in "${parts[@]}"; do  # one module set an add-on: one version, one arch
    case $(basename "$p") in "flashinfer-aot-$version-$arch.tgz."*) ;;
      *) log "ERROR: $addon holds modules of more than one flashinfer or arch"; return 1 ;;
    esac
  done
  if command -v nvidia-smi > /dev/null 2>&1; then
    gpu=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1)
    gpu=${gpu//./}
    case $arch in "$gpu"|"$gpu"a) ;;
      *) log "skip $name: modules for $arch, the GPU is ${gpu:-unknown}"; return 0 ;;
    esac
  fi
  for site in "$@"; do
    [ -d "$site/flashinfer" ] || continue
    have=$(site_version "$site" flashinfer_python)
    [ "$have" = "$version" ] || { log "skip $name for $site: flashinfer ${have:-missing} there, $version in the add-on"; continue; }
    dest=$(realpath "$site/flashinfer")/data/aot
    [ -f "$dest/.addon-$name" ] && { log "reuse $name in $site"; continue; }
    mkdir -p "$dest" && cat "${parts[@]}" | tar xzf - -C "$dest" || return 1
    touch "$dest/.addon-$name"
    log "installed $(find "$dest" -name '*.so' | wc -l) prebuilt flashinfer module(s) into $site"
  done
}

side_by_side_kv() {  # side_by_side_kv MIB K [KV_TOKENS]: each server's fixed KV pool
  # (tokens) when K servers share one card of MIB MiB. By default 80% of the
  # card over K, less ~7 GiB of weights, graphs and work space, at 72 KiB a
  # token (the small preset's target + draft KV), at most 400k tokens, the
  # same on every card; a card too small for that (under 50k tokens each) is
  # refused. KV_TOKENS=N is that pool instead, as given, for a model the rule
  # does not fit (llama-8b-shape: ~17 GB of weights, 132 KiB of KV a token)
  local mib=$1 k=$2 given=$3 kv
  if [ -n "$given" ]; then
    [[ "$given" =~ ^[1-9][0-9]*$ ]] || { log "ERROR: KV_TOKENS=$given is not a token count" >&2; return 1; }
    echo "$given"; return 0
  fi
  kv=$(( (mib * 8 / 10 / k - 7000) * 1024 / 72 ))
  [ "$kv" -gt 400000 ] && kv=400000
  [ "$kv" -gt 50000 ] || { log "ERROR: no room for $k servers on $mib MiB" >&2; return 1; }
  echo "$kv"
}

PROBE_FILES="sitecustomize.py host_time.py startup_stacks.py"

probe_site() {  # probe_site SITE COPY: a hard-linked copy of SITE with the project's
  # probes (benchmark/probes/) beside it, so the servers measured from SITE never load them.
  # An earlier call's copy stays (a server kept from that call, KEEP_SERVERS, runs from it)
  # when it links to this SITE's files and holds these very probes; else it is made anew.
  local site=$1 copy=$2 f same=1
  if [ -f "$site/.kit-installed" ] && [ -f "$copy/.kit-installed" ] && \
     [ "$(stat -c %i "$site/.kit-installed")" = "$(stat -c %i "$copy/.kit-installed")" ]; then
    for f in $PROBE_FILES; do cmp -s "benchmark/probes/$f" "$copy/$f" || same=0; done
  else
    same=0
  fi
  [ $same = 1 ] && { log "reuse $copy"; return 0; }
  rm -rf "$copy" && cp -al "$site" "$copy" || return 1
  share_site "$site" "$copy" || return 1  # the copy's kernels compile where the site's do
  for f in $PROBE_FILES; do cp "benchmark/probes/$f" "$copy/" || return 1; done
}

# what one file back from the device may hold (16 MiB, less a margin)
PROFILES_MAX_BYTES=${PROFILES_MAX_BYTES:-15000000}

profile_dirs() {  # profile_dirs WORK: WORK's trace folders (e2e --profile-steps),
  # one a line, relative to WORK: profiles (one run) and pair<i>/profiles (the
  # copies of PAIRS, whose traces share names, so each keeps its folder)
  (cd "$1" 2>/dev/null && shopt -s nullglob \
    && for d in profiles pair*/profiles; do [ -d "$d" ] && echo "$d"; done)
}

pack_profiles() {  # pack_profiles WORK: WORK's traces (profile_dirs) into $OUT_DIR
  # profiles.tgz, all traces in one file where they fit; else the GPU-only
  # traces there and the stack traces in profiles-stack.tgz, or those of
  # rank 0 only, or none: each file back must stay under its limit, and a
  # call returns at most 8 files (probe.tgz, where there is one, takes the 8th)
  local work=$1 dirs=()
  mapfile -t dirs < <(profile_dirs "$work")
  [ ${#dirs[@]} -gt 0 ] || return 0
  (cd "$work" && tar czf "$OUT_DIR/profiles.tgz" "${dirs[@]}")
  fits "$OUT_DIR/profiles.tgz" && return 0
  # GPU-only traces: <tag>-c<C>-gpu.trace.json.gz, per rank -gpu-rank<R> at --tp > 1
  tar_traces "$work" "$OUT_DIR/profiles.tgz" '*-gpu.trace.json.gz' '*-gpu-rank*.trace.json.gz'
  if [ -e "$OUT_DIR/probe.tgz" ]; then
    log "profiles.tgz too big: GPU-only traces only (probe.tgz takes the last file back)"
    return 0
  fi
  if tar_traces "$work" "$OUT_DIR/profiles-stack.tgz" '*-stack*.trace.json.gz' \
      && fits "$OUT_DIR/profiles-stack.tgz"; then
    log "profiles.tgz too big: GPU-only traces there, the stack traces in profiles-stack.tgz"
  elif tar_traces "$work" "$OUT_DIR/profiles-stack.tgz" '*-stack.trace.json.gz' \
      '*-stack-rank0.trace.json.gz' && fits "$OUT_DIR/profiles-stack.tgz"; then
    log "profiles.tgz too big: GPU-only traces there, rank 0's stack traces in profiles-stack.tgz"
  else
    rm -f "$OUT_DIR/profiles-stack.tgz"
    log "profiles.tgz too big: GPU-only traces only (the stack traces do not fit one file)"
  fi
}

fits() {  # fits FILE: small enough to come back from the device
  [ "$(stat -c %s "$1")" -lt "$PROFILES_MAX_BYTES" ]
}

tar_traces() {  # tar_traces WORK TGZ PATTERN...: each trace folder's PATTERN...
  # (profile_dirs) into TGZ; fails where no trace matches
  local work=$1 tgz=$2 dirs=(); shift 2
  rm -f "$tgz"
  mapfile -t dirs < <(profile_dirs "$work")
  (cd "$work" && shopt -s nullglob && traces=() \
    && for d in "${dirs[@]}"; do for g in "$@"; do traces+=("$d"/$g); done; done \
    && [ ${#traces[@]} -gt 0 ] && tar czf "$tgz" "${traces[@]}")
}

tar_logs() {  # tar_logs WORK: the server and bench logs under WORK, one folder deep
  # included (copies of a run in WORK/<name>/), into $OUT_DIR/server-logs.tgz.
  # Only those written since budget_start: a warm machine keeps WORK, and an
  # earlier call's logs (other variants, hours older) came back mixed with
  # this call's. A server kept from an earlier call (KEEP_SERVERS) and measured
  # again writes its log now, so that one comes too. Without budget_start, all.
  # From 1 s before T0: date +%s truncates, and file times come from a
  # coarser clock, so a log written at once could look older than T0.
  local since=()
  [ -n "$T0" ] && since=(-newermt "@$(( T0 - 1 ))")
  rm -f "$OUT_DIR/server-logs.tgz"
  # no log of this call: no file back (and no error: tar refuses an empty archive)
  (cd "$1" && mapfile -d '' logs < <(find . -maxdepth 2 -name '*.log' "${since[@]}" -print0) \
    && if [ ${#logs[@]} -gt 0 ]; then tar czf "$OUT_DIR/server-logs.tgz" "${logs[@]}"
       else log "no logs of this call under $1"; fi)
}
