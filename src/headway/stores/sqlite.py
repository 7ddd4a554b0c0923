"""An embedded store in one SQLite file: WAL, safe for several processes on one machine."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Sequence
from typing import Any

from ..errors import StoreError
from ._base import Op, dumps, loads, skipped

_LIVE = "(gc_at IS NULL OR gc_at > ?)"
_UPSERT = (
    "INSERT INTO headway_kv (key, value, gc_at) VALUES (?, ?, ?) "
    "ON CONFLICT(key) DO UPDATE SET value = excluded.value, gc_at = excluded.gc_at"
)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS headway_kv (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    gc_at REAL
) WITHOUT ROWID;
"""


class SQLiteStore:
    """Every operation is one statement (atomic); ``add`` is an upsert that only replaces a
    row whose garbage-collection time has passed, so a claim is never check-then-insert."""

    blocking = True

    def __init__(self, path: str, *, timeout_s: float = 10.0) -> None:
        self.path = path
        self._timeout = timeout_s
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._conn().executescript(_SCHEMA)

    def _conn(self) -> sqlite3.Connection:
        # one connection per thread: sqlite3 connections must not be shared across threads
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(
                    self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False
                )
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot open SQLite store {self.path!r}: {exc}") from exc
            self._local.conn = conn
            with self._lock:
                self._conns.append(conn)
        return conn

    def _run(self, sql: str, params: tuple[Any, ...]) -> sqlite3.Cursor:
        try:
            return self._conn().execute(sql, params)
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite store {self.path!r}: {exc}") from exc

    @staticmethod
    def _gc(ttl_s: float | None) -> float | None:
        return None if ttl_s is None else time.time() + ttl_s

    def get(self, key: str) -> Any | None:
        row = self._run(
            "SELECT value FROM headway_kv WHERE key = ? AND (gc_at IS NULL OR gc_at > ?)",
            (key, time.time()),
        ).fetchone()
        return loads(row[0]) if row else None

    def set(self, key: str, value: Any, ttl_s: float | None = None) -> None:
        self._run(
            "INSERT INTO headway_kv (key, value, gc_at) VALUES (?, ?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value, gc_at = excluded.gc_at",
            (key, dumps(value), self._gc(ttl_s)),
        )

    def add(self, key: str, value: Any, ttl_s: float | None = None) -> bool:
        cur = self._run(
            "INSERT INTO headway_kv (key, value, gc_at) VALUES (?, ?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value, gc_at = excluded.gc_at "
            "WHERE headway_kv.gc_at IS NOT NULL AND headway_kv.gc_at <= ?",
            (key, dumps(value), self._gc(ttl_s), time.time()),
        )
        return cur.rowcount == 1

    def swap(self, key: str, expected: Any, value: Any | None, ttl_s: float | None = None) -> bool:
        live = "(gc_at IS NULL OR gc_at > ?)"
        if value is None:
            cur = self._run(
                f"DELETE FROM headway_kv WHERE key = ? AND value = ? AND {live}",
                (key, dumps(expected), time.time()),
            )
        else:
            cur = self._run(
                f"UPDATE headway_kv SET value = ?, gc_at = ? WHERE key = ? AND value = ? AND {live}",
                (dumps(value), self._gc(ttl_s), key, dumps(expected), time.time()),
            )
        return cur.rowcount == 1

    def delete(self, key: str) -> None:
        self._run("DELETE FROM headway_kv WHERE key = ?", (key,))

    def batch(self, ops: Sequence[Op]) -> list[Any]:
        """Several operations, their writes committed once (see ``_base.batch``)."""
        conn = self._conn()
        # a transaction only to commit several writes once (each is atomic on its own)
        writes = sum(op.name != "get" for op in ops) > 1
        try:
            if writes:
                conn.execute("BEGIN IMMEDIATE")  # the write lock first: no upgrade deadlock
            try:
                results = self._each(conn, ops)
                if writes:
                    conn.execute("COMMIT")
            except BaseException:
                if writes and conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite store {self.path!r}: {exc}") from exc
        return results

    def _each(self, conn: sqlite3.Connection, ops: Sequence[Op]) -> list[Any]:
        results: list[Any] = []
        last: Any = None
        now = time.time()
        for op in ops:
            key = op.key
            if skipped(op, last):
                last = None
            elif op.name == "get":
                row = conn.execute(
                    f"SELECT value FROM headway_kv WHERE key = ? AND {_LIVE}", (key, now)
                ).fetchone()
                last = loads(row[0]) if row else None
            elif op.name == "set":
                conn.execute(_UPSERT, (key, dumps(op.value), self._gc(op.ttl_s)))
                last = True
            elif op.name == "add":
                cur = conn.execute(
                    _UPSERT + " WHERE headway_kv.gc_at IS NOT NULL AND headway_kv.gc_at <= ?",
                    (key, dumps(op.value), self._gc(op.ttl_s), now),
                )
                last = cur.rowcount == 1
            elif op.name == "swap" and op.value is None:
                cur = conn.execute(
                    f"DELETE FROM headway_kv WHERE key = ? AND value = ? AND {_LIVE}",
                    (key, dumps(op.expected), now),
                )
                last = cur.rowcount == 1
            elif op.name == "swap":
                cur = conn.execute(
                    f"UPDATE headway_kv SET value = ?, gc_at = ? "
                    f"WHERE key = ? AND value = ? AND {_LIVE}",
                    (dumps(op.value), self._gc(op.ttl_s), key, dumps(op.expected), now),
                )
                last = cur.rowcount == 1
            else:
                raise StoreError(f"unknown store operation {op.name!r}")
            results.append(last)
        return results

    def purge(self) -> int:
        """Delete rows whose garbage-collection time has passed; the number deleted."""
        cur = self._run(
            "DELETE FROM headway_kv WHERE gc_at IS NOT NULL AND gc_at <= ?", (time.time(),)
        )
        return cur.rowcount

    def close(self) -> None:
        with self._lock:
            for conn in self._conns:
                conn.close()
            self._conns.clear()
        self._local = threading.local()
