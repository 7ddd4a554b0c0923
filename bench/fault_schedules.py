"""Randomized fault schedules on every store (more than CI runs): late effects, failures
after acting, retries near the lease, clocks 30 s apart, records lost by the store; then
writes that act and lose their answer (``lost_answers``).

    .venv/bin/python bench/fault_schedules.py [schedules per store, default 2000]

Prints duplicates and lost acknowledged results per store (both must be 0).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import headway
from conftest import POSTGRES_URL, REDIS_URL
from faults import run_lost_answers, run_schedules


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    with tempfile.TemporaryDirectory() as tmp:
        stores = {
            "memory": headway.MemoryStore,
            "sqlite": lambda: headway.open_store(f"sqlite:///{tmp}/bench.db"),
            "redis": lambda: headway.open_store(REDIS_URL, prefix=f"bench{time.time_ns()}:"),
            "postgres": lambda: headway.open_store(POSTGRES_URL, prefix=f"bench{time.time_ns()}:"),
        }
        for name, make in stores.items():
            try:
                store = make()
            except Exception as exc:
                print(f"{name:9s} skipped: {exc}")
                continue
            start = time.perf_counter()
            counts = run_schedules(store, n, seed=7)
            store.close()
            print(f"{name:9s} {counts}  {time.perf_counter() - start:.1f} s")
    lost_answers(n)


def lost_answers(n: int) -> None:
    """Writes that act and then lose their answer (a reset, a broken pipe, an ended stream,
    a cut answer) or are refused before acting, keyed and unkeyed, two workers per store:
    duplicates, lost acknowledged results and keys not COMPLETED must all be 0."""
    with tempfile.TemporaryDirectory() as tmp:
        stores = {
            "memory": headway.MemoryStore,
            "sqlite": lambda: headway.open_store(f"sqlite:///{tmp}/lost.db"),
            "redis": lambda: headway.open_store(REDIS_URL, prefix=f"lost{time.time_ns()}:"),
            "postgres": lambda: headway.open_store(POSTGRES_URL, prefix=f"lost{time.time_ns()}:"),
        }
        for name, make in stores.items():
            try:
                store = make()
            except Exception as exc:
                print(f"lost answers {name:9s} skipped: {exc}")
                continue
            start = time.perf_counter()
            counts = run_lost_answers(store, n, seed=7)
            store.close()
            print(f"lost answers {name:9s} {counts}  {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
