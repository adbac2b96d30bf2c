#!/usr/bin/env bash
# Creates .venv (git-ignored) with the benchmark peers and the chart's needs, from PyPI:
# torch (CPU use), transformers + accelerate + gguf (transformers loads GGUF files),
# llama-cpp-python (llama.cpp, built from its sdist for this CPU: about 10 minutes on 2 cores),
# matplotlib. (flux_bench's diffusers peer: `.venv/bin/pip install diffusers`.) Idempotent: a .venv whose python imports all of them is left alone.
# Not needed by the demo or the tests (their reference outputs are committed golden files).
# Usage: bash scripts/bench_venv.sh
. "$(dirname "$0")/usage.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
modules="torch transformers accelerate gguf llama_cpp matplotlib numpy safetensors"
check="import $(echo "$modules" | tr ' ' ',')"
if [ -x .venv/bin/python ] && .venv/bin/python -c "$check" 2>/dev/null; then
  echo "[bench_venv] .venv has every peer module"
  exit 0
fi
# python3 -m venv needs Debian's python3-venv when python3 is Debian's; the pyenv python on PATH
# has venv built in. A C/C++ toolchain and cmake build llama-cpp-python.
command -v cmake >/dev/null || { sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo; $sudo apt-get install -y -qq cmake; }
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q torch transformers accelerate gguf matplotlib numpy safetensors
.venv/bin/pip install -q llama-cpp-python
.venv/bin/python -c "$check"
echo "[bench_venv] .venv ready"
