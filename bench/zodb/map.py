#!/usr/bin/env python3
"""ZODB/ZEO baseline for issue 34's map figures: the workload of `bench/map` (map-bench).

One ZEO server (``runzeo`` in a subprocess, on a fresh FileStorage in a temporary
directory; FileStorage fsyncs every commit) and one BTree in the root (``OOBTree`` by
default, as the issue names; ``--tree LLBTree`` stores the u64 keys shifted into int64).

1. load: ``--n`` inserts of random u64 keys (the same SplitMix64 stream from ``--seed`` as
   map-bench, values ``key ^ VALUE_MASK``), ``--batch`` per transaction.
2. lookups cold: a new ``ZEO.DB`` (empty ZODB object cache and empty in-memory ZEO client
   cache; the server's FileStorage has no cache of its own beyond the kernel's page cache,
   which is not dropped), ``--lookups`` point lookups of loaded keys, ``--batch`` per
   transaction; every lookup must find its value.
3. lookups hot: the same lookups again on the same connection. The connection's object
   cache is set to ``--cache-size`` objects (default 1,000,000, far above the tree's bucket
   count) so that hot means every bucket in memory; ZODB's default of 400 would measure
   ZEO round trips again.
4. scan: ``tree.items(lo, hi)`` (hi excluded) of the same range as map-bench (about 10% of
   the keys), in one transaction.
5. concurrent: ``--clients`` processes, each its own ``ZEO.DB`` and connection, each inserting
   ``--conc-inserts`` random distinct keys of its own stream (map-bench's streams) in
   transactions of ``--conc-batch``. BTree buckets resolve conflicts of inserts of different
   keys (``_p_resolveConflict``); what they cannot resolve (a bucket split, concurrent changes
   of the same internal node) raises ``ConflictError``: the transaction is aborted, counted,
   and retried with the same keys. Abort rate = aborts / (commits + aborts).

Prints one JSON object with ``--json``; rates are per second of wall-clock time.
"""

import argparse
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from counters import start_server  # noqa: E402  (the same runzeo start as counters.py)

M64 = (1 << 64) - 1
VALUE_MASK = 0x5BD1E9955BD1E995
SHIFT = 1 << 63


class Keys:
    """SplitMix64, as map-bench's ``Keys``."""

    def __init__(self, state):
        self.s = state & M64

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & M64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)


def client_seed(seed, i):
    # map-bench: seed.wrapping_add(1 + i).wrapping_mul(0x1000_0001)
    return (((seed + 1 + i) & M64) * 0x10000001) & M64


def tree_class(name):
    from BTrees.OOBTree import OOBTree
    from BTrees.LLBTree import LLBTree
    return {"OOBTree": OOBTree, "LLBTree": LLBTree}[name]


def enc(tree, k):
    # LLBTree keys are signed int64: shift keeps the order.
    return k - SHIFT if tree == "LLBTree" else k


def open_db(addr, cache_size):
    # `cache_size` is the ZODB object cache (objects per connection). Not through `ZEO.DB`:
    # it passes its keywords to ClientStorage, whose `cache_size` is the ZEO client cache in
    # bytes. The ZEO client cache stays at its default (in memory, 20 MB).
    import ZEO
    import ZODB
    return ZODB.DB(ZEO.client(addr, wait_timeout=60), cache_size=cache_size)


def concurrent_client(i, args, addr, start, out):
    import transaction
    from ZODB.POSException import ConflictError
    db = open_db(addr, args.cache_size)
    tm = transaction.TransactionManager()
    conn = db.open(tm)
    ks = Keys(client_seed(args.seed, i))
    mine = [ks.next() for _ in range(args.conc_inserts)]
    commits = aborts = 0
    start.wait()
    for b in range(0, len(mine), args.conc_batch):
        chunk = mine[b:b + args.conc_batch]
        while True:
            try:
                tm.begin()
                t = conn.root()["map"]
                for k in chunk:
                    t[enc(args.tree, k)] = enc(args.tree, k ^ VALUE_MASK)
                tm.commit()
                commits += 1
                break
            except ConflictError:
                tm.abort()
                aborts += 1
    conn.close()
    db.close()
    out.put((i, len(mine), commits, aborts))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--batch", type=int, default=1_000)
    p.add_argument("--lookups", type=int, default=1_000_000)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--conc-inserts", type=int, default=20_000)
    p.add_argument("--conc-batch", type=int, default=100)
    p.add_argument("--cache-size", type=int, default=1_000_000)
    p.add_argument("--seed", type=int, default=34)
    p.add_argument("--tree", choices=["OOBTree", "LLBTree"], default="OOBTree")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    import transaction

    with open("/proc/loadavg") as f:
        loadavg = f.read().strip()
    ks = Keys(args.seed)
    keys = [ks.next() for _ in range(args.n)]
    pick = Keys(args.seed ^ 0xC0FFEE00)
    probes = [keys[pick.next() % args.n] for _ in range(args.lookups)]
    lo = pick.next() % (M64 - M64 // 10)
    hi = lo + M64 // 10
    expect_scan = sum(1 for k in keys if lo <= k < hi)
    tree = args.tree
    r = {"engine": "zodb-" + tree, "n": args.n, "batch": args.batch,
         "lookups": args.lookups, "clients": args.clients,
         "conc_inserts_per_client": args.conc_inserts, "conc_batch": args.conc_batch,
         "loadavg_at_start": loadavg}

    tmpdir = tempfile.mkdtemp(prefix="zodb-map-")
    server = None
    try:
        server, addr = start_server(tmpdir)
        db = open_db(addr, args.cache_size)
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        tm.begin()
        conn.root()["map"] = tree_class(tree)()
        tm.commit()
        t0 = time.perf_counter()
        for b in range(0, args.n, args.batch):
            tm.begin()
            t = conn.root()["map"]
            for k in keys[b:b + args.batch]:
                t[enc(tree, k)] = enc(tree, k ^ VALUE_MASK)
            tm.commit()
        r["load_secs"] = time.perf_counter() - t0
        r["load_inserts_per_sec"] = args.n / r["load_secs"]
        conn.close()
        db.close()
        r["db_bytes_after_load"] = os.path.getsize(os.path.join(tmpdir, "Data.fs"))

        db = open_db(addr, args.cache_size)
        tm = transaction.TransactionManager()
        conn = db.open(tm)

        def lookups():
            t0 = time.perf_counter()
            for b in range(0, len(probes), args.batch):
                tm.begin()
                t = conn.root()["map"]
                for k in probes[b:b + args.batch]:
                    if t.get(enc(tree, k)) != enc(tree, k ^ VALUE_MASK):
                        raise SystemExit("FAIL: a loaded key is missing")
                tm.commit()
            return time.perf_counter() - t0

        r["cold_lookups_per_sec"] = args.lookups / lookups()
        r["hot_lookups_per_sec"] = args.lookups / lookups()
        t0 = time.perf_counter()
        tm.begin()
        n = 0
        for k, v in conn.root()["map"].items(enc(tree, lo), enc(tree, hi), excludemax=True):
            if v != enc(tree, (k + (SHIFT if tree == "LLBTree" else 0)) ^ VALUE_MASK):
                raise SystemExit("FAIL: a scanned value is wrong")
            n += 1
        tm.commit()
        r["scan_secs"] = time.perf_counter() - t0
        if n != expect_scan:
            raise SystemExit("FAIL: the scan found %d keys, expected %d" % (n, expect_scan))
        r["scan_keys"] = n
        r["scan_keys_per_sec"] = n / r["scan_secs"]
        conn.close()
        db.close()

        ctx = mp.get_context("spawn")
        start = ctx.Event()
        out = ctx.Queue()
        procs = [ctx.Process(target=concurrent_client, args=(i, args, addr, start, out))
                 for i in range(args.clients)]
        for q in procs:
            q.start()
        # Every client has connected and drawn its keys when it waits on `start`; give the
        # spawned interpreters time to get there (bounded), then start them together.
        time.sleep(min(30, 2 + 0.5 * args.clients))
        t0 = time.perf_counter()
        start.set()
        rs = [out.get(timeout=3600) for _ in procs]
        r["conc_secs"] = time.perf_counter() - t0
        for q in procs:
            q.join()
        r["conc_inserts"] = sum(x[1] for x in rs)
        r["conc_commits"] = sum(x[2] for x in rs)
        r["conc_conflicts"] = sum(x[3] for x in rs)
        r["conc_inserts_per_sec"] = r["conc_inserts"] / r["conc_secs"]
        r["conc_abort_rate"] = r["conc_conflicts"] / max(1, r["conc_commits"] + r["conc_conflicts"])

        # Every committed key is there.
        db = open_db(addr, args.cache_size)
        conn = db.open()
        t = conn.root()["map"]
        want = args.n + r["conc_inserts"]
        if len(t) != want:
            raise SystemExit("FAIL: the tree holds %d keys, expected %d" % (len(t), want))
        conn.close()
        db.close()
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
        shutil.rmtree(tmpdir, ignore_errors=True)

    if args.json:
        print(json.dumps(r))
    else:
        for k, v in r.items():
            print("%-26s %s" % (k, v))


if __name__ == "__main__":
    main()
