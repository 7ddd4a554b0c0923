"""OpenTelemetry spans and Prometheus metrics, as audit sinks.

Both read the audit record of each call (see ``headway.audit``), so they see exactly what
the audit sees and cost nothing unless they are configured::

    gov = headway.Governor(audit=[headway.MemoryAudit(), OpenTelemetrySink(), PrometheusSink()])

``opentelemetry-api`` (extra ``otel``) and ``prometheus-client`` (extra ``prometheus``) are
imported when a sink is built, never before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from .integrations._common import require

_SIGNALS = ("cycle", "repeat", "repeated_error", "same_result", "near_duplicate")
_BREAKER = {"closed": 0.0, "half_open": 1.0, "open": 2.0}
_MAX_UNKNOWN = 100_000
_SAVED = frozenset(("cached", "replayed", "corrected"))


def correction_signal(record: Mapping[str, Any]) -> str:
    """The signal behind a record's correction (``no_progress`` for an escalation)."""
    signals = record.get("signals") or {}
    return next((s for s in _SIGNALS if s in signals), "no_progress")


def stop_signal(diagnostic: Mapping[str, Any]) -> str:
    """A stop's label: the loop's signal, or the budget that ran out."""
    if diagnostic.get("terminated_by") == "budget":
        return f"budget:{diagnostic.get('budget_type', 'unknown')}"
    return str(diagnostic.get("signal", "no_progress"))


class OpenTelemetrySink:
    """An ``execute_tool {tool}`` span per call (GenAI semantic conventions) with
    ``headway.*`` attributes, nested under the caller's current span.

    The span is recorded when the call settles, with the call's start time and duration.
    When the current span already is the framework's ``execute_tool`` span for this tool
    (an integration or the MCP SDK made one), headway adds its attributes to that span
    instead of making a second one.
    """

    lazy = True  # reads only the fields it needs from the AuditRecord

    def __init__(self, tracer_provider: Any = None) -> None:
        from . import __version__

        otel = require("opentelemetry.trace", "otel")
        self._trace = otel
        self._internal = otel.SpanKind.INTERNAL
        provider = tracer_provider or otel.get_tracer_provider()
        self._tracer = provider.get_tracer("headway", __version__)
        self._names: dict[str, str] = {}  # tool -> span name

    def write(self, record: Mapping[str, Any]) -> None:
        otel = self._trace
        tool = record["tool"]
        name = self._names.get(tool)
        if name is None:
            name = self._names[tool] = f"execute_tool {tool}"
        attributes = _span_attributes(record, tool)
        current = otel.get_current_span()
        if current.is_recording() and _is_tool_span(current, name, tool):
            current.set_attributes(attributes)
            _events(otel, current, record, attributes)
            return
        end = time.time_ns()
        start = end - int((record["latency_ms"] or 0.0) * 1e6)
        # all attributes at start: a sampler sees them, and the SDK checks them once (setting
        # them after the start costs the SDK about 1.5 µs more per span)
        span = self._tracer.start_span(
            name, kind=self._internal, start_time=start, attributes=attributes
        )
        _events(otel, span, record, attributes)
        span.end(end_time=end)


def _is_tool_span(span: Any, name: str, tool: str) -> bool:
    attributes = getattr(span, "attributes", None) or {}
    if attributes.get("gen_ai.operation.name") == "execute_tool":
        return attributes.get("gen_ai.tool.name") in (None, tool)
    return getattr(span, "name", None) == name


def _span_attributes(record: Mapping[str, Any], tool: str) -> dict[str, Any]:
    """The span's attributes; the defaults a dashboard never filters on (no signals, one
    attempt, a closed breaker) are left out: the SDK checks every attribute it is given."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "gen_ai.tool.type": "function",
        "headway.session": record["session"],
        "headway.status": record["status"],
        "headway.decision": record["decision"],
        "headway.cache": record["cache"],
        "headway.mark": record["mark"],
        "headway.budget.tool_calls": record["budget"]["tool_calls"],
    }
    signals = record["signals"]
    if signals:
        attributes["headway.signals"] = sorted(signals)
    attempts = record["attempts"]
    if attempts != 1:
        attributes["headway.attempts"] = attempts
    breaker = record["breaker"]
    if breaker != "closed":
        attributes["headway.breaker"] = breaker
    for name, field in _OPTIONAL:
        value = record[field]
        if value is not None:
            attributes[name] = str(value)
    return attributes


_OPTIONAL = (
    ("gen_ai.tool.call.id", "call_id"),
    ("headway.agent", "agent"),
    ("headway.idempotency.state", "idempotency_state"),
    ("headway.would", "would"),
    ("error.type", "error"),
)


def _events(otel: Any, span: Any, record: Mapping[str, Any], attributes: Mapping[str, Any]) -> None:
    """The error status and the events, on the few calls that have any."""
    if attributes["headway.status"] == "error":
        span.set_status(otel.Status(otel.StatusCode.ERROR, attributes.get("error.type", "error")))
    if record["correction"]:
        span.add_event("headway.correction", {"headway.signal": correction_signal(record)})
    stop = record["stop"]
    if stop:
        event = (
            "headway.would_stop" if attributes.get("headway.would") == "stop" else "headway.stop"
        )
        span.add_event(
            event,
            {
                "headway.signal": stop_signal(stop),
                "headway.terminated_by": str(stop.get("terminated_by", "")),
            },
        )


class PrometheusSink:
    """Counters, histograms and gauges of headway's decisions, labelled by tool, status or
    signal only (never arguments or session ids: low cardinality).

    ``registry=None`` registers on ``prometheus_client``'s default registry (what
    ``start_http_server`` and most exporters serve); pass your own to keep them apart.
    """

    lazy = True

    def __init__(self, registry: Any = None, prefix: str = "headway") -> None:
        prom = require("prometheus_client", "prometheus")
        reg = registry if registry is not None else prom.REGISTRY
        p = prefix
        self.calls = prom.Counter(
            f"{p}_calls", "Tool calls by tool and outcome status.", ["tool", "status"], registry=reg
        )
        self.cache_hits = prom.Counter(
            f"{p}_cache_hits", "Calls served from the read cache.", ["tool"], registry=reg
        )
        self.saved = prom.Counter(
            f"{p}_executions_saved",
            "Calls answered without running the tool (cached, replayed, corrected).",
            ["tool"],
            registry=reg,
        )
        self.tokens_saved = prom.Counter(
            f"{p}_tokens_saved",
            "Estimated result tokens not produced again.",
            ["tool"],
            registry=reg,
        )
        self.corrections = prom.Counter(
            f"{p}_corrections",
            "Corrections sent to the model, by signal.",
            ["signal"],
            registry=reg,
        )
        self.stops = prom.Counter(
            f"{p}_stops",
            "Sessions stopped (or, in shadow mode, that would have been).",
            ["signal"],
            registry=reg,
        )
        self.retries = prom.Counter(
            f"{p}_retries", "Attempts beyond the first.", ["tool"], registry=reg
        )
        self.seconds = prom.Histogram(
            f"{p}_call_seconds",
            "Time headway spent on a call, tool included.",
            ["tool"],
            registry=reg,
        )
        self.breaker = prom.Gauge(
            f"{p}_breaker_state",
            "Circuit breaker seen by the last call: 0 closed, 1 half open, 2 open.",
            ["tool"],
            registry=reg,
        )
        self.reconcile = prom.Histogram(
            f"{p}_reconcile_seconds",
            "Time from an UNKNOWN outcome to its resolution.",
            registry=reg,
        )
        # labels() costs more than inc(): each label tuple's child is resolved once
        self._children: dict[tuple[str, str], tuple[Any, ...]] = {}
        self._by_signal: dict[tuple[Any, str], Any] = {}
        self._unknown: dict[str, float] = {}  # outstanding UNKNOWN write -> when first seen
        self._lock = threading.Lock()
        outstanding = prom.Gauge(
            f"{p}_unknown_outstanding", "Writes whose outcome is still UNKNOWN.", registry=reg
        )
        outstanding.set_function(lambda: len(self._unknown))
        oldest = prom.Gauge(
            f"{p}_unknown_oldest_seconds",
            "Age of the oldest write whose outcome is still UNKNOWN (0 when none).",
            registry=reg,
        )
        oldest.set_function(self._oldest)

    def _oldest(self) -> float:
        with self._lock:
            first = min(self._unknown.values(), default=None)
        return 0.0 if first is None else time.monotonic() - first

    def write(self, record: Mapping[str, Any]) -> None:
        tool, status = record["tool"], record["status"]
        children = self._children.get((tool, status))
        if children is None:
            children = self._children[(tool, status)] = self._resolve(tool, status)
        calls, seconds, breaker, saved, hits, tokens = children
        calls.inc()
        seconds.observe((record["latency_ms"] or 0.0) / 1000.0)
        # set on every call, not on a change: racing calls then cannot leave it stale
        breaker.set(_BREAKER.get(record["breaker"], 0.0))
        if saved is not None:
            saved.inc()
            if record["cache_hit"]:
                hits.inc()
            if record["tokens_saved"]:
                tokens.inc(record["tokens_saved"])
        if record["correction"]:
            self._child(self.corrections, correction_signal(record)).inc()
        stop = record["stop"]
        if stop:
            self._child(self.stops, stop_signal(stop)).inc()
        attempts = record["attempts"] or 0
        if attempts > 1:
            self.retries.labels(tool).inc(attempts - 1)
        if status == "unknown" or self._unknown:
            self._track_unknown(record, status)

    def _resolve(self, tool: str, status: str) -> tuple[Any, ...]:
        calls, seconds, breaker = (
            self.calls.labels(tool, status),
            self.seconds.labels(tool),
            self.breaker.labels(tool),
        )
        if status not in _SAVED:
            return (calls, seconds, breaker, None, None, None)
        return (
            calls,
            seconds,
            breaker,
            self.saved.labels(tool),
            self.cache_hits.labels(tool),
            self.tokens_saved.labels(tool),
        )

    def _child(self, metric: Any, signal: str) -> Any:
        child = self._by_signal.get((metric, signal))
        if child is None:
            child = self._by_signal[(metric, signal)] = metric.labels(signal)
        return child

    def _track_unknown(self, record: Mapping[str, Any], status: str) -> None:
        key = record.get("idempotency_key") or (
            f"{record['session']}:{record['tool']}:{record['args_digest']}"
        )
        with self._lock:
            if status == "unknown":
                self._unknown.setdefault(str(key), time.monotonic())
                if len(self._unknown) > _MAX_UNKNOWN:  # bounded: forget the oldest
                    del self._unknown[next(iter(self._unknown))]
            elif str(key) in self._unknown and (
                status in ("executed", "replayed") or record.get("reconcile_s") is not None
            ):
                del self._unknown[str(key)]
        if record.get("reconcile_s") is not None:
            self.reconcile.observe(float(record["reconcile_s"]))
