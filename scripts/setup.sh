#!/usr/bin/env bash
# Installs the system packages the build needs (Debian 12), non-interactively and only when
# missing. Safe to run repeatedly.
# Usage: bash scripts/setup.sh
. "$(dirname "$0")/usage.sh" "$@"
set -euo pipefail
packages=(cmake ninja-build g++ pkg-config libabsl-dev libxxhash-dev doctest-dev nlohmann-json3-dev libpng-dev python3 python3-pip
          ocl-icd-opencl-dev opencl-headers pocl-opencl-icd libvulkan-dev mesa-vulkan-drivers glslang-dev glslang-tools)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi
