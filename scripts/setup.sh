#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test trainmem.
# Idempotent: when every package is present it only runs dpkg queries.
set -euo pipefail

packages=(
  cmake ninja-build git
  clang-22 lld-22 llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
  libgtest-dev python3 python3-torch libopenblas-dev libopenmpi-dev openmpi-bin
  zlib1g-dev libzstd-dev libxml2-dev libedit-dev libffi-dev libcurl4-openssl-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
