"""Worker processes that share sessions through a store (tests of sessions across workers).

Each worker is a real process with its own ``Governor`` on the same store URL, as in a
deployment. The parent sends it commands and reads back what each call returned, so a
test can hand the steps of one run to whichever worker it likes.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from typing import Any

import headway

PAGE_LINES = 150  # a long page (past 4 KB normalised): compared by digest in the record


class Bank:
    """The world the tools act on, shared by every process: a balance and a tick count."""

    def __init__(self, path: str) -> None:
        self.path = path
        with self._db() as db:
            db.execute("CREATE TABLE IF NOT EXISTS bank (k TEXT PRIMARY KEY, v INTEGER)")
            db.execute("INSERT OR IGNORE INTO bank VALUES ('balance', 90), ('ticks', 0)")

    def _db(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        return db

    def get(self, k: str) -> int:
        with self._db() as db:
            return int(db.execute("SELECT v FROM bank WHERE k = ?", (k,)).fetchone()[0])

    def add(self, k: str, n: int) -> int:
        with self._db() as db:
            db.execute("UPDATE bank SET v = v + ? WHERE k = ?", (n, k))
            return int(db.execute("SELECT v FROM bank WHERE k = ?", (k,)).fetchone()[0])


def make_governor(url: str, options: dict[str, Any], namespace: str, bank_path: str) -> Any:
    bank = Bank(bank_path)
    gov = headway.Governor(store=headway.open_store(url, **options), namespace=namespace)

    def page(n: int) -> str:
        # the same listing whatever the page asked for (a timestamp that changed would be
        # news between calls with other arguments, semantics §3)
        stamp = "2026-12-01T10:00:00"
        lines = [f"order {i}: shipped, 2 items, carrier DHL" for i in range(PAGE_LINES)]
        return f"Orders as of {stamp}\n" + "\n".join(lines)

    gov.register("page", page, effect="read")
    gov.register("search", lambda q: "No results found.", effect="read")
    gov.register(
        "balance", lambda: {"balance": bank.get("balance")}, effect="read", deterministic=True
    )
    gov.register("pay", lambda amount: {"balance": bank.add("balance", -amount)}, effect="write")
    gov.register("tick", lambda: {"ticks": bank.add("ticks", 1)}, effect="write")
    gov.register("lookup", lambda k: {"k": k}, effect="read", deterministic=True)
    return gov


def one_call(
    gov: Any, run_id: str, budgets: dict[str, Any], tool: str, args: dict[str, Any], key: Any
) -> list[Any]:
    """One step, in its own ``with`` block (the worker holds no handle between steps)."""
    try:
        with gov.session(run_id, budgets=headway.Budgets(**budgets)) as s:
            o = s.call(tool, args, idempotency_key=key)
    except headway.Stop as stop:
        kind = "loop" if isinstance(stop, headway.LoopDetected) else "budget"
        return ["stop", kind, stop.diagnostic]
    flags = [f for r in gov.audit_records(run_id)[-1:] for f in r["flags"]]
    return [o.status.value, o.step, o.correction, o.value, flags]


def serve(
    url: str, options: dict[str, Any], namespace: str, bank_path: str, inbox: Any, outbox: Any
) -> None:
    """A worker: runs the commands it is sent until it is sent None."""
    gov = make_governor(url, options, namespace, bank_path)
    try:
        while (msg := inbox.get()) is not None:
            kind, run_id, budgets, payload = msg
            if kind == "call":
                tool, args, key = payload
                outbox.put(one_call(gov, run_id, budgets, tool, args, key))
            elif kind == "until_stop":  # call a tool until the session stops
                tool = payload
                results = []
                while True:
                    r = one_call(gov, run_id, budgets, tool, {}, None)
                    results.append(r)
                    if r[0] == "stop":
                        break
                outbox.put(results)
            elif kind == "batch":  # concurrent calls of one session, on threads
                calls, seed = payload
                outbox.put(_batch(gov, run_id, budgets, calls, seed))
    finally:
        gov.close()


def _batch(
    gov: Any, run_id: str, budgets: dict[str, Any], calls: list[Any], seed: int
) -> list[Any]:
    rnd = random.Random(seed)
    delays = [rnd.uniform(0, 0.003) for _ in calls]
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        time.sleep(delays[i])
        tool, args, key = calls[i]
        results[i] = one_call(gov, run_id, budgets, tool, args, key)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results
