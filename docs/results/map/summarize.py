#!/usr/bin/env python3
"""The tables of docs/results/map/README.md from raw/*.jsonl: per engine and line, the median
and the range (min-max) over the runs, and the number of runs.

    python3 summarize.py          # 1 M keys: raw/<engine>.jsonl
    python3 summarize.py -100k    # 100 k keys: raw/<engine>-100k.jsonl
    RAW=raw/sitting2 python3 summarize.py   # another sitting's directory (run.sh's OUT)
"""
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LINES = [
    ("load (inserts/s, batches of 1,000)", "load_inserts_per_sec", "{:,.0f}"),
    ("point lookups cold (/s)", "cold_lookups_per_sec", "{:,.0f}"),
    ("point lookups hot (/s)", "hot_lookups_per_sec", "{:,.0f}"),
    ("scan of 10% (keys/s)", "scan_keys_per_sec", "{:,.0f}"),
    ("8 clients: committed inserts/s", "conc_inserts_per_sec", "{:,.0f}"),
    ("8 clients: abort rate", "conc_abort_rate", "{:.3f}"),
]


def load(name, suffix):
    p = os.path.join(HERE, os.environ.get("RAW", "raw"), name + suffix + ".jsonl")
    if not os.path.exists(p):
        return []
    with open(p) as f:
        return [json.loads(l) for l in f if l.strip()]


def cell(rs, key, fmt):
    xs = [r[key] for r in rs]
    if not xs:
        return "-"
    m = fmt.format(statistics.median(xs))
    if len(xs) == 1:
        return m
    return "%s (%s-%s)" % (m, fmt.format(min(xs)), fmt.format(max(xs)))


def main():
    suffix = sys.argv[1] if len(sys.argv) > 1 else ""
    engines = [(n, load(n, suffix)) for n in ("thor", "lmdb", "zodb")]
    engines = [(n, rs) for n, rs in engines if rs]
    print("| line | " + " | ".join("%s (%d run%s)" % (n, len(rs), "" if len(rs) == 1 else "s")
                                   for n, rs in engines) + " |")
    print("|---|" + "---|" * len(engines))
    for label, key, fmt in LINES:
        print("| %s | %s |" % (label, " | ".join(cell(rs, key, fmt) for _, rs in engines)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
