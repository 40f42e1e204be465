#!/usr/bin/env bash
# Fuzz every importer (and the operator-table reader) for SECONDS each (default 600), restarting after a crash
# until the time is used up.
# Prints one line per importer: executions, crashes (saved under OUT/FMT/crash-*), wall seconds.
# Usage: fuzz/run_all.sh [SECONDS] [OUT]   (run from the repository root; nice it on a shared machine)
set -u
SECONDS_EACH=${1:-600}
OUT=${2:-fuzz-out}
mkdir -p "$OUT"
for fmt in mooncake azure burstgpt agent optables; do
  mkdir -p "$OUT/$fmt/corpus" "$OUT/$fmt/art"
  start=$(date +%s); runs=0; crashes=0
  while :; do
    left=$(( SECONDS_EACH - ($(date +%s) - start) ))
    [ "$left" -le 5 ] && break
    python3 fuzz/fuzz_importers.py "$fmt" -max_total_time="$left" -max_len=8192 -len_control=0 -rss_limit_mb=4096 \
      -artifact_prefix="$OUT/$fmt/art/" "$OUT/$fmt/corpus" > "$OUT/$fmt/log.txt" 2>&1
    rc=$?
    n=$(grep -Eo 'Done [0-9]+ runs' "$OUT/$fmt/log.txt" | grep -Eo '[0-9]+' | tail -1)
    runs=$(( runs + ${n:-0} ))
    if [ "$rc" -ne 0 ]; then
      crashes=$(( crashes + 1 )); cp "$OUT/$fmt/log.txt" "$OUT/$fmt/crash-log-$crashes.txt"
    else
      break
    fi
  done
  echo "$fmt: runs>=$runs crashes=$crashes wall_s=$(( $(date +%s) - start ))"
done
