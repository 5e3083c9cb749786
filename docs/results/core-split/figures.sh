#!/bin/bash
# Issue 31's four figures for one binary, on one line (run old and new alternately, one sitting).
# usage: figures.sh BIN LABEL DB   (DB: a database made by `thor oo7 load --dir DB --size medium`;
# BIN needs `thor sim`, so build it with `--features lab`)
B=$1; L=$2; D=$3
eng=$($B bench engine --seconds 2 --bulk-mb 16 --json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print([c['commits_per_fsync'] for c in d['commits'] if c['threads']==16][0])")
net=$($B bench net --seconds 3 --clients 4 --server-threads 1 --json 2>/dev/null | python3 -c "
import json,sys; d=json.load(sys.stdin)
r=[x for x in d['runs'] if x['op']=='fetch' and x['transport']=='tcp']
print(' '.join('%d:%.1f/%.1f'%(x['clients'],x['latency_us_p50'],x['latency_us_p99']) for x in r))")
t1=$($B oo7 run --dir $D --traversal t1 --policy hac --cache-mb 64 --hot --repeat 81 --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['cpu_s'])")
nat=$($B oo7 native --size medium --traversal t1 --repeat 81 --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['cpu_s'])")
s0=$(date +%s.%N); $B sim cluster --seeds 3000 -qq >/dev/null 2>&1; rc=$?; s1=$(date +%s.%N)
sps=$(python3 -c "print('%.0f'%(3000/($s1-$s0)))")
echo "$L commits/fsync@16=$eng fetch(clients:p50/p99us)=[$net] t1_cpu_ms=$(python3 -c "print('%.1f'%($t1*1000))") native_ms=$(python3 -c "print('%.1f'%($nat*1000))") ratio=$(python3 -c "print('%.2f'%($t1/$nat))") sim_seeds_per_s=$sps(rc=$rc)"
