#!/bin/bash
# Build a wheel kit (<= ~55 MiB) that runs sglang on an offline GPU machine
# (see benchmark/kit/README.md).
# Usage: benchmark/kit/build-kit.sh [WHEEL_LIST] [OUT_DIR]
#   A list line is NAME==VERSION, optionally followed by drop=PATTERN ... (files to leave out;
#   fnmatch on the archive name, a PATTERN ending in '/' a whole folder) and strip=PATTERN ...
#   (shared libraries whose debug sections go: binutils' strip).
#   WHEEL_LIST defaults to wheels-0.5.12.post1.txt beside this script;
#   OUT_DIR defaults to ./.kit/w (git-ignored; it travels to the GPU machine beside the repository).
# Downloads are cached in /tmp/sglang-kit-cache (KIT_CACHE), so a rebuild takes seconds.
#   build-kit.sh fa3 [OUT_DIR [WHEEL_LIST]]  builds the FA3 add-on instead (default OUT_DIR
#   .kitfa3/w): the sglang_kernel wheel of WHEEL_LIST (default wheels-0.5.12.post1.txt) with
#   flash_ops kept for head dim ${FA3_HDIM:-128} (~56 MB). It does not fit beside the kit in one
#   transfer: send .kit in one call, then .kitfa3 in the next call onto the same machine and
#   `pip install --no-index --no-deps --upgrade --target SITE .kitfa3/w/*.whl` into each site
#   whose sglang_kernel has the add-on's version (lib.sh addon_install).
#   Each upstream release pins another sglang_kernel, so it has an add-on of its own:
#   build-kit.sh fa3 .kitfa3-13/w benchmark/kit/wheels-0.5.13.txt (and -17, wheels-0.5.17.txt,
#   whose sglang_kernel line says fa3=no-fp8: its add-on leaves out the fp8 kernels to fit)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
FA3=
if [ "${1:-}" = fa3 ]; then
  FA3="--fa3-hdim ${FA3_HDIM:-128}"; DEST=${2:-.kitfa3/w}
  LIST=$(mktemp); grep '^sglang_kernel==' "${3:-$HERE/wheels-0.5.12.post1.txt}" > "$LIST" || {
    echo "build-kit: no sglang_kernel line in ${3:-$HERE/wheels-0.5.12.post1.txt}" >&2; exit 1; }
else
  LIST=${1:-$HERE/wheels-0.5.12.post1.txt}
  DEST=${2:-.kit/w}
fi
CACHE=${KIT_CACHE:-/tmp/sglang-kit-cache}  # downloads, kept between builds
mkdir -p "$CACHE" "$DEST"
PLAT="--platform manylinux_2_28_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_26_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any"
rm -f "$DEST"/*.whl
grep -v '^#' "$LIST" | grep -v '^$' | while read -r spec extra; do
  name=${spec%%==*}; ver=${spec##*==}
  drops=() strips=(); read -ra words <<< "${extra:-}"  # unglobbed
  for w in ${words[@]+"${words[@]}"}; do
    case $w in drop=*) drops+=("${w#drop=}") ;; strip=*) strips+=("${w#strip=}") ;; esac
  done
  norm=$(echo "$name" | tr '-' '_')
  f=$(ls "$CACHE"/${norm}-${ver}-*.whl 2>/dev/null | head -1 || true)
  if [ -z "$f" ]; then
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLAT -d "$CACHE" "$spec" 2>&1 | grep -v WARNING || true
    f=$(ls "$CACHE"/${norm}-${ver}-*.whl 2>/dev/null | head -1 || true)
  fi
  [ -n "$f" ] || { echo "build-kit: could not get $spec" >&2; exit 1; }
  case "$norm" in
    sglang_kernel)  # fa3=no-fp8 on its line: the add-on leaves out FA3's fp8 kernels
      case " ${extra:-} " in *" fa3=no-fp8 "*) [ -n "$FA3" ] && FA3="$FA3 --fa3-no-fp8" ;; esac
      python3 "$HERE/slim_sgl_kernel.py" "$f" "$DEST" --zero-foreign-cubins $FA3 >/dev/null ;;
    *) if [ $(( ${#drops[@]} + ${#strips[@]} )) -gt 0 ]; then
         python3 "$HERE/repack_wheel.py" "$f" "$DEST" --drop ${drops[@]+"${drops[@]}"} \
           --strip ${strips[@]+"${strips[@]}"} >/dev/null
       else cp "$f" "$DEST/"; fi ;;
  esac
done
echo "kit: $(ls "$DEST"/*.whl | wc -l) wheels, $(du -sh "$DEST" | cut -f1) in $DEST"
