#!/usr/bin/env python3
"""The read-path table of docs/results/map/README.md from raw/read-path-*.jsonl (read-path.sh):
per line and size, the median and the range (min-max) over every measured run (hot lookups
and scans: each process's --repeat runs; cold lookups: one per process), and the load
averages the processes started at.

    python3 read_path.py
"""
import json
import os
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
WHO = [("thor before", "before"), ("thor after", "after"), ("lmdb", "lmdb")]
LINES = [
    ("point lookups cold (/s)", lambda r: [r["cold_lookups_per_sec"]]),
    ("point lookups hot (/s)", lambda r: r["hot_lookups_per_sec_runs"]),
    ("point lookups hot (/CPU s)", lambda r: r["hot_lookups_per_cpu_sec_runs"]),
    ("scan of 10% (keys/s)", lambda r: r["scan_keys_per_sec_runs"]),
    ("scan of 10% (keys/CPU s)", lambda r: r["scan_keys_per_cpu_sec_runs"]),
]


def load(what, size):
    p = os.path.join(HERE, "raw", "read-path-%s-%s.jsonl" % (what, size))
    if not os.path.exists(p):
        return []
    with open(p) as f:
        return [json.loads(l) for l in f if l.strip()]


def cell(xs):
    if not xs:
        return "-"
    f = "{:,.0f}"
    return "%s (%s-%s)" % (f.format(statistics.median(xs)), f.format(min(xs)), f.format(max(xs)))


def main():
    for size in ("1m", "100k"):
        rows = [(label, load(what, size)) for label, what in WHO]
        rows = [(label, rs) for label, rs in rows if rs]
        if not rows:
            continue
        print("%s keys:\n" % ("1 M" if size == "1m" else "100 k"))
        print("| line | " + " | ".join("%s (%d processes)" % (l, len(rs)) for l, rs in rows) + " |")
        print("|---|" + "---|" * len(rows))
        for label, get in LINES:
            cells = [cell([x for r in rs for x in get(r)]) for _, rs in rows]
            print("| %s | %s |" % (label, " | ".join(cells)))
        loads = sorted(float(r["loadavg_at_start"].split()[0]) for _, rs in rows for r in rs)
        print("\nload average (1 min) at the processes' start: %.1f to %.1f, median %.1f\n"
              % (loads[0], loads[-1], statistics.median(loads)))


if __name__ == "__main__":
    main()
