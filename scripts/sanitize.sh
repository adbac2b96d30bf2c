#!/usr/bin/env bash
# Builds the test suite with sanitizers in its own build folder and runs it. Usage:
#   bash scripts/sanitize.sh asan [ctest -R regex]   AddressSanitizer + UndefinedBehaviorSanitizer
#   bash scripts/sanitize.sh tsan [ctest -R regex]   ThreadSanitizer (default: tests naming pool or thread)
# UBSan is fatal (-fno-sanitize-recover). Each mode builds in build-<mode>/ and prints its time.
# TESSERA_SANITIZE_TARGETS="test_reliability test_session" builds only those targets (the whole
# build takes long on a small machine) and runs those test binaries whole instead of ctest -R.
# Not part of .ci/run (too slow for it); exits non-zero when a test fails or a sanitizer reports.
. "$(dirname "$0")/usage.sh" "$@"
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
mode="${1:-}"
case "$mode" in
  asan)
    flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -O1"
    filter="${2:-.}"
    # allocator_may_return_null: an impossible allocation throws bad_alloc (which the pool turns
    # into an Error) instead of ASan aborting the process.
    export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:allocator_may_return_null=1" \
      UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    ;;
  tsan)
    flags="-fsanitize=thread -O1"
    filter="${2:-pool|thread}"
    export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
    ;;
  *)
    sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
bash scripts/setup.sh
bash scripts/fetch_models.sh
cmake -S . -B "build-$mode" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="${flags%% -O1}" -DCMAKE_SHARED_LINKER_FLAGS="${flags%% -O1}" >/dev/null
# shellcheck disable=SC2086
cmake --build "build-$mode" -j "$(nproc)" ${TESSERA_SANITIZE_TARGETS:+--target $TESSERA_SANITIZE_TARGETS}
start=$SECONDS
status=0
if [ -n "${TESSERA_SANITIZE_TARGETS:-}" ]; then
  # Each test binary built runs whole (doctest), from the repository root as under ctest.
  for t in $TESSERA_SANITIZE_TARGETS; do
    case "$t" in test_*) echo "== $t"; "build-$mode/$t" ;; esac
  done
else
  if [ "$mode" = asan ]; then
    # The GPU drivers the gpu tests load (PoCL, lavapipe) JIT-compile kernels with LLVM and leak
    # from that generated code, where LeakSanitizer can neither attribute nor suppress a report
    # (and it crashes walking PoCL's threads at exit): those tests run with leak detection off,
    # address and undefined-behaviour checks still on. Every other test checks leaks too.
    ctest --test-dir "build-$mode" --output-on-failure -j "$(nproc)" --timeout 3000 -R "$filter" -LE '^gpu$' || status=1
    ASAN_OPTIONS="${ASAN_OPTIONS/detect_leaks=1/detect_leaks=0}" \
      ctest --test-dir "build-$mode" --output-on-failure -j "$(nproc)" --timeout 3000 -R "$filter" -L '^gpu$' || status=1
  else
    ctest --test-dir "build-$mode" --output-on-failure -j "$(nproc)" --timeout 3000 -R "$filter"
  fi
fi
echo "sanitize $mode: tests took $((SECONDS - start)) s"
exit $status
