"""Audit trail (semantics §10): one record per call, written to pluggable sinks.

A record is a flat, JSON-serialisable dict with these fields: ``time, agent, session,
step, tool, args_digest, args (redacted canonical JSON text), result_digest, result_size, status,
executed, cache_hit, coalesced, idempotency_key, idempotency_state, reconcile_s, attempts, breaker,
latency_ms, mark, signals, decision, would, error, correction, budget, last_progress_step,
tokens_saved, flags, cache`` (``hit``, ``miss`` or ``none`` for a call that is not a cacheable
read), ``stop`` (the diagnostic when this call reached a limit, else None) and ``call_id``
(the framework's id of the tool call, when the caller passed one).

This module owns the sinks: the ``AuditSink`` protocol, ``MemoryAudit`` (bounded, in
memory), ``JSONLSink`` and ``LoggingSink``. The record itself (its fields, its lazy form,
the summary of its arguments) is ``_audit_record``; ``SQLiteAuditSink`` is
``_audit_sqlite``. Both are re-exported here, where callers import them.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import threading
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ._audit_blocks import BLOCK, Blocks, unpack
from ._audit_record import (
    FIELDS,
    AuditRecord,
    args_field,
    record_bytes,
    refusal_record,
    summarize,
)
from ._audit_sqlite import SQLiteAuditSink

__all__ = [
    "FIELDS",
    "AuditRecord",
    "AuditSink",
    "JSONLSink",
    "LoggingSink",
    "MemoryAudit",
    "ReadableSink",
    "SQLiteAuditSink",
    "args_field",
    "record_bytes",
    "refusal_record",
    "summarize",
]


@runtime_checkable
class AuditSink(Protocol):
    """Receives every audit record as a plain dict (a sink with ``lazy = True`` receives an
    ``AuditRecord`` instead, read like a mapping). Failures are logged, never raised."""

    def write(self, record: Mapping[str, Any]) -> None: ...


@runtime_checkable
class ReadableSink(AuditSink, Protocol):
    def records(self, session_id: str) -> list[dict[str, Any]]: ...


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
        if kept is None or sid != self._last:
            kept = self._switch(sid)
        records = kept.records
        recent = records.recent
        recent.append(record)  # records are fresh: no copy
        if len(recent) >= BLOCK or records.packed + len(recent) > kept.fit:
            # a block to pack, or one out for one in (like a full deque): freeing a
            # record frees the call it holds, ~2 us; many at once free whole memory
            # arenas, dearer still
            with self._lock:
                records.tidy(kept.fit)
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
            kept.records.tidy(fit)  # larger records than before: fewer fit
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
        if kept is None:
            return []
        with self._lock:
            held = kept.records.snapshot()
        return [
            r.to_dict() if isinstance(r, AuditRecord) else dict(r) for r in unpack(held, session_id)
        ]

    def bytes_held(self) -> int:
        """The estimated size of the records held, all sessions (as last measured)."""
        return self._bytes


class _Kept:
    __slots__ = ("avg", "bytes", "fit", "n", "records")

    def __init__(self, per_session: int) -> None:
        self.records = Blocks()
        self.fit = per_session  # records that fit the byte bound, as last measured
        self.n = 0  # records written (approximately: writers race on it)
        self.avg = 0.0  # estimated bytes per record
        self.bytes = 0  # estimated bytes held, as of the last measure


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
