#!/bin/bash
# Issue 16's prefetch, on and off in one sitting: cold T6, T1- and T1 on medium, HAC at 256 and
# at 4 MiB, over loopback TCP (a server in this process) and the in-process transport. Each run
# of each invocation runs every traversal once per setting, one after the other (off,
# next:32, refs:32), so the settings alternate; the tables are medians (ranges) over --runs.
# Then the window's size over TCP at 256 MiB (off, next 8, 16, 32, 64), alternating likewise.
set -e
T=${T:-target/release/thor}
R=${R:-docs/results/oo7/prefetch}
DB=${DB:-/tmp/pf-med}
RUNS=${RUNS:-7}
[ -d $DB ] || $T oo7 load --dir $DB --size medium > /dev/null
for over in tcp embedded; do
  for mb in 256 4; do
    uptime > $R/$over-$mb.txt
    $T oo7 penalty --dir $DB --over $over --cache-mb $mb --runs $RUNS --round-trips 2000 \
      --prefetch 0,32 --prefetch-hint next,refs --out $R/$over-$mb >> $R/$over-$mb.txt
    uptime >> $R/$over-$mb.txt
  done
done
uptime > $R/tcp-256-window.txt
$T oo7 penalty --dir $DB --over tcp --cache-mb 256 --runs $RUNS --round-trips 2000 \
  --prefetch 0,8,16,32,64 --prefetch-hint next --out $R/tcp-256-window >> $R/tcp-256-window.txt
uptime >> $R/tcp-256-window.txt
# The same TCP comparison with the whole process on one CPU, where the client and the server
# thread always share it (no cross-CPU wake-ups): tight ranges.
uptime > $R/tcp-256-one-cpu.txt
taskset -c 1 $T oo7 penalty --dir $DB --over tcp --cache-mb 256 --runs $RUNS --round-trips 2000 \
  --prefetch 0,32 --prefetch-hint next,refs --out $R/tcp-256-one-cpu >> $R/tcp-256-one-cpu.txt
uptime >> $R/tcp-256-one-cpu.txt
