"""``Context``: what the decision pipeline needs from a Governor, and nothing more.

The Governor builds one when it is made (``_governor``) and hands it to every call. The
modules below it (``_pipeline``, ``_reading``, ``_steps``, ``_settle``, ``_shared``,
``_attempts``, ``_epochs``, ``idempotency``) take it instead of the Governor, so none of
them imports the modules that make Governors and open sessions, and a reader sees here
all that a call can reach: the tools, the store, the clocks, the policies and limits,
the audit sinks, and the registries a call shares with the other calls of its Governor
(breakers, single flights, held cache entries, the keyed writes).

The policies are frozen; the registries are the Governor's own mutable objects, shared
by reference (the Governor registers tools into ``specs`` and ``session_cached``).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ._call import describe
from ._effects import Flights
from ._recent import Recent
from ._redact import scrub
from ._spec import ToolSpec
from .audit import AuditSink
from .breaker import Breaker
from .stores import Store

if TYPE_CHECKING:
    from ._call import Call
    from ._effects import Plan
    from ._leases import Held
    from ._state import SessionState

log = logging.getLogger("headway")


class KeyedWrites(Protocol):
    """The keys' state machine the pipeline drives for writes (``idempotency.Writes``)."""

    def before(self, ctx: Context, st: SessionState, c: Call) -> Plan[Held | bool | None]: ...

    def after(self, ctx: Context, st: SessionState, c: Call, ticket: Held | bool) -> Plan[None]: ...

    def interrupted(self, ctx: Context, c: Call, ticket: Held | bool) -> Plan[None]: ...

    def shadow(self, ctx: Context, c: Call) -> Plan[None]: ...

    def shadow_record(self, ctx: Context, c: Call) -> Plan[None]: ...

    def claim_ahead(self, ctx: Context, c: Call) -> None: ...

    def unclaim(self, ctx: Context, c: Call) -> Plan[None]: ...


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Context:
    """A Governor's tools, store, clocks, policies and shared registries, as calls see them.

    The fields of the same names on the Governor say what each policy means."""

    # the tools: the Governor's registry, read here; ``declare`` adds a tool something
    # else runs (the safe default: an unkeyed write) when a call brings its runner
    specs: Mapping[str, ToolSpec]
    declare: Callable[[str], ToolSpec]
    session_cached: set[str]  # tools caching reads per session (writes must invalidate)
    ignore_fields: tuple[str, ...]
    # the store and where its keys live
    store: Store
    namespace: str
    workspace: str | None
    # time: ``clock`` stamps records (the wall clock), ``timer`` measures durations here
    clock: Callable[[], float]
    timer: Callable[[], float]
    sleep: Callable[[float], Any] | None
    rng: Callable[[], float]
    # policies and limits
    enforce: bool
    max_cached_bytes: int
    cache_gc_s: float
    idempotency_ttl_s: float
    session_ttl_s: float
    in_progress_wait_s: float
    lease_s: float | None
    deadline_s: float | None
    store_failure: str
    default_breaker: Breaker
    on_retry: Callable[[dict[str, Any]], None] | None
    is_error: Callable[[Any], bool] | None
    # the audit: every sink, and whether it takes the lazy record (``AuditRecord``)
    sinks: tuple[AuditSink, ...]
    sink_modes: tuple[tuple[AuditSink, bool], ...]
    # the registries every call of the Governor shares
    writes: KeyedWrites
    flights: Flights
    held: Recent[str]  # cache entries this worker stored or served for shared sessions
    breakers: dict[str, dict[str, Any]]  # the state of each in-process breaker
    breaker_lock: threading.Lock

    def spec(self, name: str) -> ToolSpec | None:
        return self.specs.get(name)

    def has_session_cache(self) -> bool:
        """Whether any registered tool keeps a session-scoped read cache."""
        return bool(self.session_cached)

    def session_key(self, session_id: str) -> str:
        return f"{self.namespace}:sess:{{{session_id}}}"

    def generation_key(self, session_id: str) -> str:
        return f"{self.namespace}:gen:{{{session_id}}}"

    def idempotency_record_key(self, key: str) -> str:
        return f"{self.namespace}:idem:{{{key}}}"

    def breaker_key(self, tool: str) -> str:
        return f"{self.namespace}:breaker:{{{tool}}}"

    def report_sink_error(self, sink: AuditSink, exc: Exception) -> None:
        log.error("audit sink %s failed: %s", type(sink).__name__, scrub(describe(exc)))
