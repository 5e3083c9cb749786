#!/bin/sh
# Issue 34's map figures: thor's Map<u64, u64> (bench/map, `map-bench thor`), LMDB through heed
# (`map-bench lmdb`, the embedded peer) and ZODB/ZEO (bench/zodb/map.py, OOBTree), one sitting.
# Raw outputs: one JSON object per run in raw/<engine>.jsonl (1 M keys) and
# raw/<engine>-100k.jsonl (100 k keys, where ZODB ran); `python3 summarize.py` makes the tables.
#
#   RUNS=3 SMALL_RUNS=3 docs/results/map/run.sh
# OUT=<dir> writes another sitting's raw records there (summarize.py reads them with RAW=<dir>).
#
# ZODB at 1 M keys is left out unless ZODB_1M=1: its load alone ran over 11 minutes here and was
# stopped (README.md). The ZODB venv:
#   python3 -m venv /tmp/zodb-map-venv && /tmp/zodb-map-venv/bin/pip install -r bench/zodb/requirements.txt
set -eu
cd "$(dirname "$0")/../../.."
RUNS=${RUNS:-3}
SMALL_RUNS=${SMALL_RUNS:-3}
ZODB_1M=${ZODB_1M:-0}
PY=${PY:-/tmp/zodb-map-venv/bin/python}
OUT=${OUT:-docs/results/map/raw}
ARGS="--n 1000000 --batch 1000 --lookups 1000000 --clients 8 --conc-inserts 20000 --conc-batch 100"
SMALL="--n 100000 --batch 1000 --lookups 100000 --clients 8 --conc-inserts 2000 --conc-batch 100"
mkdir -p "$OUT"
CARGO_INCREMENTAL=0 cargo build --release --locked -p map-bench
i=0
while [ "$i" -lt "$RUNS" ]; do
    ./target/release/map-bench lmdb $ARGS --json | tee -a "$OUT/lmdb.jsonl"
    ./target/release/map-bench thor $ARGS --json | tee -a "$OUT/thor.jsonl"
    if [ "$ZODB_1M" = 1 ]; then
        "$PY" bench/zodb/map.py $ARGS --json | tee -a "$OUT/zodb.jsonl"
    fi
    i=$((i + 1))
done
i=0
while [ "$i" -lt "$SMALL_RUNS" ]; do
    ./target/release/map-bench lmdb $SMALL --json | tee -a "$OUT/lmdb-100k.jsonl"
    ./target/release/map-bench thor $SMALL --json | tee -a "$OUT/thor-100k.jsonl"
    "$PY" bench/zodb/map.py $SMALL --json | tee -a "$OUT/zodb-100k.jsonl"
    i=$((i + 1))
done
