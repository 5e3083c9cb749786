#!/usr/bin/env python3
"""Write skew under ZODB/ZEO without readCurrent, and how readCurrent stops it.

Two counters a and b start at 0; the invariant is a + b <= 1. Each of two
transactions, on its own ZEO client, reads a and b, sees a + b == 0, and so
increments one of them: T1 increments a, T2 increments b. They interleave:

    T1 reads a, b      T2 reads a, b
    T1 a += 1, commits
                       T2 b += 1, commits?

ZODB checks at commit only the objects a transaction writes (snapshot
isolation), so without readCurrent both commit and a + b == 2: the invariant
is broken although each transaction kept it. With connection.readCurrent(obj)
on the counter each reads but does not write, T2's commit fails with
ReadConflictError (a was changed after T2 read it), and the retry sees a == 1
and does not increment.

Exit status 0 when both outcomes are as described, 1 otherwise.
"""

import os
import shutil
import sys
import tempfile

import transaction
from ZODB.POSException import ConflictError

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from counters import Counter, open_db, start_server  # noqa: E402


def scenario(addr, read_current):
    dbs = [open_db(addr, server_sync=True) for _ in range(3)]
    try:
        tm0 = transaction.TransactionManager()
        c0 = dbs[0].open(tm0)
        tm0.begin()
        root = c0.root()
        root["a"], root["b"] = Counter(), Counter()
        tm0.commit()

        tms = [transaction.TransactionManager() for _ in range(2)]
        conns = [dbs[i + 1].open(tms[i]) for i in range(2)]

        def start(i):
            tms[i].begin()
            r = conns[i].root()
            a, b = r["a"], r["b"]
            return a, b, a.value + b.value

        def write(i, a, b):
            mine, other = (a, b) if i == 0 else (b, a)
            mine.value += 1
            if read_current:
                conns[i].readCurrent(other)

        a1, b1, s1 = start(0)
        a2, b2, s2 = start(1)
        print("  T1 reads a + b = %d, T2 reads a + b = %d" % (s1, s2))
        assert s1 == 0 and s2 == 0
        write(0, a1, b1)
        tms[0].commit()
        print("  T1 increments a, commits")
        write(1, a2, b2)
        try:
            tms[1].commit()
            print("  T2 increments b, commits")
        except ConflictError as e:
            tms[1].abort()
            print("  T2 increments b, commit fails: %s" % type(e).__name__)
            a2, b2, s2 = start(1)
            print("  T2 retried reads a + b = %d%s"
                  % (s2, ", increments nothing" if s2 >= 1 else ""))
            if s2 == 0:
                write(1, a2, b2)
            tms[1].commit()

        tm0.begin()
        final = root["a"].value + root["b"].value
        tm0.abort()
        print("  final a + b = %d: invariant a + b <= 1 %s"
              % (final, "holds" if final <= 1 else "BROKEN (write skew)"))
        return final
    finally:
        for db in dbs:
            db.close()


def main():
    tmpdir = tempfile.mkdtemp(prefix="zodb-skew-")
    server = None
    try:
        server, addr = start_server(tmpdir)
        print("without readCurrent:")
        f_plain = scenario(addr, read_current=False)
        print("with readCurrent:")
        f_rc = scenario(addr, read_current=True)
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        shutil.rmtree(tmpdir, ignore_errors=True)
    ok = f_plain == 2 and f_rc == 1
    print("as expected" if ok else "UNEXPECTED outcome")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
