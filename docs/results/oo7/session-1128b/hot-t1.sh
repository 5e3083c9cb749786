#!/bin/bash
# Hot T1 on medium at 64 MiB (--repeat 21, the median run; elapsed/CPU ms), one sitting, rounds
# alternating: 318bd80 (the binary that measured 1.01x native on 2026-11-22), 90359af (main
# before issue 16's first commit), 5ce2663 (main before this session), main after this
# session's merges (4c94652, /tmp/thor-final), a *stripped* hit path (/tmp/thor-ideal: stripped.patch
# here, not merged: after an object's first access in a transaction, no usage, no read mark,
# no class check, no view list; not a correct client, the floor of an indirection-table hit
# path), and the native graph. Each thor binary reads a
# database it loaded itself (`thor oo7 load --size medium`).
ms() { python3 -c "import json,sys; d=json.load(sys.stdin); d=d[0] if isinstance(d,list) else d; print('%.2f/%.2f' % (d['elapsed_s']*1000, d['cpu_s']*1000))"; }
run() { $1 oo7 run --dir $2 --traversal t1 --policy hac --cache-mb 64 --hot --repeat 21 --json 2>/dev/null | ms; }
for r in $(seq ${1:-7}); do
  a=$(run /tmp/thor-318 /tmp/med-318)
  b=$(run /tmp/thor-pre16 /tmp/med-pre16)
  c=$(run /tmp/thor-base16 /tmp/pf-med)
  d=$(run /tmp/thor-final /tmp/pf-med)
  e=$(run /tmp/thor-ideal /tmp/pf-med)
  n=$(/tmp/thor-final oo7 native --size medium --traversal t1 --repeat 21 --json 2>/dev/null | ms)
  echo "318bd80 $a | pre16 $b | 5ce2663 $c | new $d | stripped $e | native $n"
done
