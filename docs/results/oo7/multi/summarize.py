#!/usr/bin/env python3
"""Summarizes `thor oo7 multi --json` outputs: per traversal and client count, the total
traversals per second of each round and their median, the per-client rates of the median
round, the cores the process kept busy, and CPU per traversal of the clients and of the
in-process server (medians over rounds).
Usage: summarize.py FILE.json..."""
import json
import statistics
import sys
from collections import defaultdict

rows = defaultdict(list)
for path in sys.argv[1:]:
    for r in json.load(open(path))["runs"]:
        t = r["total"]
        rows[(r["traversal"], r["clients"])].append(
            (t["traversals_per_s"], t["traversals"], t["aborts"], t["fetches"],
             t["process_cpu_s"], t["cores_busy"], t["client_cpu_s"], t["elapsed_s"],
             [c["traversals_per_s"] for c in r["per_client"]]))

print("| traversal | clients | total trav/s, each round | median | per client (median round) "
      "| cores busy | client CPU ms per traversal | server CPU ms per traversal | aborts | fetches |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (trav, n), runs in sorted(rows.items()):
    rates = [x[0] for x in runs]
    med = statistics.median(rates)
    m = min(runs, key=lambda x: abs(x[0] - med))
    per = ", ".join(f"{p:.1f}" for p in m[8])
    # The server runs in the same process: its CPU is the process's less the clients'.
    scpu_per = statistics.median((x[4] - x[6]) / x[1] * 1e3 for x in runs if x[1])
    ccpu_per = statistics.median(x[6] / x[1] * 1e3 for x in runs if x[1])
    cores = statistics.median(x[5] for x in runs)
    print(f"| {trav} | {n} | {', '.join(f'{r:.1f}' for r in rates)} | {med:.1f} | {per} "
          f"| {cores:.2f} | {ccpu_per:.1f} | {scpu_per:.1f} | {sum(x[2] for x in runs)} "
          f"| {sum(x[3] for x in runs)} |")
