#!/bin/bash
# Reproduces docs/results/oo7/fig5, fig6, fig7 (run from the worktree root).
set -e
T=${T:-target/release/thor}
R=docs/results/oo7
ALL=hac,hac-fg,fpc,gom,quickstore,clock,arc,s3fifo,wtinylfu
mkdir -p $R/fig5 $R/fig6 $R/fig7/8k-pages
# The databases (the medium one was a copy of one loaded the same way).
[ -d /tmp/figs-med ]    || $T oo7 load --dir /tmp/figs-med --size medium > /dev/null
[ -d /tmp/figs-small4 ] || $T oo7 load --dir /tmp/figs-small4 --size small --page-kb 4 > $R/fig7/load.txt
[ -d /tmp/figs-small8 ] || $T oo7 load --dir /tmp/figs-small8 --size small > $R/fig7/8k-pages/load.txt
# HAC-BIG's databases: the same small databases with every OO7 object padded to GOM's size.
[ -d /tmp/figs-small4-big ] || $T oo7 load --dir /tmp/figs-small4-big --size small --page-kb 4 --pad-to-gom > $R/fig7/load-big.txt
[ -d /tmp/figs-small8-big ] || $T oo7 load --dir /tmp/figs-small8-big --size small --pad-to-gom > $R/fig7/8k-pages/load-big.txt
$T oo7 sweep --dir /tmp/figs-small4 --big-dir /tmp/figs-small4-big --traversal t1 --cold \
  --policies hac,fpc,gom:obj=0.2,gom:obj=0.5,gom,quickstore,clock,arc,s3fifo,wtinylfu \
  --big-policies hac,fpc,gom:obj=0.2,gom:obj=0.5,gom \
  --plot hac,hac-big,fpc,fpc-big,gom-best,gom-best-big,belady,fpc-no \
  --min-mb 0.5 --max-mb 9 --points 18 --out $R/fig7 > $R/fig7/t1.txt
$T oo7 sweep --dir /tmp/figs-small8 --big-dir /tmp/figs-small8-big --traversal t1 --cold \
  --policies hac,fpc,gom:obj=0.2,gom:obj=0.5,gom,quickstore,clock,arc,s3fifo,wtinylfu \
  --big-policies hac,fpc,gom:obj=0.2,gom:obj=0.5,gom \
  --plot hac,hac-big,fpc,fpc-big,gom-best,gom-best-big,belady,fpc-no \
  --min-mb 0.5 --max-mb 9 --points 18 --out $R/fig7/8k-pages > $R/fig7/8k-pages/t1.txt
$T oo7 sweep --dir /tmp/figs-med --traversal t6  --policies $ALL --min-mb 0.25 --max-mb 14 --points 12 --out $R/fig5 > $R/fig5/t6.txt
$T oo7 sweep --dir /tmp/figs-med --traversal t1- --policies $ALL --min-mb 1 --max-mb 48 --points 12 --out $R/fig5 > $R/fig5/t1minus.txt
$T oo7 sweep --dir /tmp/figs-med --traversal t1  --policies $ALL --min-mb 1 --max-mb 64 --points 12 --out $R/fig5 > $R/fig5/t1.txt
$T oo7 sweep --dir /tmp/figs-med --traversal t1+ --policies $ALL --min-mb 1 --max-mb 80 --points 12 --out $R/fig5 > $R/fig5/t1plus.txt
[ -d /tmp/figs-med2 ] || $T oo7 load --dir /tmp/figs-med2 --size medium --modules 2 > /dev/null
$T oo7 sweep --dir /tmp/figs-med2 --traversal dynamic --policies $ALL --min-mb 2 --max-mb 80 --points 10 --out $R/fig6 > $R/fig6/dynamic.txt
