#!/usr/bin/env bash
# Main demo: fetches the two real models (once), builds, and streams completions token by token
# from SmolLM2-135M (Llama family) and Gemma-3-270M, then re-runs an edited prompt to show the
# unchanged prefix being reused. Extra arguments go to every llm_stream run.
# Usage: bash scripts/demo.sh [llm_stream arguments...]
. "$(dirname "$0")/usage.sh" "$@"
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
bash scripts/fetch_models.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target llm_stream tiny_decode diffusion_edit
echo "=== SmolLM2-135M-Instruct (Q4_1) ==="
./build/llm_stream --model models/SmolLM2-135M-Instruct.Q4_1.gguf --tokens 64 \
  --prompt "What is the capital of France? Answer in one sentence." \
  --edit "What is the capital of Germany? Answer in one sentence." "$@"
echo
echo "=== Gemma-3-270M (Q4_K_M) ==="
# This Gemma-3 270M file is the pretrained (base) model: it continues text, so no chat format.
./build/llm_stream --model models/gemma-3-270m-q4_k_m.gguf --tokens 64 --raw \
  --prompt "Once upon a time, in a small village by the sea," \
  --edit "Once upon a time, in a small village in the mountains," "$@"
echo
echo "=== Diffusion pipeline (text encoder, flow transformer with random weights, TAEF2, RDN x2) ==="
if [ -f ../shared/models/taesd/taef2_decoder.safetensors ] || [ -n "${TESSERA_CONV_MODELS:-}" ]; then
  ./build/diffusion_edit --out diffusion --steps 8
  ./build/diffusion_edit --edit diffusion.png --box 40,48,16,20 --fill 255,0,0 --out diffusion_edit
else
  echo "(skipped: the TAESD and RDN weights are not in ../shared/models; see tests/models/golden/README.md)"
fi
