"""Randomized fault schedules on every store (more than CI runs): late effects, failures
after acting, retries near the lease, clocks 30 s apart, records lost by the store; then
writes that act and lose their answer.

    .venv/bin/python bench/fault_schedules.py [schedules per store, default 2000]

Prints duplicates and lost acknowledged results per store (both must be 0).
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import headway
from conftest import POSTGRES_URL, REDIS_URL
from faults import run_lost_answers, run_schedules


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    on_each_store("", "bench", lambda store: run_schedules(store, n, seed=7))
    # writes that act and then lose their answer (a reset, a broken pipe, an ended stream,
    # a cut answer) or are refused before acting, keyed and unkeyed, two workers per store:
    # duplicates, lost acknowledged results and keys not COMPLETED must all be 0
    on_each_store("lost answers ", "lost", lambda store: run_lost_answers(store, n, seed=7))


def on_each_store(label: str, prefix: str, schedule: Callable[[Any], Any]) -> None:
    """Run ``schedule`` on a fresh store of each kind and print its counts."""
    with tempfile.TemporaryDirectory() as tmp:
        stores = {
            "memory": headway.MemoryStore,
            "sqlite": lambda: headway.open_store(f"sqlite:///{tmp}/{prefix}.db"),
            "redis": lambda: headway.open_store(REDIS_URL, prefix=f"{prefix}{time.time_ns()}:"),
            "postgres": lambda: headway.open_store(
                POSTGRES_URL, prefix=f"{prefix}{time.time_ns()}:"
            ),
        }
        for name, make in stores.items():
            try:
                store = make()
            except Exception as exc:
                print(f"{label}{name:9s} skipped: {exc}")
                continue
            start = time.perf_counter()
            counts = schedule(store)
            store.close()
            print(f"{label}{name:9s} {counts}  {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
