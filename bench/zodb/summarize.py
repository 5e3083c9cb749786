#!/usr/bin/env python3
"""Min / median / max of commits/s and abort rate per configuration, from the
JSON lines counters.py --json prints (one file or more)."""
import json
import statistics
import sys
from collections import defaultdict



def cpu(r):
    c = r.get("cpu_cores_used")
    if not c:
        return "n/a"
    return "%.2f / %.2f / %.2f" % (c["server"], c["clients"], c["other"])


groups = defaultdict(list)
for path in sys.argv[1:]:
    for line in open(path):
        if line.strip():
            r = json.loads(line)
            key = ("readCurrent" if r["read_current"] else "no readCurrent",
                   r["clients"], r["retry"],
                   "server_sync" if r["server_sync"] else "",
                   r["seconds"])
            groups[key].append(r)

print("| configuration | runs | commits/s min / median / max | abort rate "
      "min / median / max | commit() p50 / p99 ms (median run) | "
      "CPU cores: server / clients / others (median run) | sum check |")
print("|---|---|---|---|---|---|---|")
for key, rs in groups.items():
    cps = sorted(r["commits_per_s"] for r in rs)
    ar = sorted(100 * r["abort_rate"] for r in rs)
    mid = sorted(rs, key=lambda r: r["commits_per_s"])[len(rs) // 2]
    name = "%s, %d clients, %g s, retry %s%s" % (
        key[0], key[1], key[4], key[2], ", " + key[3] if key[3] else "")
    print("| %s | %d | %.0f / %.0f / %.0f | %.1f / %.1f / %.1f %% | "
          "%.1f / %.1f | %s | %s |"
          % (name, len(rs), cps[0], statistics.median(cps), cps[-1],
             ar[0], statistics.median(ar), ar[-1],
             mid["commit_latency_ms"]["p50"], mid["commit_latency_ms"]["p99"],
             cpu(mid),
             "all OK" if all(r["consistent"] for r in rs) else "FAILED"))
