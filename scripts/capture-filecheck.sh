#!/bin/bash
# Saves FileCheck's input under $TRAINMEM_CAPTURE_DIR, then runs FileCheck
# on it: test/lit.cfg.py puts this script in front of FileCheck when
# TRAINMEM_CAPTURE_DIR is set (scripts/capture-outputs.sh).
# usage: capture-filecheck.sh TEST-SOURCE FILECHECK ARGS...
set -euo pipefail
source=$1
filecheck=$2
shift 2
name=$(echo "${source#*/test/}" | tr '/' '_')
n=0
while [ -e "$TRAINMEM_CAPTURE_DIR/$name.$n" ]; do n=$((n + 1)); done
saved="$TRAINMEM_CAPTURE_DIR/$name.$n"
input=
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[$i]}" in
    --input-file=*) input=${args[$i]#--input-file=} ;;
    --input-file) input=${args[$((i + 1))]} ;;
  esac
done
if [ -n "$input" ]; then
  cp "$input" "$saved" 2>/dev/null || : > "$saved"
  exec "$filecheck" "$@"
fi
cat > "$saved"
exec "$filecheck" "$@" < "$saved"
