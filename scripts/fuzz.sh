#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/*_fuzz.cc) with clang -fsanitize=fuzzer,address,undefined
# in build-fuzz/ and runs each for the given time on its seed corpus and dictionary.
# Usage: bash scripts/fuzz.sh [target|all] [seconds per target]     (defaults: all, 60)
#   targets: gguf_fuzz tokenizer_fuzz region_fuzz differential_fuzz safetensors_fuzz png_fuzz
# Seeds (committed, never modified): fuzz/corpus/<name>/ and dictionaries fuzz/dict/<name>.dict
# (<name>: the target without _fuzz); what a run adds goes to
# build-fuzz/corpus/<target>/; findings (crash-*, leak-*, timeout-*, oom-*) to
# build-fuzz/findings/<target>/. Each finding becomes a regression test with its input committed
# under fuzz/regressions/<name>/ (replayed by tests/reliability/fuzz_regressions_test.cc).
# Exits non-zero when a target reports a finding.
. "$(dirname "$0")/usage.sh" "$@"
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
target="${1:-all}"
seconds="${2:-60}"
bash scripts/setup.sh
# clang and its sanitizer runtimes: only the fuzz build needs them.
if ! command -v clang++ >/dev/null || ! dpkg-query -W -f='${Status}' libclang-rt-dev 2>/dev/null | grep -q "install ok installed"; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq clang libclang-rt-dev
fi
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
flags="$flags -Wno-unknown-warning-option"  # the GCC-only -Wno-maybe-uninitialized of CMakeLists.txt
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTESSERA_FUZZ=ON \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
if [ "$target" = all ]; then
  targets=$(cd fuzz && ls *_fuzz.cc | sed 's/\.cc$//')
else
  targets="$target"
fi
# shellcheck disable=SC2086
cmake --build build-fuzz -j "$(nproc)" --target $targets
export ASAN_OPTIONS="allocator_may_return_null=1:detect_leaks=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
status=0
for t in $targets; do
  name="${t%_fuzz}"
  mkdir -p "build-fuzz/corpus/$t" "build-fuzz/findings/$t"
  dict=()
  [ -f "fuzz/dict/$name.dict" ] && dict=(-dict="fuzz/dict/$name.dict")
  seeds=()
  [ -d "fuzz/corpus/$name" ] && seeds=("fuzz/corpus/$name")
  echo "== $t for ${seconds}s"
  set +e
  "build-fuzz/$t" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="build-fuzz/findings/$t/" "${dict[@]}" "build-fuzz/corpus/$t" "${seeds[@]}" >"build-fuzz/$t.log" 2>&1
  rc=$?
  set -e
  grep -E "^#[0-9]+ +(INITED|DONE)|stat::number_of_executed_units|stat::peak_rss|ERROR|SUMMARY|Test unit written" \
    "build-fuzz/$t.log" || true
  if [ "$rc" -ne 0 ]; then
    echo "== $t: finding (see build-fuzz/$t.log, build-fuzz/findings/$t/)"
    status=1
  fi
done
exit $status
