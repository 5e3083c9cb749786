#!/bin/sh
# Issue 16, 2026-11-28: before (main 085894e, BASE) and after (this commit, NEW) in one sitting,
# alternating. /tmp/pf-med is `thor oo7 load --dir /tmp/pf-med --size medium`.
BASE=${BASE:-/tmp/thor-base}
NEW=${NEW:-target/release/thor}
DB=${DB:-/tmp/pf-med}
OUT=${OUT:-docs/results/oo7/session-1128}
j() { python3 -c "import json,sys; d=json.load(sys.stdin); d=d[0] if isinstance(d,list) else d; print(' '.join(str(d.get(k)) for k in sys.argv[1:]))" "$@"; }
# 1. cold T1, embedded, 256 MiB: elapsed, CPU, conversion, fetch
for r in 1 2 3 4 5 6 7; do for b in BASE NEW; do
  eval bin=\$$b
  echo "$b $($bin oo7 run --dir $DB --traversal t1 --policy hac --cache-mb 256 --json 2>/dev/null | j elapsed_s cpu_s conversion_s fetch_s fetches)"
done; done > $OUT/cold-t1-embedded.txt
# 2. hot T1, 64 MiB, against native
for r in 1 2 3; do for b in BASE NEW; do
  eval bin=\$$b
  echo "$b $($bin oo7 run --dir $DB --traversal t1 --policy hac --cache-mb 64 --hot --repeat 21 --json 2>/dev/null | j cpu_s elapsed_s)"
done; echo "native $($NEW oo7 native --size medium --traversal t1 --repeat 21 --json 2>/dev/null | j cpu_s elapsed_s)"; done > $OUT/hot-t1.txt
# 3. hot T1 with memory limited: HAC against FPC
for r in 1 2 3; do for mb in 8 12 16 20 24; do for p in hac fpc; do for b in BASE NEW; do
  eval bin=\$$b
  echo "$b $p $mb $($bin oo7 run --dir $DB --traversal t1 --hot --policy $p --cache-mb $mb --repeat 1 --json 2>/dev/null | j fetches elapsed_s cpu_s replacement_s)"
done; done; done; done > $OUT/hot-t1-limited.txt
# 4. cold traversals over TCP, prefetch off / next:32 / next:32 with read-ahead; and BASE's next:32
$NEW oo7 penalty --dir $DB --over tcp --cache-mb 256 --runs 7 --round-trips 2000 --prefetch 0,32 \
    --prefetch-hint next --read-ahead true,false --out $OUT/tcp-256 > $OUT/tcp-256.txt 2>&1
$BASE oo7 penalty --dir $DB --over tcp --cache-mb 256 --runs 7 --round-trips 2000 --prefetch 32 \
    --prefetch-hint next > $OUT/tcp-256-base.txt 2>&1
$NEW oo7 penalty --dir $DB --over tcp --cache-mb 4 --runs 5 --round-trips 2000 --prefetch 0,32 \
    --prefetch-hint next --read-ahead true,false > $OUT/tcp-4.txt 2>&1
# 5. eight clients at once, prefetch off, against eight ping-pongs
$NEW oo7 penalty --dir $DB --over tcp --cache-mb 256 --runs 3 --round-trips 2000 --prefetch 0 \
    --traversals t1 --clients 8 > $OUT/tcp-8-clients.txt 2>&1
# 6. T2b's commit, embedded, on a fresh copy of medium each run
for r in 1 2 3 4 5; do for b in BASE NEW; do
  eval bin=\$$b
  rm -rf /tmp/t2b-run && cp -r $DB /tmp/t2b-run
  echo "$b $($bin oo7 run --dir /tmp/t2b-run --traversal t2b --policy hac --cache-mb 256 --json 2>/dev/null | j commit_s elapsed_s bytes_shipped)"
done; done > $OUT/t2b-commit.txt
rm -rf /tmp/t2b-run
# 7. whole-process CPU of cold T1, embedded (perf stat, 8 runs each, twice)
for r in 1 2; do for b in BASE NEW; do
  eval bin=\$$b
  echo "$b $(perf stat -r 8 -e task-clock,page-faults -x, $bin oo7 run --dir $DB --traversal t1 --policy hac --cache-mb 256 2>&1 >/dev/null | grep -E 'task-clock|page-faults' | cut -d, -f1,3,4 | tr '\n' ' ')"
done; done > $OUT/cold-t1-perf-stat.txt
