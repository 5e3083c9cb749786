#!/bin/sh
# CPU time of hot T1 (medium, 64 MiB cache, no misses) for each client variant built by the
# variants scripts (before/: the client of 3ed164c, per-frame pins and an entry-list read set;
# head/: the client of c3f4216, a live-view list and page-bitmap read set), HAC and FPC, and the
# native baseline: three rounds, each the mean CPU time of 81 measured runs. Prints
# "name commit_s cpu_s" per line (native: "native cpu_s").
B=/tmp/oo7-hitpath-bin
D=${1:-/tmp/oo7/medium}
run() { RUST_BACKTRACE=0 "$@" --json | grep -E '"commit_s"|"cpu_s"' | tr -dc '0-9.\n' | tr '\n' ' '; }
for round in 1 2 3; do
  for set in before head; do
    for v in v0-baseline v1-no-usage v2-no-readset v3-no-classcheck v4-no-pins v4-no-views; do
      [ -x $B/$set/$v ] && [ "$set/$v" != "head/v4-no-pins" ] || continue
      echo "$set/$v $(run $B/$set/$v oo7 run --dir $D --traversal t1 --policy hac --cache-mb 64 --hot --repeat 81)"
    done
    echo "$set/fpc $(run $B/$set/v0-baseline oo7 run --dir $D --traversal t1 --policy fpc --cache-mb 64 --hot --repeat 81)"
  done
  echo "native $(run $B/head/v0-baseline oo7 native --size medium --traversal t1 --repeat 81)"
done
