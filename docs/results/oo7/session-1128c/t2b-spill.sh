#!/bin/sh
# T2b on medium as one transaction, a fresh copy of the database per run, before and after
# the spill positions' reservation (docs/oo7.md, "T2b: a large update transaction").
#   OLD=/tmp/thor-old (main at the memory_bytes_max commit), NEW=/tmp/thor-new (after)
#   usage: sh t2b-spill.sh DB ROUNDS
set -e
DB=${1:-/tmp/pf-med}
ROUNDS=${2:-3}
for mb in 4 8 12 16 24 256; do
  for r in $(seq 1 "$ROUNDS"); do
    for b in OLD NEW; do
      eval bin=\$$b
      rm -rf /tmp/t2b-w && cp -r "$DB" /tmp/t2b-w && sync
      "$bin" oo7 run --dir /tmp/t2b-w --traversal t2b --cache-mb $mb --json | python3 -c "
import json,sys; d=json.load(sys.stdin)
print('$mb', '$b', $r, d['fetches'], d['objects_spilled'], d['memory_bytes_max'], d['cache_bytes'], '%.3f' % d['elapsed_s'], '%.3f' % d['commit_s'], d['bytes_shipped'])"
    done
  done
done
