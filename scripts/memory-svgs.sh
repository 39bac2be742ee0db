#!/usr/bin/env bash
# Draws the README's memory timelines (train-memory-report format=svg):
# gpt2-124m (seq 1024, batch 8, bf16, AdamW) without and with selective
# recompute, into docs/images/. test/Docs/memory-svgs.test checks that the
# committed pictures are what this script draws now.
# Usage: scripts/memory-svgs.sh [OUTPUT_DIR]   (default docs/images)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${TRAINMEM_BIN:-$root/build/bin}"
out="${1:-$root/docs/images}"
mkdir -p "$out"
draw() { # name, train-step options
  "$bin/trainmem-model" --preset gpt2-124m |
    "$bin/trainmem-opt" -o /dev/null --pass-pipeline="builtin.module(train-step{$2},train-memory-report{format=svg output=$out/$1.svg})"
}
draw gpt2-124m-memory ""
draw gpt2-124m-memory-selective "remat={policy=selective}"
