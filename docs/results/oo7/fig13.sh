#!/bin/bash
# Figure 13: the dynamic traversal's elapsed time, HAC, HAC-FG, FPC and FPC-NO (one run a point:
# each run is 5,000 measured operations).
set -e
T=${T:-target/release/thor}
$T oo7 sweep --dir /tmp/figs-med2 --traversal dynamic --policies hac,hac-fg,fpc --no-belady \
  --min-mb 2 --max-mb 80 --points 10 --out docs/results/oo7/fig13 > docs/results/oo7/fig13/dynamic.txt
