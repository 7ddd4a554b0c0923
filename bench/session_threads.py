"""Threads sharing one session: throughput of 8 threads against one, side by side.

    python bench/session_threads.py [--calls 4000] [--rounds 5] [--threads 8] [--store URL]

One Governor with the defaults (MemoryStore, the default 30 s timeout, so every executed
call hands off to the worker pool, and the default audit), one session per kind of call:
``read`` reads a new record (about 600 characters of text, different each time: judged,
never served from the cache, never a loop); ``cached`` repeats 64 deterministic reads
(served from the cache); ``write`` is an unkeyed write, ``keyed`` a keyed one (a new key
each call). One thread makes all the calls, then ``--threads`` threads split
the same number of calls on the same session; rounds alternate the two and each figure is
the median round. On CPython the GIL runs one thread at a time, so 8 threads cannot beat
one: the ratio measures what contention (locks held across slow work, lock convoys) costs.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import threading
import time
import uuid
from collections.abc import Callable

import headway


def governor(store: str | None) -> headway.Governor:
    gov = headway.Governor(
        store=None if store is None else headway.open_store(store), no_progress_limit=10**9
    )

    def lookup(order: int) -> str:
        lines = [f"order {order}: status shipped, carrier ups, parcel {order * 7919 % 10**6}"]
        lines += [f"item {i}: sku-{(order + i) % 997} qty {i % 3 + 1}" for i in range(16)]
        return "\n".join(lines)

    gov.register("lookup", lookup, effect="read")
    gov.register("price", lambda sku: {"sku": sku, "eur": 3}, effect="read", deterministic=True)
    gov.register("note", lambda order: {"noted": order}, effect="write")
    return gov


def call_of(kind: str, session: headway.Session) -> Callable[[int], object]:
    if kind == "read":
        return lambda i: session.call("lookup", {"order": i})
    if kind == "cached":
        # a cycle longer than the detector window: served from the cache, never corrected
        return lambda i: session.call("price", {"sku": i % 64})
    if kind == "write":
        return lambda i: session.call("note", {"order": i})
    return lambda i: session.call("note", {"order": i}, idempotency_key=f"k{i}")


def run(
    call: Callable[[int], object], orders: itertools.count[int], calls: int, threads: int
) -> float:
    barrier = threading.Barrier(threads + 1)
    lock = threading.Lock()

    def worker() -> None:
        barrier.wait()
        for _ in range(calls // threads):
            with lock:  # fresh arguments: never a cached read
                order = next(orders)
            call(order)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in pool:
        t.join()
    return (calls // threads * threads) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--kinds", default="read,cached,write,keyed")
    ap.add_argument("--store", help="a store URL (redis://..., sqlite:///...): a shared session")
    a = ap.parse_args()
    print(f"store: {a.store or 'MemoryStore (the default)'}")
    print(f"{'calls':<8} {'1 thread /s':>12} {f'{a.threads} threads /s':>13} {'ratio':>6}")
    for kind in a.kinds.split(","):
        gov = governor(a.store)
        run_id = uuid.uuid4().hex  # a fresh record in a shared store
        call = call_of(kind, gov.session(f"threads-{kind}-{run_id}"))
        orders = itertools.count()
        run(call, orders, a.calls // 4, 1)  # warm up (and fill the cache)
        one: list[float] = []
        many: list[float] = []
        for _ in range(a.rounds):
            one.append(run(call, orders, a.calls, 1))
            many.append(run(call, orders, a.calls, a.threads))
        o, m = statistics.median(one), statistics.median(many)
        print(f"{kind:<8} {o:>12.0f} {m:>13.0f} {m / o:>6.2f}")
        gov.close()


if __name__ == "__main__":
    main()
