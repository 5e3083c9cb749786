#!/bin/sh
# Three runs each with and without readCurrent; one JSON line per run in $OUT.
set -e
cd "$(dirname "$0")"
PY=.venv/bin/python
OUT=${OUT:-results/$(date +%Y-%m-%d).jsonl}
RUNS=${RUNS:-3}
mkdir -p "$(dirname "$OUT")"
for mode in --read-current --no-read-current; do
  for i in $(seq "$RUNS"); do
    $PY counters.py --clients 8 --seconds 10 $mode --json "$@" | tee -a "$OUT"
  done
done
$PY summarize.py "$OUT"
