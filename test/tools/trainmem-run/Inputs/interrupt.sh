#!/usr/bin/env bash
# Stops a long run with a signal once its loss log has 3 lines and reports
# what it left. usage: interrupt.sh RUNNER SIGNAL MODEL CORPUS DIR [options...]
# With INT or TERM the run checkpoints at the next step boundary and exits
# 128 + signal; with KILL only the last periodic checkpoint (--save-every)
# remains. Either way the checkpoint equals that of a run that stopped at
# its step, and the loss log holds one flushed line per finished step.
set -u
runner=$1 signal=$2 model=$3 corpus=$4 dir=$5
shift 5
rm -rf "$dir" && mkdir -p "$dir"
"$runner" "$model" --data "$corpus" --steps 1000000 --threads 1 \
  --save "$dir/ckpt" --loss-log "$dir/loss.log" "$@" 2>"$dir/err" &
pid=$!
for _ in $(seq 1200); do
  [ -f "$dir/loss.log" ] && [ "$(wc -l < "$dir/loss.log")" -ge 3 ] && break
  sleep 0.05
done
kill -"$signal" "$pid"
wait "$pid"
echo "exit $?"
grep -v '^step ' "$dir/err" || true
step=$(od -An -tu8 -j8 -N8 "$dir/ckpt/checkpoint.bin" | tr -d ' ')
lines=$(wc -l < "$dir/loss.log")
echo "checkpoint step $step, loss log $lines lines"
[ "$step" -ge 1 ] || { echo "no step saved"; exit 1; }
"$runner" "$model" --data "$corpus" --steps "$step" --threads 1 \
  --save "$dir/straight" "$@" 2>/dev/null >/dev/null
cmp "$dir/ckpt/checkpoint.bin" "$dir/straight/checkpoint.bin" &&
  echo "checkpoint equals a run of $step steps"
