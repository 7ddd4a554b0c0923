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

import collections
import functools
import json
import logging
import os
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

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
        self._values: list[Any] = []
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


class MemoryAudit:
    """Keeps the most recent records of each session in memory (a public test double too)."""

    lazy = True  # holds AuditRecords; dicts are made when read

    def __init__(self, *, per_session: int = 10_000, sessions: int = 1_000) -> None:
        self._by_session: collections.OrderedDict[str, collections.deque[dict[str, Any]]] = (
            collections.OrderedDict()
        )
        self._per_session = per_session
        self._sessions = sessions
        self._lock = threading.Lock()

    def write(self, record: Mapping[str, Any]) -> None:
        sid = record.session if type(record) is AuditRecord else str(record["session"])
        queue = self._by_session.get(sid)  # get and append are atomic: a lock only to add
        if queue is None:
            with self._lock:
                queue = self._by_session.get(sid)
                if queue is None:
                    queue = self._by_session[sid] = collections.deque(maxlen=self._per_session)
                    while len(self._by_session) > self._sessions:
                        self._by_session.popitem(last=False)
        queue.append(record)  # type: ignore[arg-type]  # records are fresh: no copy

    def records(self, session_id: str) -> list[dict[str, Any]]:
        queue = self._by_session.get(session_id)
        kept = queue.copy() if queue is not None else ()  # copy(): atomic, unlike iterating
        return [r.to_dict() if isinstance(r, AuditRecord) else dict(r) for r in kept]


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
    """The ``headway_audit`` table in a SQLite file (the store's file, or another)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(
            self.path, check_same_thread=False, isolation_level=None, timeout=10
        )
        self._conn.execute("PRAGMA journal_mode=WAL")
        # as the SQLite store: no fsync per record (WAL stays consistent; a power cut may
        # lose the last records, a crash of the process loses none)
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS headway_audit (id INTEGER PRIMARY KEY AUTOINCREMENT, "
            "session TEXT NOT NULL, step INTEGER, tool TEXT, status TEXT, record TEXT NOT NULL)"
        )
        self._conn.execute(
            "CREATE INDEX IF NOT EXISTS headway_audit_session ON headway_audit (session, id)"
        )

    def write(self, record: Mapping[str, Any]) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT INTO headway_audit (session, step, tool, status, record) VALUES (?, ?, ?, ?, ?)",
                (
                    str(record.get("session")),
                    record.get("step"),
                    record.get("tool"),
                    record.get("status"),
                    json.dumps(record, default=str, sort_keys=True),
                ),
            )

    def records(self, session_id: str) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT record FROM headway_audit WHERE session = ? ORDER BY id", (session_id,)
            ).fetchall()
        return [json.loads(r[0]) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
