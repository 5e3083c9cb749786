#!/bin/bash
# Reproduces docs/results/recovery/{small,small-constrained,big}: the QuickStore recovery
# study's Figures 4 to 18 (papers/quickstore-recovery-sigmod95.txt) with thor's `obj` mode as
# an extra line. Run from the repository root after `cargo build --release -p thor-cli`, on a
# machine with nothing else running (times are medians of --runs fresh servers). The figure
# each file stands for is listed in docs/results/recovery/README.md.
set -euo pipefail
T=${T:-target/release/thor}
R=docs/results/recovery
# The paper's Table 1 databases: five modules, one per client.
[ -d /tmp/qs-small ] || $T oo7 load --dir /tmp/qs-small --size qs-small > /dev/null
[ -d /tmp/qs-big ]   || $T oo7 load --dir /tmp/qs-big --size qs-big > /dev/null
# Section 5.1, Figures 4-9: small database, 12 MB per client (a diffing mode: an 8 MB cache and
# a 4 MB recovery buffer), T2A, T2B and T2C.
$T oo7 recovery-study -q --dir /tmp/qs-small --memory-mb 12 --buffer-mb 4 \
  --clients 1,2,3,4,5 --repeat 5 --runs 3 --out $R/small > $R/small.txt
# Section 5.2, Figures 10-14: small database, constrained: 8 MB per client (7.5 + 0.5).
$T oo7 recovery-study -q --dir /tmp/qs-small --memory-mb 8 --buffer-mb 0.5 \
  --clients 1,2,3,4,5 --repeat 5 --runs 3 --out $R/small-constrained > $R/small-constrained.txt
# Section 5.3, Figures 15-18: big database, 12 MB per client, the diffing modes with a 4 MB
# recovery buffer (PD-ESM-4, SD-ESM-4, PD-REDO-4) and with 0.5 MB (PD-ESM-1/2), T2A and T2B; the
# server with a 26 MiB page cache (the paper's 36 MB against its 24.3 MB modules, for our 17.4 MiB
# ones) whose misses read the device.
$T oo7 recovery-study -q --dir /tmp/qs-big --memory-mb 12 --buffer-mb 0.5,4 \
  --modes obj,pd-redo,pd-esm,sd-esm,wpl --traversals t2a,t2b --server-cache-mb 26 --direct-io \
  --clients 1,2,3,4,5 --repeat 3 --runs 3 --out $R/big > $R/big.txt
