#!/usr/bin/env bash
# Sets the machine up (once), configures (once) and builds trainmem.
# Usage: scripts/build.sh [ninja targets...]
# (TRAINMEM_BUILD_DIR: the build directory; TRAINMEM_CMAKE_ARGS: more
# arguments for the first configuration, e.g. -DCMAKE_CUDA_ARCHITECTURES=90)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/setup.sh"
build="${TRAINMEM_BUILD_DIR:-$root/build}"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
    -DMLIR_LINK_MLIR_DYLIB=ON \
    -DLLVM_USE_LINKER=lld ${TRAINMEM_CMAKE_ARGS:-}
fi
jobs="${TRAINMEM_JOBS:-$(nproc)}"
ninja -C "$build" -j "$jobs" "$@"
