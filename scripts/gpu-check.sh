#!/usr/bin/env bash
# The prepared GPU check (issue 17), one run of at most 8 minutes on a
# machine with an NVIDIA GPU and this project's build prerequisites
# (scripts/setup.sh's packages, the CUDA toolkit under /usr/local/cuda):
#  1. builds trainmem with the CUDA backend for this GPU's architecture;
#  2. runs the CUDA test subset: CudaTests (every device case must run, none
#     may skip) and the lit tests that need cuda or cuda-device;
#  3. trains `tiny` for 50 steps on the GPU and on the CPU, f32 and bf16,
#     and compares every step's loss (f32 within 1e-4 relative, bf16 within
#     1e-2), and checks the device arena's measured peak == the plan; and
#     f32 with the optimizer state offloaded (--offload-optimizer states):
#     the same losses, the host arena's peak == its plan;
#  4. runs the benchmarks: the fused 8-bit AdamW against a device copy,
#     bf16 GEMMs against cuBLAS's own call, and a gpt2-124m bf16 step (seq
#     1024, batch 8): step time, model FLOP utilization, peak vs plan;
# and prints one table. Exits non-zero when a check fails.
#
# On a GPU machine that cannot build trainmem (the lent H200 image: no
# LLVM/MLIR 22, no network), `--prebuilt .gpu/bundle.tar.xz` (made here by
# scripts/gpu-bundle.sh, carried with the run) runs steps 2 and 4's kernel
# parts from the bundle: CudaTests and trainmem-bench-cuda; the lit tests,
# the training runs and the gpt2 step need the full build and are listed
# as not run.
#
# Usage: scripts/gpu-check.sh [--prebuilt BUNDLE]
#        (TRAINMEM_GPU_BUILD_DIR: build directory,
#        default build-gpu; GPU_PEAK_TFLOPS: the GPU's dense bf16 peak for
#        the utilization, default by its name: H100/H200 989, A100 312,
#        B200 2250 — NVIDIA's data sheets)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
prebuilt=""
if [ "${1:-}" = "--prebuilt" ]; then
  prebuilt="$(realpath "${2:?--prebuilt needs the bundle}")"
fi
build="${TRAINMEM_GPU_BUILD_DIR:-$root/build-gpu}"
corpus="$root/data/kjv-genesis-exodus.txt"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
rows=()
failed=0
row() { rows+=("$(printf '%-44s %s' "$1" "$2")"); }
bad() { row "$1" "FAIL: $2"; failed=1; }

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU answers here (nvidia-smi -L)" >&2
  exit 2
fi
gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
cc="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)"
echo "gpu-check: $gpu (sm_$cc)"

# 1. Build, for this GPU's architecture (or unpack the bundle).
if [ -n "$prebuilt" ]; then
  mkdir -p "$work/pre"
  tar -C "$work/pre" -xJf "$prebuilt"
  nccl="$(find /usr /opt -name 'libnccl.so.2' 2>/dev/null | head -1 || true)"
  export LD_LIBRARY_PATH="$work/pre/lib:/usr/local/cuda/lib64${nccl:+:$(dirname "$nccl")}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  row "build" "prebuilt bundle ($(basename "$prebuilt"))"
  cudatests="$work/pre/bin/CudaTests"
  bin="$work/pre/bin"
else
  TRAINMEM_BUILD_DIR="$build" TRAINMEM_CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=$cc" \
    bash "$root/scripts/build.sh" >"$work/build.txt" 2>&1 || {
    tail -20 "$work/build.txt" >&2
    echo "gpu-check: the build failed" >&2
    exit 1
  }
  if [ ! -x "$build/bin/trainmem-bench-cuda" ]; then
    echo "gpu-check: the build has no CUDA backend (nvcc not found?)" >&2
    exit 1
  fi
  row "build (sm_$cc)" "ok, $((SECONDS - start)) s"
  bin="$build/bin"
  cudatests="$build/unittests/CudaTests"
fi

# 2. The CUDA test subset.
if "$cudatests" --gtest_brief=1 >"$work/cudatests.txt" 2>&1; then
  if grep -q "SKIPPED" "$work/cudatests.txt"; then
    bad "CudaTests" "$(grep -o 'SKIPPED \] [0-9]* tests\?' "$work/cudatests.txt" |
      sed 's/SKIPPED \] //') skipped: $(grep -m1 -A1 'Skipped$' "$work/cudatests.txt" | tail -1)"
  else
    row "CudaTests" "ok, $(grep -o 'PASSED.*' "$work/cudatests.txt" | tail -1)"
  fi
else
  bad "CudaTests" "$(grep -m3 'Failure\|FAILED' "$work/cudatests.txt" | tr '\n' ' ')"
fi
if [ -n "$prebuilt" ]; then
  row "lit (cuda, cuda-device)" "not run: needs the full build"
else
  if /usr/lib/llvm-22/bin/lit -q "$build/test" --filter 'cuda' \
    >"$work/lit.txt" 2>&1; then
    row "lit (cuda, cuda-device)" "ok"
  else
    bad "lit (cuda, cuda-device)" "$(grep -m3 FAIL "$work/lit.txt" | tr '\n' ' ')"
  fi
fi

# 3. tiny, 50 steps, GPU against CPU.
if [ -n "$prebuilt" ]; then
  row "tiny f32/bf16: losses GPU vs CPU, peak" "not run: needs the full build"
else
  for dtype in f32 bf16; do
    "$bin/trainmem-model" --preset tiny --dtype "$dtype" -o "$work/tiny-$dtype.mlir"
    for backend in cpu cuda; do
      "$bin/trainmem-run" "$work/tiny-$dtype.mlir" --data "$corpus" --steps 50 \
        --backend "$backend" --threads=4 --loss-log "$work/$dtype-$backend.log" \
        >"$work/$dtype-$backend.out" 2>&1 || true
    done
    tolerance=$([ "$dtype" = f32 ] && echo 1e-4 || echo 1e-2)
    if ! grep -q "^step 50 " "$work/$dtype-cuda.log" 2>/dev/null; then
      bad "tiny $dtype, 50 steps on the GPU" "$(tail -2 "$work/$dtype-cuda.out" | tr '\n' ' ')"
      continue
    fi
    worst="$(python3 "$root/test/tools/trainmem-run/Inputs/same-losses.py" \
      "$work/$dtype-cpu.log" "$work/$dtype-cuda.log" 1 | sed -E 's/.*difference //')"
    if python3 -c "import sys; sys.exit(0 if float('$worst') <= $tolerance else 1)"; then
      row "tiny $dtype: 50 losses GPU vs CPU" "worst relative $worst (<= $tolerance)"
    else
      bad "tiny $dtype: 50 losses GPU vs CPU" "worst relative $worst (> $tolerance)"
    fi
    arena="$(grep '^arena: planned' "$work/$dtype-cuda.out")"
    planned="$(echo "$arena" | sed -E 's/arena: planned ([0-9]+) B.*/\1/')"
    measured="$(echo "$arena" | sed -E 's/.*measured peak ([0-9]+) B.*/\1/')"
    if [ -n "$planned" ] && [ "$planned" = "$measured" ]; then
      row "tiny $dtype: device peak == plan" "$measured B"
    else
      bad "tiny $dtype: device peak == plan" "$arena"
    fi
  done
  # Offloaded optimizer state (what=states): the same losses as the GPU
  # without offload, both arenas measured equal to their plans.
  "$bin/trainmem-run" "$work/tiny-f32.mlir" --data "$corpus" --steps 50 \
    --backend cuda --offload-optimizer states --loss-log "$work/offload.log" \
    >"$work/offload.out" 2>&1 || true
  host="$(grep '^host arena: planned' "$work/offload.out")"
  if cmp -s "$work/f32-cuda.log" "$work/offload.log" &&
     echo "$host" | grep -qE 'planned ([0-9]+) B, measured peak \1 B'; then
    row "tiny f32 offload=states on the GPU" "same losses; $host"
  else
    bad "tiny f32 offload=states on the GPU" "$(tail -2 "$work/offload.out" | tr '\n' ' ')"
  fi
fi

# 4. Benchmarks.
"$bin/trainmem-bench-cuda" adamw8bit >"$work/adamw.txt" 2>&1 || true
row "8-bit AdamW vs device copy (goal >= 0.8)" \
  "$(grep -o 'ratio [0-9.]*' "$work/adamw.txt" || tail -1 "$work/adamw.txt")"
"$bin/trainmem-bench-cuda" gemm >"$work/gemm.txt" 2>&1 || true

if [ -n "$prebuilt" ]; then
  row "gpt2-124m bf16 step (seq 1024, batch 8)" "not run: needs the full build"
else
  "$bin/trainmem-model" --preset gpt2-124m --dtype bf16 --seq 1024 --batch 8 \
    -o "$work/gpt2.mlir"
  "$bin/trainmem-opt" "$work/gpt2.mlir" --train-step \
    --train-memory-report=format=json -o /dev/null >"$work/gpt2.json" 2>&1
  "$bin/trainmem-run" "$work/gpt2.mlir" --data "$corpus" --steps 6 \
    --backend cuda >"$work/gpt2.out" 2>&1 || true
  case "$gpu" in
  *H100* | *H200*) peak=989 ;;
  *A100*) peak=312 ;;
  *B200*) peak=2250 ;;
  *) peak=0 ;;
  esac
  peak="${GPU_PEAK_TFLOPS:-$peak}"
  python3 "$root/scripts/gpu-step-summary.py" "$work/gpt2.json" \
    "$work/gpt2.out" "$peak" $((8 * 1024)) >"$work/gpt2.txt"
  row "gpt2-124m bf16 step (seq 1024, batch 8)" "$(cat "$work/gpt2.txt")"
fi

echo
echo "gpu-check on $gpu, $((SECONDS - start)) s"
printf '%s\n' "${rows[@]}"
echo
cat "$work/gemm.txt"
exit "$failed"
