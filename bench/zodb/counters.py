#!/usr/bin/env python3
"""Shared-counters workload against ZODB/ZEO: the baseline thor is compared with.

N client processes (default 8), each with its own ZEO client (``ZEO.DB``) and
connection, talk to one ZEO server (``runzeo`` in a subprocess, on a fresh
FileStorage in a temporary directory, fsync on every commit as FileStorage
does). Each transaction:

* picks k = uniform 1..4 distinct counters out of 64 (``--counters``) and reads
  them (loads each counter's state; a counter is its own persistent object);
* with probability 1/4 is read-only: it only reads, then commits;
* otherwise increments a random non-empty subset of the counters it read (each
  read counter is in the subset with probability 1/2, redrawn if empty), and
  with ``--read-current`` (the default) calls ``connection.readCurrent(obj)`` on
  every counter it read but does not write, so that ZEO checks at commit that
  those reads are still current (without it ZODB gives snapshot isolation and
  allows write skew; see write_skew.py).

On ``ConflictError`` (which includes ``ReadConflictError``, what a failed
``readCurrent`` check raises) the transaction is aborted, an abort is counted,
and by default the *same* transaction (same counters, same read-only choice,
same write subset) is retried at once (``--retry same``); ``--retry new`` draws
a fresh random transaction instead.

Clients run ``--warmup`` seconds, then ``--seconds`` seconds are measured: the
commits and aborts that complete inside that window are counted. At the end the
sum of all counters is checked against the number of committed increments (all
of them, warm-up and tail included); a mismatch makes the script fail.
"""

import argparse
import json
import multiprocessing as mp
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


# --------------------------------------------------------------------------
# The persistent counter. Module-level, so that the spawned children and the
# stored pickles agree on its class path (counters.Counter).

import persistent  # noqa: E402


class Counter(persistent.Persistent):
    """One counter: its own persistent object, so conflicts are per counter.

    It has no _p_resolveConflict, so two concurrent writes of the same counter
    are a real conflict (ZODB does not merge them)."""

    def __init__(self):
        self.value = 0


# --------------------------------------------------------------------------
# The server.

def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_server(tmpdir):
    """Start runzeo on a fresh FileStorage; return (process, (host, port))."""
    port = free_port()
    data = os.path.join(tmpdir, "Data.fs")
    log = open(os.path.join(tmpdir, "zeo.log"), "wb")
    runzeo = os.path.join(os.path.dirname(sys.executable), "runzeo")
    if os.path.exists(runzeo):
        cmd = [runzeo]
    else:
        cmd = [sys.executable, "-m", "ZEO.runzeo"]
    cmd += ["-a", "127.0.0.1:%d" % port, "-f", data]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise SystemExit("runzeo exited with %s; see %s"
                             % (proc.returncode, log.name))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise SystemExit("runzeo did not listen within 30 s")
            time.sleep(0.05)
    return proc, ("127.0.0.1", port)


def open_db(addr, server_sync=False):
    import ZEO
    # An in-memory ZEO client cache (the default without a `client` name).
    return ZEO.DB(addr, server_sync=server_sync, wait_timeout=30)


def populate(addr, n):
    import transaction
    from BTrees.IOBTree import IOBTree
    # Store the class as counters.Counter, not __main__.Counter.
    sys.path.insert(0, HERE)
    from counters import Counter as StoredCounter
    db = open_db(addr)
    try:
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        tm.begin()
        root = conn.root()
        tree = IOBTree()
        for i in range(n):
            tree[i] = StoredCounter()
        root["counters"] = tree
        tm.commit()
        conn.close()
    finally:
        db.close()


def read_back(addr, n):
    import transaction
    db = open_db(addr, server_sync=True)
    try:
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        tm.begin()
        tree = conn.root()["counters"]
        values = [tree[i].value for i in range(n)]
        tm.abort()
        conn.close()
        return values
    finally:
        db.close()


# --------------------------------------------------------------------------
# A client process.

def client(cid, addr, args, barrier, results):
    import transaction
    from ZODB.POSException import ConflictError

    rng = random.Random((args.seed or 0) * 1000003 + cid if args.seed is not None
                        else None)
    db = open_db(addr, server_sync=args.server_sync)
    tm = transaction.TransactionManager(explicit=True)
    conn = db.open(tm)
    tm.begin()
    tree = conn.root()["counters"]
    counters = [tree[i] for i in range(args.counters)]  # objects, still ghosts
    tm.abort()

    n = args.counters
    read_current = args.read_current

    def draw():
        k = rng.randint(1, 4)
        ids = rng.sample(range(n), k)
        if rng.random() < 0.25:
            return ids, ()
        while True:
            writes = [i for i in ids if rng.random() < 0.5]
            if writes:
                return ids, writes

    commits = aborts = ro_commits = 0          # inside the window
    commit_lat = []                            # tm.commit() of a committed try
    txn_lat = []                               # first begin .. commit, retries in
    total_increments = 0                       # all, for the correctness check
    total_commits = total_aborts = 0

    barrier.wait()
    t0 = time.monotonic()
    w_start = t0 + args.warmup
    w_end = w_start + args.seconds

    txn = None
    first_begin = None
    cpu_start = None
    while True:
        now = time.monotonic()
        if cpu_start is None and now >= w_start:
            cpu_start = time.process_time()
        if now >= w_end:
            break
        if txn is None:
            txn = draw()
            first_begin = now
        ids, writes = txn
        tm.begin()
        try:
            objs = [counters[i] for i in ids]
            for o in objs:
                o.value            # the read: loads the state if a ghost
            for i in writes:
                counters[i].value += 1
            if read_current and writes:
                ws = set(writes)
                for i in ids:
                    if i not in ws:
                        conn.readCurrent(counters[i])
            c0 = time.monotonic()
            tm.commit()
            c1 = time.monotonic()
        except ConflictError:
            tm.abort()
            c1 = time.monotonic()
            total_aborts += 1
            if w_start <= c1 < w_end:
                aborts += 1
            if args.retry == "new":
                txn = None
            continue
        total_commits += 1
        total_increments += len(writes)
        if w_start <= c1 < w_end:
            commits += 1
            if not writes:
                ro_commits += 1
            commit_lat.append(c1 - c0)
            txn_lat.append(c1 - first_begin)
        txn = None

    cpu = time.process_time() - (cpu_start if cpu_start is not None
                                 else time.process_time())
    conn.close()
    db.close()
    results.put(dict(cpu_s=cpu,
        client=cid, commits=commits, aborts=aborts, ro_commits=ro_commits,
        commit_lat=commit_lat, txn_lat=txn_lat,
        total_commits=total_commits, total_aborts=total_aborts,
        total_increments=total_increments))


# --------------------------------------------------------------------------
# CPU accounting: the machine is shared, so say how much CPU others took.

def system_busy_s():
    """CPU seconds all CPUs spent not idle since boot (from /proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return (sum(v[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    i = min(len(xs) - 1, max(0, int(round(p / 100.0 * len(xs) + 0.5)) - 1))
    return xs[i]


def versions():
    from importlib.metadata import version
    return {p: version(p) for p in ("ZODB", "ZEO", "persistent", "BTrees",
                                    "transaction")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--counters", type=int, default=64)
    rc = ap.add_mutually_exclusive_group()
    rc.add_argument("--read-current", dest="read_current", action="store_true",
                    default=True, help="readCurrent() the read-only counters "
                    "of an updating transaction (default; serializable)")
    rc.add_argument("--no-read-current", dest="read_current",
                    action="store_false", help="plain ZODB: snapshot "
                    "isolation, write skew possible")
    ap.add_argument("--retry", choices=("same", "new"), default="same",
                    help="after an abort, retry the same transaction "
                    "(default) or draw a new one")
    ap.add_argument("--server-sync", action="store_true",
                    help="ZEO server_sync: a round trip at each transaction "
                    "start to see the latest commits (default off, as ZEO)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--json", action="store_true",
                    help="print one JSON object instead of the text report")
    args = ap.parse_args()
    if args.counters < 4:
        ap.error("--counters must be at least 4")

    tmpdir = tempfile.mkdtemp(prefix="zodb-counters-")
    server = None
    try:
        server, addr = start_server(tmpdir)
        populate(addr, args.counters)

        ctx = mp.get_context("spawn")
        barrier = ctx.Barrier(args.clients + 1)
        results = ctx.Queue()
        procs = [ctx.Process(target=client,
                             args=(c, addr, args, barrier, results))
                 for c in range(args.clients)]
        for p in procs:
            p.start()
        # Sample the machine's and the server's CPU over the measured window.
        barrier.wait(timeout=120)
        t0 = time.monotonic()
        time.sleep(args.warmup)
        sys0, srv0, wall0 = system_busy_s(), proc_cpu_s(server.pid), time.monotonic()
        time.sleep(max(0.0, t0 + args.warmup + args.seconds - time.monotonic()))
        sys1, srv1, wall1 = system_busy_s(), proc_cpu_s(server.pid), time.monotonic()
        rs = []
        deadline = time.monotonic() + args.warmup + args.seconds + 120
        while len(rs) < args.clients:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SystemExit("clients did not report in time")
            try:
                rs.append(results.get(timeout=min(left, 5)))
            except Exception:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    raise SystemExit("client process failed: exit %s"
                                     % dead[0].exitcode)
        for p in procs:
            p.join()
        rs.sort(key=lambda r: r["client"])

        values = read_back(addr, args.counters)
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
        shutil.rmtree(tmpdir, ignore_errors=True)

    commits = sum(r["commits"] for r in rs)
    aborts = sum(r["aborts"] for r in rs)
    ro = sum(r["ro_commits"] for r in rs)
    commit_lat = [x for r in rs for x in r["commit_lat"]]
    txn_lat = [x for r in rs for x in r["txn_lat"]]
    increments = sum(r["total_increments"] for r in rs)
    total = sum(values)
    ok = total == increments
    window = wall1 - wall0
    server_cpu = srv1 - srv0
    clients_cpu = sum(r["cpu_s"] for r in rs)
    other_cpu = max(0.0, (sys1 - sys0) - server_cpu - clients_cpu)
    cpu = dict(cores=os.cpu_count(),
               server=server_cpu / window, clients=clients_cpu / window,
               other=other_cpu / window,
               loadavg_1m=os.getloadavg()[0])
    out = dict(
        clients=args.clients, seconds=args.seconds, warmup=args.warmup,
        counters=args.counters, read_current=args.read_current,
        retry=args.retry, server_sync=args.server_sync,
        commits=commits, aborts=aborts, read_only_commits=ro,
        commits_per_s=commits / args.seconds,
        abort_rate=aborts / (commits + aborts) if commits + aborts else 0.0,
        commit_latency_ms=dict(p50=pct(commit_lat, 50) * 1e3,
                               p99=pct(commit_lat, 99) * 1e3),
        txn_latency_ms=dict(p50=pct(txn_lat, 50) * 1e3,
                            p99=pct(txn_lat, 99) * 1e3),
        cpu_cores_used=cpu,
        per_client_commits=[r["commits"] for r in rs],
        per_client_aborts=[r["aborts"] for r in rs],
        counter_sum=total, committed_increments=increments,
        consistent=ok, versions=versions(), python=sys.version.split()[0],
        date=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    if args.json:
        print(json.dumps(out))
    else:
        print("ZODB %s / ZEO %s, %d clients, %d counters, %.0f s (+%.0f s "
              "warm-up), readCurrent %s, retry %s%s"
              % (out["versions"]["ZODB"], out["versions"]["ZEO"],
                 args.clients, args.counters, args.seconds, args.warmup,
                 "on" if args.read_current else "off", args.retry,
                 ", server_sync" if args.server_sync else ""))
        print("committed   %8d  (%d read-only)" % (commits, ro))
        print("aborted     %8d" % aborts)
        print("commits/s   %8.1f" % out["commits_per_s"])
        print("abort rate  %8.1f %%  (aborts / (commits + aborts))"
              % (100 * out["abort_rate"]))
        print("commit() latency   p50 %.2f ms  p99 %.2f ms"
              % (out["commit_latency_ms"]["p50"],
                 out["commit_latency_ms"]["p99"]))
        print("txn latency        p50 %.2f ms  p99 %.2f ms  (first try .. "
              "commit, retries included)"
              % (out["txn_latency_ms"]["p50"], out["txn_latency_ms"]["p99"]))
        print("per-client commits %s" % out["per_client_commits"])
        print("per-client aborts  %s" % out["per_client_aborts"])
        print("CPU over the window, in cores of %d: ZEO server %.2f, clients "
              "%.2f, everything else on the machine %.2f"
              % (cpu["cores"], cpu["server"], cpu["clients"], cpu["other"]))
        print("check: sum of counters %d, committed increments %d: %s"
              % (total, increments, "OK" if ok else "MISMATCH"))
    if not ok:
        print("FAIL: sum of counters %d != committed increments %d"
              % (total, increments), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
