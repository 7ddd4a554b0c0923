"""Audit trail (semantics §10): one record per call, written to pluggable sinks.

A record is a flat, JSON-serialisable dict with these fields: ``time, agent, session,
step, tool, args_digest, args (redacted canonical JSON text), result_digest, result_size, status,
executed, cache_hit, coalesced, idempotency_key, idempotency_state, reconcile_s, attempts, breaker,
latency_ms, mark, signals, decision, would, error, correction, budget, last_progress_step,
tokens_saved, flags, cache`` (``hit``, ``miss`` or ``none`` for a call that is not a cacheable
read), ``stop`` (the diagnostic when this call reached a limit, else None) and ``call_id``
(the framework's id of the tool call, when the caller passed one).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import logging
import os
import queue
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ._canonical import digest
from ._redact import names_pattern, normalise, redact, redact_json_text, scrub


@runtime_checkable
class AuditSink(Protocol):
    """Receives every audit record as a plain dict (a sink with ``lazy = True`` receives an
    ``AuditRecord`` instead, read like a mapping). Failures are logged, never raised."""

    def write(self, record: Mapping[str, Any]) -> None: ...


FIELDS = (
    "time", "agent", "session", "step", "tool", "args_digest", "args", "result_digest",
    "result_size", "status", "executed", "cache_hit", "coalesced", "idempotency_key",
    "idempotency_state", "reconcile_s", "attempts", "breaker", "latency_ms", "mark", "signals",
    "decision", "would", "error", "correction", "budget", "last_progress_step", "tokens_saved",
    "flags", "cache", "stop", "call_id",
)  # fmt: skip
_INDEX = {name: i for i, name in enumerate(FIELDS)}
_ARGS = _INDEX["args"]


_UNMADE: list[Any] = []  # never written to: a record's values replace it when made


class AuditRecord(Mapping[str, Any]):
    """One call's record: its values in ``FIELDS`` order, read as a mapping.

    Built on every call, so nothing is computed until read: the values come from
    ``make(source)`` on first access (``source`` is the snapshot the pipeline took when
    the call settled), ``args`` (the redacted canonical text) is summarised on first access too,
    and ``to_dict()`` makes the plain dict that serialising sinks receive.
    """

    __slots__ = ("_make", "_source", "_values", "session")

    def __init__(
        self, make: Callable[[tuple[Any, ...]], list[Any]], source: tuple[Any, ...], session: str
    ) -> None:
        self._make: Callable[[tuple[Any, ...]], list[Any]] | None = make
        self._source = source
        self._values: list[Any] = _UNMADE  # not a new list per record: most are never read
        self.session = session

    def __getitem__(self, key: str) -> Any:
        i = _INDEX[key]
        make = self._make
        if make is not None:  # the first read (two racing readers make equal lists)
            self._values = make(self._source)
            self._make = None
            self._source = ()  # the call's arguments and result are no longer held
        values = self._values
        if i == _ARGS and isinstance(values[i], _Canonical):
            values[i] = summarize(values[i].text, values[i].redact)
        return values[i]

    def estimate(self) -> int:
        """About how many bytes this record holds, without making it: until first read it
        holds its arguments' text and its result's text; once made, its values."""
        if self._make is None:
            return _RECORD_BYTES + sum(len(v) for v in self._values if isinstance(v, str))
        canon, text = self._source[:2]  # the pipeline's snapshot starts with the two texts
        return _RECORD_BYTES + len(canon) + len(text or "")

    def __iter__(self) -> Iterator[str]:
        return iter(FIELDS)

    def __len__(self) -> int:
        return len(FIELDS)

    def to_dict(self) -> dict[str, Any]:
        record = {name: self[name] for name in FIELDS}
        record["flags"] = list(record["flags"])
        return record


class _Canonical:
    """Canonical argument text not yet summarised (kept only when short: memory stays bounded)."""

    __slots__ = ("redact", "text")

    def __init__(self, text: str, redact: tuple[str, ...]) -> None:
        self.text = text
        self.redact = redact


def args_field(canonical: str, redact: tuple[str, ...]) -> Any:
    """The ``args`` value of a record: summarised now if long, else on first read."""
    return _Canonical(canonical, redact) if len(canonical) <= 1000 else summarize(canonical, redact)


@runtime_checkable
class ReadableSink(AuditSink, Protocol):
    def records(self, session_id: str) -> list[dict[str, Any]]: ...


def summarize(canonical: str, names: tuple[str, ...], limit: int = 1000) -> str:
    """The audit's ``args``: the canonical JSON text, redacted (secret-named values at any
    depth, secret shapes in values), cut at ``limit`` characters (a JSON string, like
    OpenTelemetry's ``gen_ai.tool.call.arguments``). Long text is redacted without being
    parsed: the cost and the memory stay bounded whatever the argument size."""
    if len(canonical) > limit:
        # only the head is looked at: a repeated call (a cache hit) finds its summary again
        return _summarize_long(canonical[: limit + _HEAD], names, limit)
    return _summarize_short(canonical, names, limit)


_HEAD = 200  # characters past ``limit`` that redact_json_text reads (a pair cut at limit)


@functools.lru_cache(maxsize=256)  # keys and values up to ~2 KB each: ~0.5 MB at most
def _summarize_long(head: str, names: tuple[str, ...], limit: int) -> str:
    # ``head`` is longer than ``limit`` (the whole text was), so it is always cut
    return redact_json_text(head, names, limit)


@functools.lru_cache(maxsize=4096)  # repeated calls repeat their (short) arguments
def _summarize_short(canonical: str, names: tuple[str, ...], limit: int) -> str:
    if not names_pattern(names).search(normalise(canonical)) and scrub(canonical) == canonical:
        return canonical  # the common case: nothing that could be a secret
    try:
        redacted = json.dumps(redact(json.loads(canonical), names), ensure_ascii=False)
    except (ValueError, RecursionError):
        return redact_json_text(canonical, names, limit)
    return redacted if len(redacted) <= limit else redacted[:limit] + "..."


MiB = 1 << 20


class MemoryAudit:
    """Keeps the most recent records of each session in memory (a public test double too).

    Bounded in records and in bytes: per session, the most recent ``per_session`` records
    that fit in about ``per_session_bytes``; across sessions, ``max_bytes`` and
    ``sessions`` (the session written to least recently is dropped first). Bytes are
    estimated without walking records (``AuditRecord.estimate``) on a session's first
    record and every 64th after: the session keeps as many records as its average size
    lets fit (a small call's record is about 620 bytes until read: a flat snapshot of its
    fields and its arguments' and short result's texts).
    """

    lazy = True  # holds AuditRecords; dicts are made when read

    def __init__(
        self,
        *,
        per_session: int = 10_000,
        sessions: int = 1_000,
        per_session_bytes: int = 4 * MiB,
        max_bytes: int = 64 * MiB,
    ) -> None:
        for name, value in (
            ("per_session", per_session),
            ("sessions", sessions),
            ("per_session_bytes", per_session_bytes),
            ("max_bytes", max_bytes),
        ):
            if type(value) is not int or value < 1:
                raise ValueError(f"MemoryAudit {name} must be a positive int, not {value!r}")
        self._by_session: collections.OrderedDict[str, _Kept] = collections.OrderedDict()
        self._per_session = per_session
        self._sessions = sessions
        self._session_bytes = per_session_bytes
        self._max_bytes = max_bytes
        self._bytes = 0  # all sessions, as of each one's last measure
        self._last: str | None = None  # the session written last (the most recent)
        self._lock = threading.Lock()

    def write(self, record: Mapping[str, Any]) -> None:
        sid = record.session if type(record) is AuditRecord else str(record["session"])
        kept = self._by_session.get(sid)  # get and append are atomic: no lock on this path
        if kept is None or (sid is not self._last and sid != self._last):
            kept = self._switch(sid)
        records = kept.records
        records.append(record)  # records are fresh: no copy
        if len(records) > kept.fit:
            # one out for one in, like a full deque: freeing a record frees the call it
            # holds, ~2 us; many at once free whole memory arenas, dearer still
            # not contextlib.suppress: making its object was 5% of a cache hit
            try:  # noqa: SIM105
                records.popleft()
            except IndexError:  # another writer took the last one
                pass
        kept.n += 1  # racy, harmless: it only says when to measure
        if kept.n & 63 == 1:
            self._measure(kept, record)

    def _switch(self, sid: str) -> _Kept:
        """A write to another session than the last one: it becomes the most recent."""
        with self._lock:
            previous = self._by_session.get(self._last) if self._last is not None else None
            if previous is not None:  # its records since its last measure count now
                self._count(previous)
            kept = self._by_session.get(sid)
            if kept is None:
                kept = self._by_session[sid] = _Kept(self._per_session)
            else:
                self._by_session.move_to_end(sid)
            self._last = sid
            self._drop_sessions(keep=sid)
            return kept

    def _count(self, kept: _Kept) -> None:
        held = int(len(kept.records) * kept.avg)
        self._bytes += held - kept.bytes
        kept.bytes = held

    def _measure(self, kept: _Kept, record: Mapping[str, Any]) -> None:
        """Sample this record's size; keep as many of the session's records as fit."""
        size = record.estimate() if type(record) is AuditRecord else record_bytes(record)
        with self._lock:
            kept.avg = size if kept.avg == 0 else (kept.avg * 7 + size) / 8
            kept.fit = fit = max(1, min(self._per_session, int(self._session_bytes // kept.avg)))
            records = kept.records
            while len(records) > fit:  # larger records than before: popleft is atomic
                records.popleft()
            self._count(kept)
            if self._bytes > self._max_bytes:
                self._drop_sessions(keep=self._last)

    def _drop_sessions(self, keep: str | None) -> None:
        """Drop the sessions written to least recently (never ``keep``, the newest)."""
        sessions = self._by_session
        while len(sessions) > 1 and (
            len(sessions) > self._sessions or self._bytes > self._max_bytes
        ):
            sid, oldest = next(iter(sessions.items()))
            if sid == keep:
                break
            del sessions[sid]
            self._bytes -= oldest.bytes

    def records(self, session_id: str) -> list[dict[str, Any]]:
        kept = self._by_session.get(session_id)
        held = kept.records.copy() if kept is not None else ()  # copy(): atomic
        return [r.to_dict() if isinstance(r, AuditRecord) else dict(r) for r in held]

    def bytes_held(self) -> int:
        """The estimated size of the records held, all sessions (as last measured)."""
        return self._bytes


class _Kept:
    __slots__ = ("avg", "bytes", "fit", "n", "records")

    def __init__(self, per_session: int) -> None:
        self.records: collections.deque[Mapping[str, Any]] = collections.deque(maxlen=per_session)
        self.fit = per_session  # records that fit the byte bound, as last measured
        self.n = 0  # records written (approximately: writers race on it)
        self.avg = 0.0  # estimated bytes per record
        self.bytes = 0  # estimated bytes held, as of the last measure


_RECORD_BYTES = 620  # a small call's record, measured with tracemalloc (sessions_memory.py)


def record_bytes(record: Mapping[str, Any]) -> int:
    """An estimate of a plain record's size: its texts plus a fixed part."""
    texts = sum(len(v) for v in record.values() if isinstance(v, str))
    return _RECORD_BYTES + texts


class JSONLSink:
    """Appends one JSON line per record to a file.

    The file stays open between records; each record is one ``write`` to a descriptor
    opened for appending, so nothing returned is left in a buffer (a crash of the process
    loses no record) and writers never interleave within a line (threads of one process
    take turns; other processes appending to a local file land after a whole line). When
    the path no longer names the open file (rotated or removed), the next record reopens
    it. ``close()`` closes the file; a later record opens it again.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._file_id = (0, 0)
        self._closer: weakref.finalize[..., Any] | None = None

    def write(self, record: Mapping[str, Any]) -> None:
        data = (json.dumps(record, ensure_ascii=False, default=str, sort_keys=True) + "\n").encode()
        with self._lock:
            fd = self._current()
            view = memoryview(data)
            while view:  # a regular file takes it in one write unless the disk is full
                view = view[os.write(fd, view) :]

    def _current(self) -> int:
        """The open descriptor, reopened when the path names another file or none."""
        if self._fd is not None:
            try:
                st = os.stat(self.path)
                if (st.st_dev, st.st_ino) == self._file_id:
                    return self._fd
            except FileNotFoundError:
                pass
            self._close()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)  # not inherited
        st = os.fstat(fd)
        self._fd, self._file_id = fd, (st.st_dev, st.st_ino)
        # a sink dropped without close() still closes its file (and warns of nothing)
        self._closer = weakref.finalize(self, os.close, fd)
        return fd

    def _close(self) -> None:
        if self._closer is not None:
            self._closer()  # runs os.close once, whoever calls it first
        self._fd = self._closer = None

    def close(self) -> None:
        with self._lock:
            self._close()

    def records(self, session_id: str) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with self.path.open(encoding="utf-8") as fh:
            rows = (json.loads(line) for line in fh if line.strip())
            return [r for r in rows if r.get("session") == session_id]


class LoggingSink:
    """Sends each record to a ``logging`` logger: the message is the record as JSON, and the
    record itself rides in ``extra`` as the ``headway`` attribute, for JSON log pipelines
    (python-json-logger, structlog's ``ProcessorFormatter`` with ``ExtraAdder``)."""

    def __init__(
        self, logger: str | logging.Logger = "headway.audit", level: int = logging.INFO
    ) -> None:
        self.logger = logging.getLogger(logger) if isinstance(logger, str) else logger
        self.level = level

    def write(self, record: Mapping[str, Any]) -> None:
        if self.logger.isEnabledFor(self.level):
            self.logger.log(
                self.level,
                json.dumps(record, default=str, sort_keys=True),
                extra={"headway": dict(record)},
            )


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


def refusal_record(
    *,
    time: float,
    session: str,
    tool: Any,
    canonical: str | None,
    redact: tuple[str, ...],
    status: str,
    error: str,
    agent: str | None = None,
    call_id: str | None = None,
) -> dict[str, Any]:
    """The record of a call refused before it took a step (semantics §10: one record per
    call): a stopped session's call (``status="stopped"``), or a call whose arguments or
    key cannot be used (``status="refused"``). Nothing ran; ``step`` is None."""
    record: dict[str, Any] = dict.fromkeys(FIELDS)
    record.update(
        time=time,
        agent=agent,
        session=session,
        tool=tool if isinstance(tool, str) else repr(tool)[:200],
        args_digest=None if canonical is None else digest(canonical),
        args=None if canonical is None else summarize(canonical, redact),
        status=status,
        executed=False,
        cache_hit=False,
        coalesced=False,
        attempts=0,
        breaker="closed",
        latency_ms=0.0,
        signals={},
        decision="stop" if status == "stopped" else "refuse",
        error=error,
        correction=False,
        budget={},
        tokens_saved=0,
        flags=[],
        cache="none",
        call_id=call_id,
    )
    return record
