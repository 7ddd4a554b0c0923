"""A fleet on one store: N worker processes x 8 threads running 1,000 agent sessions.

    python bench/fleet.py [--sessions 1000] [--calls 20] [--workers 1 2] [--stores redis postgres]

Each worker process opens the store (``headway.open_store``) and one ``Governor`` with its
defaults (sessions shared through the store, in-memory audit, detectors, 30 s timeouts);
its threads take the sessions dealt to them and run them interleaved, one call of each in
turn, as agents waiting on their models would. A session's calls, in a cycle of five: a
keyed write (a new key each time), a cached read of a new item, an uncached read, the
cached read again (served from the store), another uncached read. Tools answer at once
(``--tool-ms`` adds a sleep to the uncached reads and the writes): the figures are what
headway and the store cost.

Printed per store and per N: calls/s over the whole run, p50/p99 of one call, store bytes
per call at the socket (each worker sums ``TCP_INFO`` over its sockets to the store; for
Redis also the server's ``INFO stats`` counters, which count every client of the server),
errors, stops, and the keyed writes checked at the end: a fresh process-side Governor
replays every key, and each must come back replayed with the result its caller got, its
tool having run exactly once in the whole fleet (lost: a result not replayed as
acknowledged; duplicates: a tool run more than once for one key). Last, the throughput of
N=2 over N=1 with its target and the load average.

Redis uses its own db (``--redis-db``, emptied of this run's keys after) and PostgreSQL its
own schema (``search_path``; the schema is dropped after).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import threading
import time
import uuid
from collections import Counter
from typing import Any

import headway
from _probes import SocketBytes, pg_backend_cpu, redis_net

PG = "postgresql://postgres@127.0.0.1:5432/test"
PORTS = {"redis": 6379, "postgres": 5432}
THREADS = 8
TARGET = 1.6


def url_of(store: str, a: argparse.Namespace, schema: str) -> str:
    if store == "redis":
        return f"redis://127.0.0.1:6379/{a.redis_db}"
    return f"{PG}?options=-csearch_path%3D{schema}&application_name={schema}"


def governor(url: str, prefix: str, tool_ms: float, ran: Counter[str] | None) -> Any:
    gov = headway.Governor(store=headway.open_store(url, prefix=prefix))
    lock = threading.Lock()
    pause = tool_ms / 1000

    def pay(order: str, amount: int) -> dict[str, Any]:
        if pause:
            time.sleep(pause)
        if ran is not None:
            with lock:
                ran[order] += 1
        return {"paid": order, "amount": amount}

    def search(query: str) -> list[str]:
        if pause:
            time.sleep(pause)
        return [f"{query}-{i}" for i in range(3)]

    gov.register("pay", pay, effect="write")
    gov.register("price", lambda sku: {"sku": sku, "eur": 3}, effect="read", deterministic=True)
    gov.register("search", search, effect="read")
    return gov


def step(s: Any, sid: str, k: int) -> tuple[str | None, Any]:
    """Call ``k`` of session ``sid``: (the write's key or None, the outcome)."""
    cycle, kind = divmod(k, 5)
    if kind == 0:
        key = f"{sid}-w{cycle}"
        return key, s.call("pay", {"order": key, "amount": cycle}, idempotency_key=key)
    if kind in (1, 3):
        return None, s.call("price", {"sku": f"{sid}-{cycle}"})
    return None, s.call("search", {"query": f"{sid} {k}"})


def worker(
    url: str,
    prefix: str,
    port: int,
    sids: list[str],
    calls: int,
    tool_ms: float,
    ready: Any,
    go: Any,
    results: Any,
    release: Any,
) -> None:
    ran: Counter[str] = Counter()
    gov = governor(url, prefix, tool_ms, ran)
    probe = SocketBytes(port)
    lanes = [sids[t::THREADS] for t in range(THREADS)]
    latencies: list[list[float]] = [[] for _ in range(THREADS)]
    acked: list[dict[str, Any]] = [{} for _ in range(THREADS)]
    errors: list[Counter[str]] = [Counter() for _ in range(THREADS)]
    statuses: list[Counter[str]] = [Counter() for _ in range(THREADS)]

    def warm(t: int) -> None:  # a pool connection per thread, before the clock starts
        s = gov.session(f"{prefix}warm-{os.getpid()}-{t}")
        for k in range(5):
            step(s, s.id, k)

    def lane(t: int) -> None:
        handles: dict[str, Any] = {}
        for k in range(calls):
            for sid in lanes[t]:
                t0 = time.perf_counter()
                try:
                    s = handles.get(sid)
                    if s is None:
                        s = handles[sid] = gov.session(sid)
                    key, out = step(s, sid, k)
                except headway.Stop as stop:
                    errors[t][f"stop: {type(stop).__name__}"] += 1
                    continue
                except Exception as exc:
                    errors[t][type(exc).__name__] += 1
                    continue
                finally:
                    latencies[t].append(time.perf_counter() - t0)
                statuses[t][str(out.status)] += 1
                if key is not None and out.status in (
                    headway.Status.EXECUTED,
                    headway.Status.REPLAYED,
                ):
                    acked[t][key] = out.value

    threads = [threading.Thread(target=warm, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    ran.clear()
    ready.set()
    go.wait()
    before = probe.read()
    cpu = time.process_time()
    start = time.perf_counter()
    threads = [threading.Thread(target=lane, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    end = time.perf_counter()
    cpu = time.process_time() - cpu
    after = probe.read()
    results.put(
        {
            "start": start,
            "end": end,
            "cpu": cpu,
            "latencies": [x for lat in latencies for x in lat],
            "acked": {k: v for a in acked for k, v in a.items()},
            "errors": sum(errors, Counter()),
            "statuses": sum(statuses, Counter()),
            "ran": ran,
            "sent": after[0] - before[0],
            "received": after[1] - before[1],
        }
    )
    release.wait()  # the store's connections open until the server's CPU is read
    gov.close()


def verify(
    url: str, prefix: str, acked: dict[str, Any], sids: list[str], calls: int
) -> dict[str, int]:
    """Replay every keyed write from a fresh Governor: each must come back replayed with
    the result its caller got, its tool not run again."""
    ran: Counter[str] = Counter()
    gov = governor(url, prefix, 0.0, ran)
    keys = [(sid, k) for sid in sids for k in range(0, calls, 5)]
    bad: Counter[str] = Counter()
    lock = threading.Lock()

    def check(part: list[tuple[str, int]]) -> None:
        for sid, k in part:
            try:
                key, out = step(gov.session(sid), sid, k)
            except Exception as exc:
                with lock:
                    bad[f"error {type(exc).__name__}"] += 1
                continue
            with lock:
                if key not in acked:
                    bad["never acknowledged"] += 1
                elif out.status is not headway.Status.REPLAYED or out.value != acked[key]:
                    bad["lost"] += 1

    threads = [threading.Thread(target=check, args=(keys[t::THREADS],)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    gov.close()
    bad["run again at the check"] = sum(ran.values())
    bad["keys"] = len(keys)
    return dict(bad)


def run(store: str, n: int, a: argparse.Namespace, schema: str) -> dict[str, Any]:
    url = url_of(store, a, schema)
    prefix = f"fleet{uuid.uuid4().hex[:8]}:"
    sids = [f"{prefix}s{i}" for i in range(a.sessions)]
    ctx = mp.get_context("spawn")
    go, results, release = ctx.Event(), ctx.Queue(), ctx.Event()
    readies = [ctx.Event() for _ in range(n)]
    procs = [
        ctx.Process(
            target=worker,
            args=(
                url,
                prefix,
                PORTS[store],
                sids[w::n],
                a.calls,
                a.tool_ms,
                readies[w],
                go,
                results,
                release,
            ),
        )
        for w in range(n)
    ]
    for p in procs:
        p.start()
    for r in readies:
        r.wait()
    net0 = server(store, url, schema)
    load = os.getloadavg()[0]
    go.set()
    got = [results.get() for _ in procs]
    net1 = server(store, url, schema)
    release.set()
    for p in procs:
        p.join()
    acked: dict[str, Any] = {}
    for g in got:
        acked.update(g["acked"])
    ran = sum((g["ran"] for g in got), Counter())
    check = verify(url, prefix, acked, sids, a.calls)
    lat = sorted(x for g in got for x in g["latencies"])
    total = len(lat)
    wall = max(g["end"] for g in got) - min(g["start"] for g in got)
    out = {
        "store": store,
        "n": n,
        "calls": total,
        "rate": total / wall,
        "p50": lat[total // 2] * 1e6,
        "p99": lat[min(total - 1, int(total * 0.99))] * 1e6,
        "cpu": sum(g["cpu"] for g in got) / total * 1e6,
        "socket": sum(g["sent"] + g["received"] for g in got) / total,
        "sent": sum(g["sent"] for g in got) / total,
        "server": None if store != "redis" else (net1[0] - net0[0] + net1[1] - net0[1]) / total,
        "server_cpu": (net1[2] - net0[2]) / total * 1e6,
        "errors": sum((g["errors"] for g in got), Counter()),
        "statuses": sum((g["statuses"] for g in got), Counter()),
        "duplicates": sum(c - 1 for c in ran.values() if c > 1) + check["run again at the check"],
        "lost": check.get("lost", 0)
        + check.get("never acknowledged", 0)
        + sum(v for k, v in check.items() if k.startswith("error")),
        "check": check,
        "keys": check["keys"],
        "load": load,
    }
    cleanup(store, url, prefix)
    return out


def server(store: str, url: str, schema: str) -> tuple[int, int, float]:
    """The server's counters: Redis's bytes in and out and CPU (every client's), the CPU
    of the PostgreSQL backends serving this run's workers."""
    if store == "redis":
        return redis_net(url)
    return 0, 0, pg_backend_cpu(PG, schema)


def cleanup(store: str, url: str, prefix: str) -> None:
    if store == "redis":
        import redis

        r = redis.Redis.from_url(url)
        batch = list(r.scan_iter(match=f"{prefix}*", count=1000))
        for i in range(0, len(batch), 1000):
            r.delete(*batch[i : i + 1000])
        r.close()


def schema_do(sql: str) -> None:
    import psycopg

    with psycopg.connect(PG, autocommit=True) as c:
        c.execute(sql)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=20, help="calls per session (a multiple of 5)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--stores", nargs="+", default=["redis", "postgres"])
    ap.add_argument("--rounds", type=int, default=1, help="runs of each N, taking turns")
    ap.add_argument("--tool-ms", type=float, default=0.0, help="sleep in writes and searches")
    ap.add_argument("--redis-db", type=int, default=11)
    a = ap.parse_args()
    schema = f"fleet_{uuid.uuid4().hex[:8]}"
    print(
        f"{a.sessions} sessions x {a.calls} calls (2 keyed writes, 4 cached reads, 4 uncached"
        f" reads in 10), {THREADS} threads per worker, tools {a.tool_ms} ms;"
        f" Redis db {a.redis_db}, PostgreSQL schema {schema}; {os.cpu_count()} cores"
    )
    print(
        "| store | N | calls/s | p50 / p99 per call (us) | CPU per call (us): workers / server | store bytes per call: socket"
        " (sent) / server | served from cache | errors | stops | lost / duplicates (keys) | load |"
    )
    print("|---|---:|---:|---|---:|---|---:|---|---|---|---:|")
    rates: dict[tuple[str, int], list[float]] = {}
    loads: list[float] = []
    for store in a.stores:
        if store == "postgres":
            schema_do(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        try:
            for r in range(a.rounds):
                for n in a.workers if r % 2 == 0 else a.workers[::-1]:
                    o = run(store, n, a, schema)
                    rates.setdefault((store, n), []).append(o["rate"])
                    loads.append(o["load"])
                    errors = {k: v for k, v in o["errors"].items() if not k.startswith("stop")}
                    stops = {k: v for k, v in o["errors"].items() if k.startswith("stop")}
                    server_cpu = f" / {o['server_cpu']:,.0f}"
                    server = "" if o["server"] is None else f" / {o['server']:,.0f}"
                    print(
                        f"| {store} | {n} | {o['rate']:,.0f} | {o['p50']:,.0f} / {o['p99']:,.0f}"
                        f" | {o['cpu']:,.0f}{server_cpu} | {o['socket']:,.0f} ({o['sent']:,.0f}){server}"
                        f" | {o['statuses']['cached'] / o['calls']:.0%}"
                        f" | {sum(errors.values())}{f' {errors}' if errors else ''} | {sum(stops.values())}"
                        f" | {o['lost']} / {o['duplicates']} ({o['keys']:,})"
                        f" | {o['load']:.1f} |",
                        flush=True,
                    )
        finally:
            if store == "postgres":
                schema_do(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    for store in a.stores:
        one, two = rates.get((store, 1)), rates.get((store, 2))
        if one and two:
            ratio = statistics.median(two) / statistics.median(one)
            met = "met" if ratio >= TARGET else "NOT met"
            print(
                f"{store}: throughput N=2 / N=1 = {ratio:.2f}x (target >= {TARGET}x: {met});"
                f" load average {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores"
            )
    print(
        "targets: 0 errors, 0 lost, 0 duplicates; store bytes <= 2 KB a keyed write or cached read"
    )


if __name__ == "__main__":
    main()
