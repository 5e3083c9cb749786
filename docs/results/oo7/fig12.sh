#!/bin/bash
# Figure 12: hot HAC, HAC-FG, FPC and FPC-NO elapsed times, medians of 3 measured runs a point.
set -e
T=${T:-target/release/thor}
R=docs/results/oo7
$T oo7 sweep --dir /tmp/figs-med --traversal t6  --policies hac,hac-fg,fpc --repeat 3 --no-belady --min-mb 0.25 --max-mb 14 --points 12 --out $R/fig12 > $R/fig12/t6.txt
$T oo7 sweep --dir /tmp/figs-med --traversal t1- --policies hac,hac-fg,fpc --repeat 3 --no-belady --min-mb 1 --max-mb 48 --points 12 --out $R/fig12 > $R/fig12/t1minus.txt
$T oo7 sweep --dir /tmp/figs-med --traversal t1  --policies hac,hac-fg,fpc --repeat 3 --no-belady --min-mb 1 --max-mb 64 --points 12 --out $R/fig12 > $R/fig12/t1.txt
$T oo7 sweep --dir /tmp/figs-med --traversal t1+ --policies hac,hac-fg,fpc --repeat 3 --no-belady --min-mb 1 --max-mb 80 --points 12 --out $R/fig12 > $R/fig12/t1plus.txt
