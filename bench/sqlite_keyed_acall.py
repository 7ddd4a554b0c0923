"""Keyed writes through ``acall`` on a SQLite store: µs per write, in a session kept in the
process and in one shared through the store (a cached tool registered, so every write
also carries the cache generation's write). Run it once per source tree to compare them:

    PYTHONPATH=/path/to/base/src .venv/bin/python bench/sqlite_keyed_acall.py base
    PYTHONPATH=src .venv/bin/python bench/sqlite_keyed_acall.py this
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time

import headway


async def per_write(share: bool, n: int = 1500) -> float:
    with tempfile.TemporaryDirectory() as d:
        store = headway.SQLiteStore(os.path.join(d, "s.db"))
        gov = headway.Governor(store, share_sessions=share, audit=[])
        gov.register("pay", lambda order: {"paid": order}, effect="write")
        gov.register("lookup", lambda key: key, effect="read", ttl=60)
        s = gov.session("s")
        for i in range(200):  # warm: connections open, code paths taken
            await s.acall("pay", {"order": f"w{i}"}, idempotency_key=f"w{i}")
        start = time.perf_counter()
        for i in range(n):
            await s.acall("pay", {"order": f"o{i}"}, idempotency_key=f"o{i}")
        elapsed = time.perf_counter() - start
        gov.close()
        return elapsed / n * 1e6


def main() -> None:
    label = sys.argv[1] if len(sys.argv) > 1 else "this"
    for share in (False, True):
        us = asyncio.run(per_write(share))
        print(f"{label:>6}  shared session={share!s:<5}  {us:8.1f} us per keyed acall")


if __name__ == "__main__":
    main()
