"""A fake payment service and the fault-injection workers for exactly-once tests.

The ledger is a SQLite file shared by every process: ``charge`` is the side effect (one
row per charge), ``lookup`` is what a real payment API offers for reconciliation.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import time
from pathlib import Path
from typing import Any

import headway


class Ledger:
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        with self._db() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS charges (id INTEGER PRIMARY KEY, key TEXT, amount INTEGER)"
            )

    def _db(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        return db

    def charge(self, key: str, amount: int) -> dict[str, Any]:
        with self._db() as db:
            cur = db.execute("INSERT INTO charges (key, amount) VALUES (?, ?)", (key, amount))
            return {"charge_id": cur.lastrowid, "amount": amount}

    def lookup(self, key: str) -> dict[str, Any] | None:
        with self._db() as db:
            row = db.execute(
                "SELECT id, amount FROM charges WHERE key = ? ORDER BY id LIMIT 1", (key,)
            ).fetchone()
        return None if row is None else {"charge_id": row[0], "amount": row[1]}

    def counts(self) -> dict[str, int]:
        with self._db() as db:
            rows = db.execute("SELECT key, COUNT(*) FROM charges GROUP BY key").fetchall()
        return dict(rows)


class FlakyStore:
    """Wraps a store; raises StoreError on the operations the schedule says."""

    def __init__(self, inner: headway.Store, rnd: random.Random, p: float) -> None:
        self.inner, self.rnd, self.p = inner, rnd, p
        self.blocking = inner.blocking

    def _maybe(self) -> None:
        if self.rnd.random() < self.p:
            raise headway.StoreError("injected: connection reset")

    def get(self, key: str) -> Any:
        self._maybe()
        return self.inner.get(key)

    def set(self, key: str, value: Any, ttl_s: float | None = None) -> None:
        self._maybe()
        self.inner.set(key, value, ttl_s)

    def add(self, key: str, value: Any, ttl_s: float | None = None) -> bool:
        self._maybe()
        return self.inner.add(key, value, ttl_s)

    def swap(self, key: str, expected: Any, value: Any, ttl_s: float | None = None) -> bool:
        self._maybe()
        return self.inner.swap(key, expected, value, ttl_s)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def close(self) -> None:
        self.inner.close()


FAULTS = ["none", "none", "none", "raise_before", "timeout_before", "timeout_after", "store_errors"]


def payment_governor(
    store: Any, ledger: Ledger, plan: dict[str, list[str]], crash: bool = False
) -> headway.Governor:
    gov = headway.Governor(store=store, audit=[], lease_s=0.6, in_progress_wait_s=0.1, breaker=None)

    def pay(order: str, amount: int) -> dict[str, Any]:
        fault = plan.get(order, ["none"]).pop(0) if plan.get(order) else "none"
        if fault == "raise_before":
            raise ValueError("card declined by the network (nothing charged)")
        if fault == "timeout_before":
            raise TimeoutError("gateway timeout before the charge")
        result = ledger.charge(order, amount)
        if fault == "timeout_after":
            raise TimeoutError("gateway timeout after the charge")
        if fault == "crash_after" and crash:
            os._exit(17)  # killed between the side effect and recording its result
        return result

    gov.register(
        "pay",
        pay,
        effect="write",
        breaker=False,
        reconcile=lambda key, args: ledger.lookup(args["order"]),
    )
    return gov


def worker(
    url: str,
    options: dict[str, Any],
    ledger_path: str,
    keys: list[str],
    seed: int,
    out_path: str,
    crash: bool = False,
) -> None:
    """Drive every key to an acknowledged result under a random fault schedule."""
    rnd = random.Random(seed)
    ledger = Ledger(ledger_path)
    plan = {k: [rnd.choice(FAULTS) for _ in range(3)] for k in keys}
    if crash:
        for k in rnd.sample(keys, max(1, len(keys) // 20)):
            plan[k] = ["crash_after"]
    inner = headway.open_store(url, **options)
    store = FlakyStore(inner, rnd, p=0.0)
    gov = payment_governor(store, ledger, plan, crash=crash)
    with open(out_path, "a", encoding="utf-8") as out:
        for i, key in enumerate(keys):
            s = gov.session(f"{seed}-{i}")
            store.p = 0.3 if "store_errors" in plan.get(key, []) else 0.0
            for _ in range(200):
                o = s.call("pay", {"order": key, "amount": 100}, idempotency_key=key)
                if o.status in (headway.Status.EXECUTED, headway.Status.REPLAYED):
                    out.write(json.dumps({"key": key, "result": o.value}) + "\n")
                    out.flush()
                    break
                store.p = 0.0 if rnd.random() < 0.5 else store.p
                time.sleep(0.01 if o.status is headway.Status.UNKNOWN else 0.002)
            else:
                out.write(json.dumps({"key": key, "unresolved": True}) + "\n")
    inner.close()
