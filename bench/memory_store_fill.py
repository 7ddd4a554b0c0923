"""MemoryStore's cost per operation as it fills, side by side in one run.

    python bench/memory_store_fill.py

Two full stores, one bounded at 1,000 entries and one at 100,000 (every insert also evicts
the oldest entry, the worst case): the time of an ``add`` (a keyed write's claim) and a
``set`` of a new key, a ``set`` of a session's cache entry (100 sessions, each one's cache
epoch moving on every 1,000 entries: the entries it made stale are dropped), and a ``get``,
in each. Prints microseconds per operation and the
ratio full / small (target: at most 2x, i.e. O(1) at any fill level).
"""

from __future__ import annotations

import itertools
import timeit

import headway

VALUE = {"state": "completed", "result": {"charge": "ch_1", "cents": 500}, "args": "d1"}


def filled(n: int) -> headway.MemoryStore:
    store = headway.MemoryStore(max_entries=n)
    for i in range(n):
        store.set(f"k{i}", VALUE)
    return store


def cache_key(n: int) -> str:
    epoch = n // 1_000
    return f'hw:cache:{{run-{n % 100}#{epoch}.{epoch}.0}}:search:1:{{"q":{n}}}'


def main() -> None:
    stores = {"1,000 entries": filled(1_000), "100,000 entries (full)": filled(100_000)}
    fresh = itertools.count()
    results: dict[str, dict[str, float]] = {name: {} for name in stores}
    for _ in range(5):  # interleaved rounds, best of each: both see the same machine
        for name, store in stores.items():
            ops = {
                "add (new key)": lambda s=store: s.add(f"n{next(fresh)}", VALUE),
                "set (new key)": lambda s=store: s.set(f"n{next(fresh)}", VALUE),
                "set (cache entry)": lambda s=store: s.set(cache_key(next(fresh)), VALUE),
                "get": lambda s=store: s.get("k999"),
            }
            for op, fn in ops.items():
                t = timeit.timeit(fn, number=20_000) / 20_000 * 1e6
                results[name][op] = min(results[name].get(op, float("inf")), t)
    small, full = results["1,000 entries"], results["100,000 entries (full)"]
    print(f"{'operation':<18} {'1,000 (us)':>11} {'100,000 (us)':>13} {'ratio':>6}")
    for op in small:
        print(f"{op:<18} {small[op]:>11.2f} {full[op]:>13.2f} {full[op] / small[op]:>6.2f}")


if __name__ == "__main__":
    main()
