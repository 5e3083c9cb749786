#!/bin/sh
# The map's read path alone (issue 34's lookups and scan): thor before and after a change of
# its read path, and LMDB, in one sitting, single-threaded (`map-bench --only`): a shared
# machine disturbs this less than the full run (run.sh), and each line can be compared with
# the others of the same sitting.
#
#   BEFORE=/tmp/map-bench-before PROCS=5 REPEAT=3 docs/results/map/read-path.sh
#
# BEFORE is a map-bench binary built from the commit to compare against (for the figures in
# README.md, 3c1c667: this benchmark with the old read path; build it in a scratch checkout of
# that commit). AFTER defaults to this tree's release build. Each database (1 M and 100 k
# keys, thor's and LMDB's) is loaded once into DBDIR and reused by every process (the read
# path's changes keep the format); every process opens it afresh (cold lookups), then runs the
# hot lookups and the scan REPEAT times. PROCS processes per binary and size, interleaved.
# Raw outputs: one JSON object per process in raw/read-path-<what>-<size>.jsonl;
# `python3 read_path.py` prints the table.
set -eu
cd "$(dirname "$0")/../../.."
PROCS=${PROCS:-5}
REPEAT=${REPEAT:-3}
DBDIR=${DBDIR:-/tmp/map-read-path}
AFTER=${AFTER:-./target/release/map-bench}
: "${BEFORE:?BEFORE must name the map-bench binary to compare against}"
OUT=docs/results/map/raw
mkdir -p "$OUT" "$DBDIR"
CARGO_INCREMENTAL=0 cargo build --release --locked -p map-bench
for size in 1m 100k; do
    case $size in
        1m) N="--n 1000000 --lookups 1000000" ;;
        100k) N="--n 100000 --lookups 100000" ;;
    esac
    READ="$N --batch 1000 --only lookups-cold,lookups-hot,scan --repeat $REPEAT --json"
    i=0
    while [ "$i" -lt "$PROCS" ]; do
        "$BEFORE" thor $READ --dir "$DBDIR/thor-$size" --keep --reuse \
            | tee -a "$OUT/read-path-before-$size.jsonl"
        "$AFTER" thor $READ --dir "$DBDIR/thor-$size" --keep --reuse \
            | tee -a "$OUT/read-path-after-$size.jsonl"
        "$AFTER" lmdb $READ --dir "$DBDIR/lmdb-$size" --keep --reuse \
            | tee -a "$OUT/read-path-lmdb-$size.jsonl"
        i=$((i + 1))
    done
done
