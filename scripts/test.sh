#!/usr/bin/env bash
# Sets the machine up, builds, then runs every lit and GoogleTest test:
# check-trainmem (quick) and check-trainmem-long, each timed; checks the
# format of the lines changed since .ci/format-base
# (scripts/check-format.sh); then configures, builds and tests the runtime alone, with no
# LLVM or MLIR on its include path and without the CUDA backend (BackendTest
# then checks that `cuda` is refused by name); then installs trainmem into a
# scratch prefix and builds and tests the out-of-tree pass plugin
# (examples/memory-plugin) against the installed package.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/build.sh"
build="${TRAINMEM_BUILD_DIR:-$root/build}"
jobs="${TRAINMEM_JOBS:-$(nproc)}"
# The quick suite, then the long end-to-end tests (test/long-tests.txt),
# each timed.
for suite in check-trainmem check-trainmem-long; do
  start=$SECONDS
  ninja -C "$build" -j "$jobs" "$suite"
  echo "test.sh: $suite took $((SECONDS - start)) s"
done
# The lines changed since .ci/format-base as clang-format writes them.
bash "$root/scripts/check-format.sh"

alone="$build/runtime-alone"
# (Without the CUDA backend: the main build has it, so this one checks
# that the runtime builds without it and refuses `cuda` by name.)
cmake -S "$root/runtime" -B "$alone" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
  -DTRAINMEM_ENABLE_CUDA=OFF >/dev/null
if grep -E -q -e '-I ?[^ ]*(llvm|mlir)' "$alone/compile_commands.json"; then
  echo "test.sh: the runtime alone has LLVM or MLIR on its include path" >&2
  exit 1
fi
ninja -C "$alone" -j "$jobs"
ctest --test-dir "$alone" --output-on-failure

# The installed package: the example plugin finds it with find_package,
# builds against its headers and is loaded into its trainmem-opt.
prefix="$build/install-test"
plugin="$build/memory-plugin"
rm -rf "$prefix" "$plugin"
cmake --install "$build" --prefix "$prefix" >/dev/null
# docs/WritingAPass.md's table names every tool and library installed.
for installed in "$prefix"/bin/* "$prefix"/lib/lib*.a; do
  name="$(basename "$installed" .a)"
  name="${name#lib}"
  if ! grep -q "\`$name\`" "$root/docs/WritingAPass.md"; then
    echo "test.sh: docs/WritingAPass.md's install table does not name $name" >&2
    exit 1
  fi
done
cmake -S "$root/examples/memory-plugin" -B "$plugin" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
  -DTrainmem_DIR="$prefix/lib/cmake/trainmem" >/dev/null
ninja -C "$plugin" -j "$jobs" check-plugin
# A plugin configures and builds where neither MPI nor the CUDA toolkit is
# found: they are the runtime's, optional unless COMPONENTS Runtime.
bare="$build/memory-plugin-bare"
rm -rf "$bare"
cmake -S "$root/examples/memory-plugin" -B "$bare" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
  -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON \
  -DTrainmem_DIR="$prefix/lib/cmake/trainmem" >/dev/null
ninja -C "$bare" -j "$jobs"
