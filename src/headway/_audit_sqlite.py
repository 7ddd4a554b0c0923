"""``SQLiteAuditSink``: audit records in the ``headway_audit`` table of a SQLite file,
written on the caller's thread or, with ``background=True``, in batches by a thread of the
sink's own (``_Batches``).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import logging
import queue
import sqlite3
import threading
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ._audit_record import AuditRecord
from ._redact import scrub


class SQLiteAuditSink:
    """The ``headway_audit`` table in a SQLite file (the store's file, or another).

    ``background=True`` takes SQLite off the caller's path: ``write`` queues the record
    and a thread of the sink's own writes it, with whatever queued up while it wrote the
    last batch, one transaction per batch. The caller waits neither for SQLite's lock and
    commit nor for the record's JSON. ``records()``, ``flush()``, ``close()``, a sink
    dropped without ``close()`` and the interpreter's exit write what is queued first; at
    most ``max_queued`` records wait (then ``write`` waits for the thread: none is
    dropped). A crash of the process loses the records it had not written yet.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        background: bool = False,
        max_queued: int = 10_000,
    ) -> None:
        if type(max_queued) is not int or max_queued < 1:
            raise ValueError(
                f"SQLiteAuditSink max_queued must be a positive int, not {max_queued!r}"
            )
        self.path = str(path)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(
            self.path, check_same_thread=False, isolation_level=None, timeout=10
        )
        self._conn.execute("PRAGMA journal_mode=WAL")
        # as the SQLite store: no fsync per record (WAL stays consistent; a power cut may
        # lose the last records, a crash of the process loses none)
        self._conn.execute("PRAGMA synchronous=NORMAL")
        # ids in the order written: a rowid (no record is ever deleted, so none is reused).
        # Not AUTOINCREMENT, which writes its counter's page (sqlite_sequence) on every
        # commit; a table made with it by an older version is read and written as it is
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS headway_audit (id INTEGER PRIMARY KEY, "
            "session TEXT NOT NULL, step INTEGER, tool TEXT, status TEXT, record TEXT NOT NULL)"
        )
        self._conn.execute(
            "CREATE INDEX IF NOT EXISTS headway_audit_session ON headway_audit (session, id)"
        )
        self.lazy = background  # queued as they come: made into dicts by the thread
        self._batches: _Batches | None = None
        if background:
            write = functools.partial(_insert, self._conn, self._lock, self.path)
            self._batches = _Batches(write, max_queued)
            # the thread holds the batches, not the sink: a dropped sink is finalized
            self._finalizer = weakref.finalize(self, self._batches.close)

    def write(self, record: Mapping[str, Any]) -> None:
        if self._batches is not None:  # a plain mapping is copied: the caller may change it
            self._batches.put(record if type(record) is AuditRecord else dict(record))
            return
        with self._lock:
            self._conn.execute(_INSERT, _row(record))

    def flush(self) -> None:
        """Wait until every record written so far is in the table (background only)."""
        if self._batches is not None:
            self._batches.flush()

    def records(self, session_id: str) -> list[dict[str, Any]]:
        self.flush()
        with self._lock:
            rows = self._conn.execute(
                "SELECT record FROM headway_audit WHERE session = ? ORDER BY id", (session_id,)
            ).fetchall()
        return [json.loads(r[0]) for r in rows]

    def close(self) -> None:
        if self._batches is not None:
            self._finalizer()  # writes what is queued, once
        with self._lock:
            self._conn.close()


_INSERT = "INSERT INTO headway_audit (session, step, tool, status, record) VALUES (?, ?, ?, ?, ?)"
_log = logging.getLogger("headway")


def _row(record: Mapping[str, Any]) -> tuple[Any, ...]:
    plain = record.to_dict() if type(record) is AuditRecord else record
    return (
        str(plain.get("session")),
        plain.get("step"),
        plain.get("tool"),
        plain.get("status"),
        json.dumps(plain, default=str, sort_keys=True),
    )


def _insert(
    conn: sqlite3.Connection, lock: threading.Lock, path: str, batch: list[Mapping[str, Any]]
) -> None:
    """A batch in one transaction; a failure is logged (as a sink's failure always is)."""
    try:
        rows = [_row(record) for record in batch]
        with lock:
            conn.execute("BEGIN")
            try:
                conn.executemany(_INSERT, rows)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
    except Exception as exc:
        _log.error(
            "audit sink SQLiteAuditSink(%r) failed, %d records not written: %s",
            path,
            len(batch),
            scrub(f"{type(exc).__name__}: {exc}"),
        )


class _Batches:
    """Records queued by callers, written by one daemon thread: what queued up while it
    wrote a batch is the next batch. A flush is a marker in the queue, set once what was
    queued before it is written.

    A record put on an event loop is held until the loop's next turn, when the caller's
    step is done (the proxy has written its answer): woken at once, the thread would take
    a CPU and the interpreter's lock from the call being answered (on 2 cores: the answer
    0.1 ms later, measured)."""

    def __init__(self, write: Callable[[list[Mapping[str, Any]]], None], limit: int) -> None:
        self._write = write
        self._limit = limit
        # a C queue: a put is one call, and wakes the thread without Python code
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self._held: collections.deque[Mapping[str, Any]] = collections.deque()
        self._holding = threading.Lock()  # held records go to the queue in their order
        self._thread = threading.Thread(target=self._work, name="headway-audit")
        self._thread.daemon = True  # the exit writes what is queued (weakref.finalize)
        self._thread.start()

    def put(self, record: Mapping[str, Any]) -> None:
        if self._closed:
            raise ValueError("the audit sink is closed")
        if self._queue.qsize() >= self._limit:  # bounded: wait for the thread to catch up
            self.flush()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._queue.put(record)
            return
        self._held.append(record)
        # one per record: should this loop close first, the next put, flush or close (the
        # interpreter's exit too) moves it
        loop.call_soon(self._release)

    def _release(self) -> None:
        with self._holding:
            while self._held:
                self._queue.put(self._held.popleft())

    def _work(self) -> None:
        while True:
            batch: list[Mapping[str, Any]] = []
            marks: list[threading.Event] = []
            item = self._queue.get()
            while True:
                if type(item) is threading.Event:
                    marks.append(item)
                elif item is not _CLOSE:
                    batch.append(item)
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if batch:
                self._write(batch)
            for mark in marks:
                mark.set()
            if self._closed and self._queue.empty():
                return

    def flush(self) -> None:
        self._release()
        mark = threading.Event()
        self._queue.put(mark)
        while not mark.wait(0.1):
            if not self._thread.is_alive():
                return

    def close(self) -> None:
        self._closed = True
        self._release()
        self._queue.put(_CLOSE)
        if self._thread is not threading.current_thread():
            self._thread.join()


_CLOSE = object()  # wakes the thread to see that the sink is closed
