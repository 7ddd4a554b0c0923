"""Keyed-write throughput per store, beside the raw client, in one run.

    python bench/keyed_writes.py [--n 2000]

For each store: headway keyed writes (a new idempotency key each, a trivial tool), the raw
client doing the single atomic claim (SET NX PX with redis-py; one INSERT ... ON CONFLICT
with psycopg; the same upsert with sqlite3), and the raw client doing both operations an
exactly-once write needs (the claim, then the compare-and-set that records the result).
Redis and PostgreSQL rows are skipped when those servers are not reachable.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import headway

REDIS = "redis://127.0.0.1:6379/15"
POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"


def rate(fn: Callable[[int], Any], n: int, start: int) -> float:
    """Operations per second over ``fn(start) .. fn(start + n - 1)`` (fresh keys)."""
    t0 = time.perf_counter()
    for i in range(start, start + n):
        fn(i)
    return n / (time.perf_counter() - t0)


def headway_writes(store: headway.Store, cached_tool: bool = False) -> Callable[[int], Any]:
    gov = headway.Governor(store=store, audit=[])
    gov.register("pay", lambda order: {"ok": order}, effect="write", timeout=None)
    if cached_tool:  # a cached read registered: every write also bumps the cache generation
        gov.register("lookup", lambda q: q, effect="read", deterministic=True)
    s = gov.session(uuid.uuid4().hex)
    run = uuid.uuid4().hex

    def call(i: int) -> Any:
        out = s.call("pay", {"order": i}, idempotency_key=f"{run}-{i}")
        assert out.status is headway.Status.EXECUTED
        return out

    return call


def raw_redis() -> tuple[Callable[[int], Any], Callable[[int], Any]]:
    import redis

    r = redis.Redis.from_url(REDIS)
    swap = r.register_script(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2]) end"
    )
    run = uuid.uuid4().hex
    claim = json.dumps({"state": "in_progress", "owner": "x"})

    def one(i: int) -> Any:
        return r.set(f"raw:{run}:{i}", claim, nx=True, px=86_400_000)

    def two(i: int) -> Any:
        r.set(f"raw2:{run}:{i}", claim, nx=True, px=86_400_000)
        return swap(keys=[f"raw2:{run}:{i}"], args=[claim, json.dumps({"state": "completed"})])

    return one, two


def raw_postgres() -> tuple[Callable[[int], Any], Callable[[int], Any]]:
    import psycopg

    conn = psycopg.connect(POSTGRES, autocommit=True)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS bench_raw (key TEXT PRIMARY KEY, value TEXT, gc_at DOUBLE PRECISION)"
    )
    run = uuid.uuid4().hex

    def one(i: int) -> Any:
        return conn.execute(
            "INSERT INTO bench_raw (key, value, gc_at) VALUES (%s, %s, %s) ON CONFLICT (key) DO NOTHING",
            (f"{run}:{i}", "claim", None),
        ).rowcount

    def two(i: int) -> Any:
        conn.execute(
            "INSERT INTO bench_raw (key, value, gc_at) VALUES (%s, %s, %s) ON CONFLICT (key) DO NOTHING",
            (f"{run}:2:{i}", "claim", None),
        )
        return conn.execute(
            "UPDATE bench_raw SET value = %s WHERE key = %s AND value = %s",
            ("done", f"{run}:2:{i}", "claim"),
        ).rowcount

    return one, two


def raw_sqlite(path: str) -> tuple[Callable[[int], Any], Callable[[int], Any]]:
    import sqlite3

    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS bench_raw (key TEXT PRIMARY KEY, value TEXT, gc_at REAL)"
    )
    run = uuid.uuid4().hex

    def one(i: int) -> Any:
        return conn.execute(
            "INSERT INTO bench_raw VALUES (?, ?, ?) ON CONFLICT(key) DO NOTHING",
            (f"{run}:{i}", "claim", None),
        ).rowcount

    def two(i: int) -> Any:
        conn.execute(
            "INSERT INTO bench_raw VALUES (?, ?, ?) ON CONFLICT(key) DO NOTHING",
            (f"{run}:2:{i}", "claim", None),
        )
        return conn.execute(
            "UPDATE bench_raw SET value = ? WHERE key = ? AND value = ?",
            ("done", f"{run}:2:{i}", "claim"),
        ).rowcount

    return one, two


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument(
        "--cached-tool", action="store_true", help="register a cached read beside the write"
    )
    ap.add_argument("--stores", default="sqlite,redis,postgres")
    args = ap.parse_args()
    n = args.n
    import tempfile

    tmp = tempfile.mkdtemp(prefix="headway-bench-")
    rows: list[tuple[str, float, float, float]] = []
    setups: list[tuple[str, Callable[[], headway.Store], Callable[[], Any]]] = [
        ("sqlite", lambda: headway.SQLiteStore(f"{tmp}/h.db"), lambda: raw_sqlite(f"{tmp}/raw.db")),
        (
            "redis",
            lambda: headway.open_store(REDIS, prefix=f"bench{uuid.uuid4().hex[:6]}:"),
            raw_redis,
        ),
        (
            "postgres",
            lambda: headway.open_store(POSTGRES, prefix=f"bench{uuid.uuid4().hex[:6]}:"),
            raw_postgres,
        ),
    ]
    print(
        f"settings: n={n}, audit off (audit=[]), tool timeout=None (inline), a new key per write,"
        f" {'a' if args.cached_tool else 'no'} cached tool registered"
    )
    for name, make, raw in setups:
        if name not in args.stores.split(","):
            continue
        try:
            store = make()
            one, two = raw()
        except Exception as exc:
            print(f"{name}: skipped ({type(exc).__name__}: {exc})")
            continue
        # interleave small batches so that all three see the same machine conditions (a
        # commit's fsync time varies several-fold from one moment to the next here)
        h = r1 = r2 = 0.0
        write = headway_writes(store, args.cached_tool)
        batch = max(50, n // 20)
        for k in range(20):
            r1 = max(r1, rate(one, batch, k * batch))
            r2 = max(r2, rate(two, batch, k * batch))
            h = max(h, rate(write, batch, k * batch))
        rows.append((name, h, r1, r2))
        store.close()
    print(
        f"{'store':<9} {'headway/s':>10} {'raw 1 op/s':>11} {'raw 2 ops/s':>12} {'x vs 1 op':>10} {'x vs 2 ops':>11}"
    )
    for name, h, r1, r2 in rows:
        print(f"{name:<9} {h:>10.0f} {r1:>11.0f} {r2:>12.0f} {r1 / h:>10.2f} {r2 / h:>11.2f}")


if __name__ == "__main__":
    main()
