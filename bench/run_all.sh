#!/usr/bin/env bash
# The figures of README's Performance section in one command: builds the two benchmarks, then
#   llm_bench      both GGUF models, 1 and 2 threads, beside llama.cpp and PyTorch + transformers
#                  (int8 activations, as llama.cpp), then both engines with a q8_0 K/V cache, then
#                  the default 24-bit path beside llama.cpp
#   convnet_bench  TAEF2 encoder/decoder and RDN x2, 1 and 2 threads, beside PyTorch
# each alternating rounds with its peers, and draws the chart (bench/plot.py).
#
# Usage: bash bench/run_all.sh [RESULTS_DIR] [CHART.png]
#   defaults: bench/results and docs/performance.png. LLM_PEERS (default llama.cpp,torch) and
#   ROUNDS (default 3 for the LLMs; the conv nets run 5) override the obvious. Our LLM side runs
#   as llama.cpp does by default: int8 activations (TESSERA_LINEAR, default int8 here) and an f16
#   K/V cache (KV, default f16).
# Creates .venv with the peers and matplotlib first (scripts/bench_venv.sh, ~15 minutes the
# first time); a peer that still fails to import is skipped with a message.
. "$(dirname "$0")/../scripts/usage.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results}
chart=${2:-docs/performance.png}
mkdir -p "$out" "$(dirname "$chart")"
bash scripts/fetch_models.sh
bash scripts/bench_venv.sh || echo "[run_all] .venv incomplete: missing peers are skipped" >&2
[ -f build/build.ninja ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j2 --target llm_bench convnet_bench
{
  grep -m1 "model name" /proc/cpuinfo | sed 's/.*: //'
  echo "$(nproc) cores, load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out/machine.txt"
TESSERA_LINEAR="${TESSERA_LINEAR:-int8}" ./build/llm_bench --rounds "${ROUNDS:-3}" --kv "${KV:-f16}" \
  --peers "${LLM_PEERS:-llama.cpp,torch}" \
  models/SmolLM2-135M-Instruct.Q4_1.gguf models/gemma-3-270m-q4_k_m.gguf | tee "$out/llm.txt"
# Both engines with a q8_0 K/V cache (llama.cpp with flash attention, which a quantised V needs):
# README's third table.
TESSERA_LINEAR="${TESSERA_LINEAR:-int8}" ./build/llm_bench --rounds "${ROUNDS:-3}" --kv q8_0 --peers llama.cpp \
  models/SmolLM2-135M-Instruct.Q4_1.gguf models/gemma-3-270m-q4_k_m.gguf | tee "$out/llm_q8_kv.txt"
# The default path (24-bit activations, TESSERA_LINEAR unset) beside llama.cpp: README's second table.
env -u TESSERA_LINEAR ./build/llm_bench --rounds "${ROUNDS:-3}" --kv "${KV:-f16}" --peers llama.cpp \
  models/SmolLM2-135M-Instruct.Q4_1.gguf models/gemma-3-270m-q4_k_m.gguf | tee "$out/llm_default.txt"
./build/convnet_bench | tee "$out/convnet.txt"
echo "load average at end $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/machine.txt"
if .venv/bin/python -c "import matplotlib" 2>/dev/null; then
  .venv/bin/python bench/plot.py "$out" "$chart"
else
  echo "no matplotlib in .venv: no chart" >&2
fi
