#!/usr/bin/env bash
# OO7 over LMDB beside thor (issues 15 and 16): the commands behind docs/oo7.md's section
# "OO7 over LMDB, side by side". Run from the repository root as root (the footprint needs a
# memory cgroup); about 5 minutes after the build on the shared 2-core machine. Outputs go beside
# this script.
set -euo pipefail
OUT=docs/results/oo7/lmdb
DATA=${DATA:-/tmp/oo7lmdb}
cargo build --release -p thor-cli -p oo7-lmdb -p thor-oo7 --examples --bins
rm -rf "$DATA/thor-medium" "$DATA/lmdb-medium"
mkdir -p "$DATA"
target/release/thor oo7 load --dir "$DATA/thor-medium" --size medium
target/release/oo7-lmdb load --dir "$DATA/lmdb-medium" --size medium | tee "$OUT/load.txt"
target/release/oo7-lmdb verify --dir "$DATA/lmdb-medium" | tee -a "$OUT/load.txt"

# Cold and hot T6, T1-, T1 and T2b's commit, both stores alternating, in one sitting.
target/release/oo7-lmdb run --dir "$DATA/lmdb-medium" --thor-dir "$DATA/thor-medium" \
    --runs 11 --t2b-runs 5 --json "$OUT/run.json" 2> "$OUT/run.log" | tee "$OUT/run.md"

# thor's zero-fetch minimum for hot T1 (client cache budget: frames and tables).
target/release/examples/occupancy "$DATA/thor-medium" t1 hac 25.75 26 26.25 26.5 \
    | tee "$OUT/occupancy-hac.txt"
target/release/examples/occupancy "$DATA/thor-medium" t1 hac:n=23 23 23.25 23.5 23.75 \
    | tee "$OUT/occupancy-hac-n23.txt"

# The smallest memory-cgroup limit for a hot T1 without a major fault (and without a fetch).
target/release/oo7-lmdb footprint --dir "$DATA/lmdb-medium" --lo-mib 12 --hi-mib 64 \
    --step-mib 0.25 --confirm 3 --json "$OUT/footprint-lmdb.json" 2> "$OUT/footprint-lmdb.log" \
    | tee "$OUT/footprint-lmdb.md"
target/release/oo7-lmdb footprint --dir "$DATA/lmdb-medium" --lmdb-no-readahead --lo-mib 12 \
    --hi-mib 64 --step-mib 0.25 --confirm 3 --json "$OUT/footprint-lmdb-nordahead.json" \
    2> "$OUT/footprint-lmdb-nordahead.log" | tee "$OUT/footprint-lmdb-nordahead.md"
for SERVER in 64 1; do
    target/release/oo7-lmdb footprint --thor-dir "$DATA/thor-medium" --thor-cache-mb 26.25 \
        --thor-server-cache-mb $SERVER --lo-mib 24 --hi-mib 160 --step-mib 0.25 --confirm 3 \
        --json "$OUT/footprint-thor-server$SERVER.json" 2> "$OUT/footprint-thor-server$SERVER.log" \
        | tee "$OUT/footprint-thor-server$SERVER.md"
done
