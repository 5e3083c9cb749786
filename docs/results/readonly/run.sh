#!/usr/bin/env bash
# Read-only transactions at the client (issue 32): `thor bench clients --workload counters`
# with 8 and 16 clients on 64 and 4 counters, read-only transactions committed at the client
# (the default) and validated at the server (`--read-only-at-server`, as before wire version
# 7), alternating, three rounds, in one sitting. Writes one JSON file per run and summary.txt.
# Usage: docs/results/readonly/run.sh [path/to/thor]   (a release build with the lab feature:
# cargo build --release -p thor-cli --features thor-cli/lab)
set -euo pipefail
cd "$(dirname "$0")"
THOR=${1:-../../../target/release/thor}
for round in 1 2 3; do
    for accounts in 64 4; do
        for mode in client server; do
            flag=""
            [ "$mode" = server ] && flag="--read-only-at-server"
            "$THOR" bench clients --workload counters --clients 8,16 --accounts "$accounts" \
                --seconds 5 $flag --json >"counters-$accounts-$mode-$round.json" 2>>bench.log
        done
    done
done
python3 - <<'PY' | tee summary.txt
import json, glob, statistics
rows = {}
for f in sorted(glob.glob("counters-*.json")):
    _, accounts, mode, rnd = f[:-5].split("-")
    for r in json.load(open(f))["runs"]:
        writers = (r["committed"] - r["read_only"]) / r["seconds"]
        key = (int(accounts), r["clients"], mode)
        rows.setdefault(key, []).append((r["read_only_refused_rate"] * 100, writers, r["commits_per_s"]))
print("counters clients read-only   refused% (3 rounds)         writer commits/s (median, min..max)   all commits/s (median)")
for key in sorted(rows, key=lambda k: (-k[0], k[1], k[2])):
    v = rows[key]
    ref = " ".join(f"{x[0]:5.2f}" for x in v)
    w = [x[1] for x in v]
    a = [x[2] for x in v]
    print(f"{key[0]:>8} {key[1]:>7} {'at ' + key[2]:>10}   {ref:<26} {statistics.median(w):8.0f} ({min(w):.0f}..{max(w):.0f})            {statistics.median(a):8.0f}")
PY
