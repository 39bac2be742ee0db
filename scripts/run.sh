#!/usr/bin/env bash
# The main job: sets the machine up, builds, writes the GPT-2 124M graph and
# compiles it through the pipeline that exists so far, printing what the
# compiler can tell about it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${TRAINMEM_BUILD_DIR:-$root/build}"
bash "$root/scripts/build.sh" trainmem-opt trainmem-model >/dev/null
preset="${1:-gpt2-124m}"
echo "== ${preset}: forward + loss as train IR, verified and costed =="
"$build/bin/trainmem-model" --preset "$preset" |
  "$build/bin/trainmem-opt" -train-cost-report -o /dev/null
