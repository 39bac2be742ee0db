#!/bin/bash
# Refactoring aid: runs the regression tests of BUILD with every FileCheck
# input saved, then copies what the tests left in their Output folders
# (IR, reports, checkpoints) next to them, all under OUTDIR. Two builds'
# OUTDIRs compared with `diff -r` say whether a change kept the IR, the
# reports and the checkpoints of the existing tests' pipelines byte for
# byte (timings and temporary paths differ by nature).
# usage: scripts/capture-outputs.sh BUILD OUTDIR [LIT-ARGS...]
set -euo pipefail
build=$(realpath "$1")
out=$2
shift 2
rm -rf "$out"
mkdir -p "$out/filecheck" "$out/output"
out=$(realpath "$out")
find "$build/test" -type d -name Output -prune -exec rm -rf {} +
TRAINMEM_CAPTURE_DIR="$out/filecheck" /usr/lib/llvm-22/bin/lit -q \
  "$build/test" "$@" || echo "capture-outputs: some tests failed" >&2
cd "$build/test"
find . -path '*/Output/*' -type f | while read -r f; do
  mkdir -p "$out/output/$(dirname "$f")"
  cp "$f" "$out/output/$f"
done
