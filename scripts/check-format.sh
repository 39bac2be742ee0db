#!/usr/bin/env bash
# The format check of changed lines: every C++/CUDA line that differs from
# the commit in .ci/format-base (the tree's format was not enforced before
# it) must be as clang-format (Debian's, with the repository's
# .clang-format) writes it. Lines nobody touched since are left as they are.
#   scripts/check-format.sh          check (non-zero exit and the diff if not)
#   scripts/check-format.sh --fix    rewrite the changed lines in place
# A clone without the base commit (a shallow one) cannot be checked: it
# says so and exits 0.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
base="$(tr -d '[:space:]' < .ci/format-base)"
extensions="c,cc,cpp,h,hpp,cu,cuh,inc"
if ! command -v clang-format >/dev/null || ! git clang-format -h >/dev/null 2>&1; then
  echo "check-format: clang-format (and git clang-format) not found: install Debian's clang-format" >&2
  exit 1
fi
if ! git cat-file -e "$base^{commit}" 2>/dev/null; then
  echo "check-format: the base commit $base is not in this clone (shallow?): format not checked"
  exit 0
fi
# git clang-format sees tracked files only: a new file is checked once it
# is added (git add), as CI's clone has it.
untracked="$(git ls-files --others --exclude-standard -- '*.c' '*.cc' '*.cpp' '*.h' '*.hpp' '*.cu' '*.cuh')"
if [ -n "$untracked" ]; then
  echo "check-format: not checked until added (git add): $untracked" >&2
fi
diff="$(git clang-format --diff --extensions "$extensions" "$base" 2>&1 || true)"
case "$diff" in
  *"no modified files to format"*|*"did not modify any files"*|"")
    echo "check-format: lines changed since ${base:0:12} are formatted"
    exit 0 ;;
esac
if [ "${1:-}" = "--fix" ]; then
  printf '%s\n' "$diff" | git apply
  echo "check-format: rewrote the changed lines clang-format formats otherwise"
  exit 0
fi
printf '%s\n' "$diff"
echo "check-format: lines changed since ${base:0:12} are not as clang-format writes them (above); scripts/check-format.sh --fix rewrites them" >&2
exit 1
