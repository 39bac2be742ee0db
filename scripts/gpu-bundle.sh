#!/usr/bin/env bash
# Packs what `scripts/gpu-check.sh --prebuilt` needs on a GPU machine that
# cannot build trainmem (no LLVM/MLIR 22, no OpenBLAS or GoogleTest, no
# network: the lent H200 image, which has the CUDA toolkit and its
# libraries): the CUDA test binary, the CUDA benchmark and the shared
# libraries they load that such an image lacks (OpenBLAS, OpenMPI's, ...;
# not glibc, libstdc++ or CUDA's own), into .gpu/bundle.tar.xz (ignored by
# git; carry it with the run). Builds them first.
# Usage: scripts/gpu-bundle.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${TRAINMEM_BUILD_DIR:-$root/build}"
bash "$root/scripts/build.sh" CudaTests trainmem-bench-cuda >/dev/null
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
cp "$build/unittests/CudaTests" "$build/bin/trainmem-bench-cuda" "$stage/bin/"
for lib in $(ldd "$stage"/bin/* | awk '/=>/ {print $3}' | sort -u); do
  case "$(basename "$lib")" in
  libc.so.* | libm.so.* | libdl.so.* | librt.so.* | libpthread.so.* | \
    libgcc_s.so.* | libstdc++.so.* | libcublas* | libcudart* | libnccl*) ;;
  *) cp -L "$lib" "$stage/lib/" ;;
  esac
done
mkdir -p "$root/.gpu"
tar -C "$stage" -cf - bin lib | xz -9 -T0 >"$root/.gpu/bundle.tar.xz"
echo "gpu-bundle: $root/.gpu/bundle.tar.xz ($(du -h "$root/.gpu/bundle.tar.xz" | cut -f1)): $(ls "$stage/bin" | tr '\n' ' ')+ $(ls "$stage/lib" | wc -l) libraries"
