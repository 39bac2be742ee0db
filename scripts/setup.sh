#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test trainmem.
# Idempotent: when every package is present it only runs dpkg queries.
set -euo pipefail

packages=(
  cmake ninja-build git clang-format
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

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
if [ ${#missing[@]} -ne 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Hugging Face transformers for trainmem-import, pinned: 4.44.2 is the
# newest that imports with Debian's torch 1.13 (4.51 needs
# torch.distributed.tensor). A venv that sees Debian's torch
# (--system-site-packages); trainmem-import runs under it when it exists.
# Without network the tests of Hugging Face models are skipped, said so.
venv="${TRAINMEM_PYTHON_VENV:-/opt/trainmem-python}"
transformers_version=4.44.2
if ! "$venv/bin/python3" -c "import transformers, sys; sys.exit(transformers.__version__ != '$transformers_version')" 2>/dev/null; then
  echo "setup: installing transformers==$transformers_version into $venv"
  if { [ -x "$venv/bin/python3" ] || $SUDO /usr/bin/python3 -m venv --system-site-packages "$venv"; } &&
     $SUDO "$venv/bin/pip" install -q --disable-pip-version-check "transformers==$transformers_version"; then
    :
  else
    echo "setup: warning: transformers==$transformers_version could not be installed into $venv; the tests of Hugging Face models will be reported unsupported" >&2
  fi
fi
