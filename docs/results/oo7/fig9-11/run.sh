#!/bin/bash
# The HAC paper's Figures 9-11 on medium: hot, HAC-FG, at each traversal's worst-case
# replacement point (from fig5/ and the earlier sweeps' replacement time per fetch).
# As run at e1c92ef (2026-11-27 23:41 UTC) with DB=/tmp/sp-med, a fresh medium database.
set -e
T=${T:-target/release/thor}
DB=${DB:-/tmp/figs-medP}
R=docs/results/oo7/fig9-11
AT=t6=0.25,t1-=10,t1=20,t1+=48
[ -d $DB ] || $T oo7 load --dir $DB --size medium > /dev/null
# Over loopback TCP (a server in the same process): the server's share is what its driver
# timed per fetch (ServerStats::fetch_service_ns), the network the rest of the round trip.
$T oo7 penalty --dir $DB --figures --at $AT --over tcp --direct-reads --runs 3 --out $R/tcp
# In-process transport, the server reading around the OS cache; its page cache (64 MiB) holds
# the whole database after the warm-up run, so the measured runs' fetches are server hits.
$T oo7 penalty --dir $DB --figures --at $AT --over embedded --direct-reads --runs 3 --out $R/embedded
# The same with an 8 MiB server page cache: server misses read the disk.
$T oo7 penalty --dir $DB --figures --at $AT --over embedded --direct-reads --server-cache-mb 8 --runs 3 --out $R/embedded-server-8mb
