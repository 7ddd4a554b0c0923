"""An embedded store in one SQLite file: WAL, safe for several processes on one machine."""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import StoreError
from ._base import Op, dumps, loads, one_by_one

_SCHEMA = """
CREATE TABLE IF NOT EXISTS headway_kv (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    gc_at REAL
) WITHOUT ROWID;
"""


class SQLiteStore:
    """Every operation is one statement (atomic); ``add`` is an upsert that only replaces a
    row whose garbage-collection time has passed, so a claim is never check-then-insert.

    An event loop runs its operations through ``inline``: at once on the loop's thread (a
    local file answers in microseconds, a thread hop costs more), never waiting for a lock.
    """

    blocking = True

    def __init__(self, path: str, *, timeout_s: float = 10.0) -> None:
        self.path = path
        self._timeout = timeout_s
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._conn().executescript(_SCHEMA)

    def _conn(self, nowait: bool = False) -> sqlite3.Connection:
        # one connection per thread: sqlite3 connections must not be shared across threads;
        # and one that never waits for a lock, for ``inline``
        name = "nowait" if nowait else "conn"
        conn: sqlite3.Connection | None = getattr(self._local, name, None)
        if conn is None:
            try:
                conn = sqlite3.connect(
                    self.path,
                    timeout=0 if nowait else self._timeout,
                    isolation_level=None,
                    check_same_thread=False,
                )
                _to_wal(conn, 0 if nowait else self._timeout)
                conn.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as exc:
                if nowait and _busy(exc):
                    raise BlockingIOError(f"SQLite store {self.path!r} is locked") from exc
                raise StoreError(f"cannot open SQLite store {self.path!r}: {exc}") from exc
            setattr(self._local, name, conn)
            with self._lock:
                self._conns.append(conn)
        return conn

    def _run(self, sql: str, params: tuple[Any, ...]) -> sqlite3.Cursor:
        nowait = getattr(self._local, "inline", False)
        try:
            return self._conn(nowait).execute(sql, params)
        except UnicodeEncodeError as exc:  # a lone surrogate: nothing was written
            raise StoreError(f"SQLite store {self.path!r}: {exc}") from exc
        except sqlite3.Error as exc:
            if nowait and _busy(exc):  # the statement did nothing: the caller may wait for it
                raise BlockingIOError(f"SQLite store {self.path!r} is locked") from exc
            raise StoreError(f"SQLite store {self.path!r}: {exc}") from exc

    def inline(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        """``fn(*args)``, one of this store's operations, on this thread without waiting
        for a lock: ``BlockingIOError`` when another connection holds one (nothing was
        done; run it again in a thread, where it waits up to ``timeout_s``)."""
        local = self._local
        local.inline = True
        try:
            return fn(*args)
        finally:
            local.inline = False

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
        nowait = getattr(self._local, "inline", False)
        conn = self._conn(nowait)
        # a transaction only to commit several writes once (each is atomic on its own)
        writes = sum(op.name != "get" for op in ops) > 1
        try:
            if writes:
                conn.execute("BEGIN IMMEDIATE")  # the write lock first: no upgrade deadlock
            try:
                # the single operations, on this thread's connection: inside the transaction
                results = one_by_one(self, ops)
                if writes:
                    conn.execute("COMMIT")
            except BaseException:
                if writes and conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            # inline, a lock held elsewhere undid the batch (rolled back, or its one write
            # not made): the caller may run it again in a thread, where it waits
            if nowait and _busy(exc):
                raise BlockingIOError(f"SQLite store {self.path!r} is locked") from exc
            raise StoreError(f"SQLite store {self.path!r}: {exc}") from exc
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


def _to_wal(conn: sqlite3.Connection, timeout_s: float) -> None:
    """Switch the file to WAL. SQLite answers BUSY at once, without waiting, while another
    connection holds a lock on a file still in rollback mode (several processes opening a
    new store together): try again until ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    pause = 0.002
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
        except sqlite3.Error as exc:
            if not _busy(exc) or time.monotonic() + pause > deadline:
                raise
        else:
            return
        time.sleep(pause * (0.5 + random.random()))
        pause = min(pause * 2, 0.1)


def _busy(exc: sqlite3.Error) -> bool:
    """Another connection holds the lock (SQLITE_BUSY or SQLITE_LOCKED, extended codes too)."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    return code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
