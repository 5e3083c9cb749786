#!/bin/sh
# Issue 16, 2026-11-28 (second sitting): main before this session (5ce2663, BASE) against this
# session's binary (NEW), alternating. /tmp/pf-med is `thor oo7 load --dir /tmp/pf-med --size medium`.
BASE=${BASE:-/tmp/thor-base16}
NEW=${NEW:-target/release/thor}
DB=${DB:-/tmp/pf-med}
OUT=${OUT:-docs/results/oo7/session-1128b}
j() { python3 -c "import json,sys; d=json.load(sys.stdin); d=d[0] if isinstance(d,list) else d; print(' '.join(str(d.get(k)) for k in sys.argv[1:]))" "$@"; }
# 1. hot T1 with memory limited: HAC against FPC
for r in 1 2 3; do for mb in 8 12 16 20 24; do for p in hac fpc; do for b in BASE NEW; do
  eval bin=\$$b
  echo "$b $p $mb $($bin oo7 run --dir $DB --traversal t1 --hot --policy $p --cache-mb $mb --repeat 1 --json 2>/dev/null | j fetches elapsed_s cpu_s replacement_s)"
done; done; done; done > $OUT/hot-t1-limited.txt
# 2. cold T1, embedded, 256 MiB
for r in 1 2 3 4 5; do for b in BASE NEW; do
  eval bin=\$$b
  echo "$b $($bin oo7 run --dir $DB --traversal t1 --policy hac --cache-mb 256 --json 2>/dev/null | j elapsed_s cpu_s conversion_s fetch_s fetches)"
done; done > $OUT/cold-t1-embedded.txt
# 3. cold traversals over TCP at 256 MiB, prefetch off and next:32 (the acceptance's benchmark command)
$NEW oo7 penalty --dir $DB --over tcp --cache-mb 256 --runs 7 --round-trips 2000 --prefetch 0,32 \
    --prefetch-hint next > $OUT/tcp-256.txt 2>&1
# 4. T2b's commit, embedded, on a fresh copy of medium each run
for r in 1 2 3 4 5 6; do for b in BASE NEW; do
  eval bin=\$$b
  rm -rf /tmp/t2b-run && cp -r $DB /tmp/t2b-run
  echo "$b $($bin oo7 run --dir /tmp/t2b-run --traversal t2b --policy hac --cache-mb 256 --json 2>/dev/null | j commit_s elapsed_s bytes_shipped)"
done; done > $OUT/t2b-commit.txt
rm -rf /tmp/t2b-run
