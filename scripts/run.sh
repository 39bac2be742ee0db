#!/usr/bin/env bash
# The main job: sets the machine up, builds, then
#  1. trains the tiny model on the shipped corpus (JIT-compiled step on the
#     CPU runtime) and prints the loss curve and planned vs measured arena;
#  2. prints the memory report of the tiny step and of GPT-2 124M's step,
#     and the latter with selective and full activation recompute.
# Usage: scripts/run.sh [PRESET] [STEPS]   (either order: a number is the
# steps of the tiny run, a name the preset of the second report; defaults
# gpt2-124m and 200; --dry-run prints what it would run and stops)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${TRAINMEM_BUILD_DIR:-$root/build}"
steps=200
preset=gpt2-124m
dry=0
for arg in "$@"; do
  case "$arg" in
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    --dry-run) dry=1 ;;
    *[!0-9]*|'') preset="$arg" ;;
    *) steps="$arg" ;;
  esac
done
if [ "$dry" = 1 ]; then
  echo "run.sh: tiny for $steps steps, then the reports of $preset"
  exit 0
fi
bash "$root/scripts/build.sh" trainmem-opt trainmem-model trainmem-run >/dev/null
if ! "$build/bin/trainmem-model" --list-presets | grep -qx "$preset"; then
  echo "run.sh: unknown preset '$preset'; the presets:" >&2
  "$build/bin/trainmem-model" --list-presets >&2
  exit 2
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "== tiny: ${steps} training steps on data/kjv-genesis-exodus.txt (AdamW, f32, CPU runtime) =="
"$build/bin/trainmem-model" --preset tiny -o "$work/tiny.mlir"
"$build/bin/trainmem-run" "$work/tiny.mlir" --data "$root/data/kjv-genesis-exodus.txt" \
  --steps "$steps" --save "$work/checkpoint"
echo
echo "== tiny: memory report of the step =="
"$build/bin/trainmem-opt" "$work/tiny.mlir" -train-autodiff -train-memory-report -o /dev/null
echo
echo "== ${preset}: memory report of the step (AdamW, mixed precision) =="
"$build/bin/trainmem-model" --preset "$preset" -o "$work/model.mlir"
"$build/bin/trainmem-opt" "$work/model.mlir" -train-autodiff -o "$work/step.mlir"
"$build/bin/trainmem-opt" "$work/step.mlir" -train-memory-report -o /dev/null
for policy in selective full; do
  echo
  echo "== ${preset}: the same step with train-remat{policy=${policy}} (peak, FLOPs, first layer) =="
  "$build/bin/trainmem-opt" "$work/step.mlir" -train-remat="policy=${policy}" \
    -train-materialize-remat -train-memory-report -o /dev/null |
    grep -E "^  (peak|flops)|^ +(layer|0) "
done
