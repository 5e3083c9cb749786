#!/bin/bash
# One sitting: old (bfaa2c7, before issue 10) vs new, alternating.
OLD=/work/wt-pre10/target/release/thor
NEW=/work/main/target/release/thor
O=/tmp/m10/out
cd /tmp/m10
for r in 1 2 3; do
  for v in old new; do
    B=$OLD; [ $v = new ] && B=$NEW
    $B oo7 run --dir /tmp/m10/$v --traversal t1 --policy hac --cache-mb 64 --hot --repeat 81 --json > $O/t1-$v-$r.json 2>/dev/null
    $B oo7 native --size medium --traversal t1 --repeat 81 --json > $O/native-$v-$r.json 2>/dev/null
    $B bench net --seconds 3 --clients 4 --server-threads 1 > $O/net-$v-$r.txt 2>&1
  done
done
echo phase1 done
for r in 1 2 3; do
  $NEW bench clients --workload counters --accounts 64 --clients 8 --seconds 10 --json > $O/counters-$r.json 2>/dev/null
  (cd /work/main/bench/zodb && .venv/bin/python counters.py --clients 8 --seconds 10 --read-current --json > $O/zodb-$r.json 2>$O/zodb-$r.err)
done
echo phase2 done
for acc in 10000 16; do
  $NEW bench clients --workload transfers --accounts $acc --clients 1,2,4,8,16 --seconds 5 > $O/transfers-$acc.txt 2>&1
done
echo phase3 done
for t in t1 t2b; do
  $NEW oo7 multi --dir /tmp/m10/small5 --traversal $t --clients 1,2,3,4,5 --mode private --seconds 5 > $O/multi-$t.txt 2>/dev/null
done
$NEW oo7 multi --dir /tmp/m10/small5 --traversal t2b --clients 1,2,3,4,5 --mode shared --seconds 5 > $O/multi-t2b-shared.txt 2>/dev/null
echo all done
