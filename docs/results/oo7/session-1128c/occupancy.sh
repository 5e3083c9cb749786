#!/bin/sh
# Issue 15's zero-fetch memory, hot, medium, and the page-cache bound (docs/oo7.md,
# "What any object cache can reach on this database"). Sizes in steps of 0.125-0.25 MiB
# around each minimum; the smallest with no fetch in the measured run is the figure.
#   cargo build --release -p thor-oo7 --example occupancy
#   target/release/thor oo7 load --dir /tmp/pf-med --size medium
set -e
DB=${1:-/tmp/pf-med}
OCC=${OCC:-target/release/examples/occupancy}
$OCC "$DB" t1- hac:n=23 12.375 12.5
$OCC "$DB" t1- fpc 26.25 26.5
$OCC "$DB" t1 hac:n=23 23 23.25
$OCC "$DB" t1 fpc 39 39.25
$OCC "$DB" t6 hac 0.375 0.3875
$OCC "$DB" t6 fpc 8.1875 8.25
