#!/usr/bin/env bash
# Sets the machine up, builds, then runs every lit and GoogleTest test
# through the one check-trainmem target.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/build.sh" check-trainmem
