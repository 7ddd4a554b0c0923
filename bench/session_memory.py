"""Memory of one session after many calls, with the default audit and without one.

    python bench/session_memory.py [--calls 50000]

One session of a Governor with every default (the in-memory store and audit), calling in
turn a cached search (its arguments repeat over 500 queries, as an agent's do), a page
fetch (an uncached read, new arguments each call) and a file write (an unkeyed write:
each one makes the session's cached reads stale). Memory is what tracemalloc counts as
grown over the run, after a garbage collection, split into the audit (the difference
with the same run under ``audit=[]``), the store's entries (cached results and cache
generations) and the rest (session state: detector window, counters, caches of keys).
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc
from typing import Any

import headway

MiB = 1 << 20


def run(calls: int, audit: bool) -> tuple[int, int, headway.Governor]:
    options: dict[str, Any] = {} if audit else {"audit": []}
    gov = headway.Governor(no_progress_limit=10**9, **options)
    gov.register(
        "search",
        lambda q, page: {"hits": [f"doc {q} {page} {j}" for j in range(5)], "total": 5},
        effect="read",
        deterministic=True,
    )
    gov.register("fetch", lambda url: "page text " * 20 + url, effect="read")
    gov.register("save", lambda path, text: {"ok": True, "path": path}, effect="write")
    s = gov.session("memory")
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(calls):
            kind = i % 3
            if kind == 0:
                s.call("search", {"q": f"query {i % 500}", "page": 1})
            elif kind == 1:
                s.call("fetch", {"url": f"https://example.com/{i}"})
            else:
                s.call("save", {"path": f"/tmp/f{i}.txt", "text": "content " * 10})
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - base
        store = sum(
            stat.size
            for stat in tracemalloc.take_snapshot().statistics("filename")
            if stat.traceback[0].filename.endswith(("stores/memory.py", "stores/_base.py"))
        )
    finally:
        tracemalloc.stop()
    return grown, store, gov


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=50_000)
    calls = ap.parse_args().calls
    with_audit, _, gov = run(calls, audit=True)
    without, store_only, _ = run(calls, audit=False)
    assert gov.audit is not None
    kept = len(gov.audit_records("memory"))
    print(f"settings: {calls} calls in one session, every Governor default, tracemalloc")
    print(f"{'':<36} {'MiB':>8}")
    print(f"{'one session, default audit':<36} {with_audit / MiB:>8.2f}")
    print(f"{'one session, audit=[]':<36} {without / MiB:>8.2f}")
    print(f"{'  of which the audit':<36} {(with_audit - without) / MiB:>8.2f}")
    print(f"{'  of which store entries':<36} {store_only / MiB:>8.2f}")
    print(f"{'  the rest (session state)':<36} {(without - store_only) / MiB:>8.2f}")
    print(f"audit records kept: {kept} (estimated {gov.audit.bytes_held() / MiB:.2f} MiB)")
    print(f"target: one session <= 8 MiB with the default audit: {with_audit / MiB:.2f} MiB")


if __name__ == "__main__":
    main()
