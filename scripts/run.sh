#!/usr/bin/env bash
# The main job: sets the machine up, builds, writes the GPT-2 124M graph,
# turns it into a training step (train-autodiff) and prints the step's memory
# report (peak, breakdown, saved activations per layer, FLOPs).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${TRAINMEM_BUILD_DIR:-$root/build}"
bash "$root/scripts/build.sh" trainmem-opt trainmem-model >/dev/null
preset="${1:-gpt2-124m}"
echo "== ${preset}: training step (AdamW, mixed precision), memory report =="
"$build/bin/trainmem-model" --preset "$preset" |
  "$build/bin/trainmem-opt" -train-autodiff -train-memory-report -o /dev/null
