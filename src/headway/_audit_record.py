"""The audit record: its ``FIELDS``, the lazy ``AuditRecord`` a call's settlement makes,
how its ``args`` are summarised (redacted, cut), and the record of a call refused before
it took a step. The sinks that receive records are ``audit``'s.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ._canonical import digest
from ._redact import names_pattern, normalise, redact, redact_json_text, scrub

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
        # one shared empty list, not a list per record: most records are never read, and
        # an unread record's size is pinned (tests/test_audit.py, bench/sessions_memory.py)
        self._values: list[Any] = _UNMADE
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
            return RECORD_BYTES + sum(len(v) for v in self._values if isinstance(v, str))
        canon, text = self._source[:2]  # the pipeline's snapshot starts with the two texts
        return RECORD_BYTES + len(canon) + len(text or "")

    def __iter__(self) -> Iterator[str]:
        return iter(FIELDS)

    def __len__(self) -> int:
        return len(FIELDS)

    def to_dict(self) -> dict[str, Any]:
        record = {name: self[name] for name in FIELDS}
        record["flags"] = list(record["flags"])
        return record


def packable(record: Mapping[str, Any]) -> tuple[Any, Any]:
    """What ``marshal`` writes of a record (``_audit_blocks``), and what makes its values:
    an unread record's snapshot (made when read, as before), a read one's values, a plain
    record as a dict."""
    if type(record) is not AuditRecord:
        return dict(record), None
    source = record._source  # before _make: a racing reader clears _make, then _source
    make = record._make
    if make is not None and source:
        return source, make
    record["args"]  # summarised: the values hold only what marshal writes
    return list(record._values), None


def unpacked(entry: Any, make: Any, session: str) -> Mapping[str, Any]:
    """The record ``packable`` gave ``entry`` for (``make`` as it gave it)."""
    if type(entry) is tuple:
        return AuditRecord(make, entry, session)
    if type(entry) is list:
        record = AuditRecord(make, (), session)
        record._make, record._values = None, entry
        return record
    return entry  # type: ignore[no-any-return]


class _Canonical:
    """Canonical argument text not yet summarised (kept only when short: memory stays bounded)."""

    __slots__ = ("redact", "text")

    def __init__(self, text: str, redact: tuple[str, ...]) -> None:
        self.text = text
        self.redact = redact


def args_field(canonical: str, redact: tuple[str, ...]) -> Any:
    """The ``args`` value of a record: summarised now if long, else on first read."""
    return _Canonical(canonical, redact) if len(canonical) <= 1000 else summarize(canonical, redact)


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


RECORD_BYTES = 620  # a small call's record, measured with tracemalloc (sessions_memory.py)


def record_bytes(record: Mapping[str, Any]) -> int:
    """An estimate of a plain record's size: its texts plus a fixed part."""
    texts = sum(len(v) for v in record.values() if isinstance(v, str))
    return RECORD_BYTES + texts


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
