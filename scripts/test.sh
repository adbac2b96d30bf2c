#!/usr/bin/env bash
# Builds everything with warnings as errors and runs the whole test suite (CTest), including
# the real-model tests (the models are fetched once into models/). Exits non-zero when any
# test fails. TESSERA_FUZZ_SECONDS=N then also runs every libFuzzer target for N seconds
# (scripts/fuzz.sh: its own clang + sanitizer build, a few extra minutes); off by default, 10 s
# per target under CI (CI=true), where a finding fails the run like a failing test.
# Usage: bash scripts/test.sh
. "$(dirname "$0")/usage.sh" "$@"
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
bash scripts/fetch_models.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_WERROR=ON >/dev/null
cmake --build build -j "$(nproc)"
./build/list_backends  # the devices the GPU tests run on, named in the log
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 1500
if [ -z "${TESSERA_FUZZ_SECONDS:-}" ] && [ "${CI:-}" = true ]; then
  TESSERA_FUZZ_SECONDS=10
fi
if [ -n "${TESSERA_FUZZ_SECONDS:-}" ] && [ "$TESSERA_FUZZ_SECONDS" != 0 ]; then
  bash scripts/fuzz.sh all "$TESSERA_FUZZ_SECONDS"
fi
