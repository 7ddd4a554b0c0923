"""Randomized contention on one shared session, on every shared store (more than CI runs):
several workers and threads on one session, cached reads and keyed writes, store errors
at random and just after writes ran.

    .venv/bin/python bench/contention_schedules.py [rounds per store, default 10] [calls, default 100]

Prints, per store, the stale reads after an acknowledged write, duplicates and lost
acknowledged results (all three must be 0), summed over the rounds (a new seed each).
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import headway
from conftest import POSTGRES_URL, REDIS_URL, purge_prefix
from contention import run_contention


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("sqlite", "redis", "postgres"):
            total: Counter[str] = Counter()
            start = time.perf_counter()
            try:
                for r in range(rounds):
                    prefix = f"bench{time.time_ns()}:"
                    if name == "sqlite":
                        path = f"{tmp}/contention-{r}.db"
                        make = lambda path=path: headway.SQLiteStore(path)  # noqa: E731
                    else:
                        url = REDIS_URL if name == "redis" else POSTGRES_URL
                        make = lambda url=url, prefix=prefix: headway.open_store(url, prefix=prefix)  # noqa: E731
                    total.update(run_contention(make, calls=calls, seed=31 + r))
                    if name != "sqlite":
                        purge_prefix(url, prefix)
            except headway.StoreError as exc:
                print(f"{name:9s} skipped: {exc}")
                continue
            print(f"{name:9s} {dict(total)}  {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
