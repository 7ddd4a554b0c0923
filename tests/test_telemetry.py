"""OpenTelemetry spans and Prometheus metrics (audit sinks), and structured log records."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
from typing import Any

import pytest

import headway
from headway.testing import FakeClock

trace = pytest.importorskip("opentelemetry.trace")
sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
export = pytest.importorskip("opentelemetry.sdk.trace.export")
in_memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")
prometheus_client = pytest.importorskip("prometheus_client")

from headway.telemetry import OpenTelemetrySink, PrometheusSink, stop_signal  # noqa: E402


@pytest.fixture
def spans() -> tuple[Any, Any]:
    exporter = in_memory.InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(export.SimpleSpanProcessor(exporter))
    return provider, exporter


def _lookup_gov(sinks: list[Any]) -> headway.Governor:
    clock = FakeClock()
    gov = headway.Governor(audit=[headway.MemoryAudit(), *sinks], clock=clock, sleep=clock.sleep)
    gov.register("lookup", lambda q: {"rows": [q]}, effect="read", deterministic=True)
    return gov


def test_each_call_is_an_execute_tool_span_under_the_callers_span(spans: Any) -> None:
    provider, exporter = spans
    gov = _lookup_gov([OpenTelemetrySink(tracer_provider=provider)])
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span("agent turn") as parent, gov.session("run-1") as s:
        for _ in range(3):
            s.call("lookup", {"q": "a"})
    tool_spans = [sp for sp in exporter.get_finished_spans() if sp.name == "execute_tool lookup"]
    assert len(tool_spans) == 3
    assert all(sp.parent.span_id == parent.get_span_context().span_id for sp in tool_spans)
    first, second, third = (dict(sp.attributes) for sp in tool_spans)
    assert first["gen_ai.operation.name"] == "execute_tool"
    assert first["gen_ai.tool.name"] == "lookup" and first["gen_ai.tool.type"] == "function"
    assert [first["headway.status"], second["headway.status"], third["headway.status"]] == [
        "executed",
        "cached",
        "corrected",
    ]
    assert first["headway.cache"] == "miss" and second["headway.cache"] == "hit"
    assert "repeat" in third["headway.signals"]
    (event,) = tool_spans[2].events
    assert event.name == "headway.correction" and event.attributes["headway.signal"] == "repeat"


def test_an_error_outcome_sets_the_span_status_to_error(spans: Any) -> None:
    provider, exporter = spans
    gov = headway.Governor(audit=[OpenTelemetrySink(tracer_provider=provider)])

    def boom() -> None:
        raise ValueError("bad input")

    gov.register("boom", boom, effect="read", timeout=None)
    with gov.session("r") as s:
        assert s.call("boom").status is headway.Status.ERROR
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is trace.StatusCode.ERROR
    assert span.attributes["error.type"] == "tool_error"


def test_a_framework_span_for_the_call_gets_headways_attributes_and_no_twin(spans: Any) -> None:
    provider, exporter = spans
    gov = _lookup_gov([OpenTelemetrySink(tracer_provider=provider)])
    tracer = provider.get_tracer("framework")
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"}
    with (
        gov.session("r") as s,
        tracer.start_as_current_span("execute_tool lookup", attributes=attrs),
    ):
        s.call("lookup", {"q": "a"})
    (span,) = exporter.get_finished_spans()
    assert span.attributes["headway.status"] == "executed"


def test_a_stop_is_a_span_event_on_the_call_that_reached_it(spans: Any) -> None:
    provider, exporter = spans
    gov = headway.Governor(audit=[OpenTelemetrySink(tracer_provider=provider)])
    gov.register("search", lambda q: "nothing new here, " * 10, effect="read")
    with gov.session("r") as s:
        _loop_until_stopped(s)
    events = [e for sp in exporter.get_finished_spans() for e in sp.events]
    stops = [e for e in events if e.name == "headway.stop"]
    assert len(stops) == 1 and stops[0].attributes["headway.terminated_by"] == "no_progress"


def _loop_until_stopped(s: headway.Session) -> headway.Stop:
    """Two searches in turn, always the same answer: no progress until headway stops it."""
    for n in range(40):
        try:
            s.call("search", {"q": n % 2})
        except headway.Stop as stop:
            return stop
    raise AssertionError("the loop was never stopped")


def _sample(registry: Any, name: str, labels: dict[str, str] | None = None) -> float | None:
    value: float | None = registry.get_sample_value(name, labels or {})
    return value


def test_prometheus_counts_calls_hits_corrections_and_stops_by_low_cardinality_labels() -> None:
    registry = prometheus_client.CollectorRegistry()
    gov = _lookup_gov([PrometheusSink(registry=registry)])
    gov.register("search", lambda q: "nothing new here, " * 10, effect="read")
    with gov.session("run-1") as s:
        for _ in range(3):
            s.call("lookup", {"q": "a"})
        stop = _loop_until_stopped(s)
    assert _sample(registry, "headway_calls_total", {"tool": "lookup", "status": "executed"}) == 1
    assert _sample(registry, "headway_calls_total", {"tool": "lookup", "status": "cached"}) == 1
    assert _sample(registry, "headway_calls_total", {"tool": "lookup", "status": "corrected"}) == 1
    assert _sample(registry, "headway_cache_hits_total", {"tool": "lookup"}) == 1
    assert _sample(registry, "headway_executions_saved_total", {"tool": "lookup"}) == 2
    assert _sample(registry, "headway_corrections_total", {"signal": "repeat"}) == 1
    label = stop_signal(stop.diagnostic)
    assert label == stop.diagnostic["signal"]
    assert _sample(registry, "headway_stops_total", {"signal": label}) == 1
    calls = _sample(registry, "headway_call_seconds_count", {"tool": "lookup"})
    assert calls == 3
    assert _sample(registry, "headway_breaker_state", {"tool": "lookup"}) == 0
    for metric in registry.collect():
        for sample in metric.samples:
            assert not {"session", "args", "run_id"} & set(sample.labels)


def test_unknown_writes_are_outstanding_until_reconciled() -> None:
    registry = prometheus_client.CollectorRegistry()
    gov = headway.Governor(audit=[PrometheusSink(registry=registry)])
    release, done = threading.Event(), threading.Event()
    charges: dict[str, str] = {}

    def charge(ref: str) -> str:
        release.wait(5)
        charges[ref] = "ch-1"
        done.set()
        return "ch-1"

    gov.register(
        "charge", charge, effect="write", timeout=0.05, reconcile=lambda k, a: charges.get(k)
    )
    with gov.session("r") as s:
        first = s.call("charge", {"ref": "o-1"}, idempotency_key="o-1")
        assert first.status is headway.Status.UNKNOWN
        assert _sample(registry, "headway_unknown_outstanding") == 1
        assert (_sample(registry, "headway_unknown_oldest_seconds") or 0) >= 0
        release.set()
        assert done.wait(5)  # the abandoned attempt acted late
        time.sleep(0.2)  # and returned: its thread hands the result over right after
        again = s.call("charge", {"ref": "o-1"}, idempotency_key="o-1")
    assert again.status is headway.Status.REPLAYED
    assert _sample(registry, "headway_unknown_outstanding") == 0
    assert _sample(registry, "headway_unknown_oldest_seconds") == 0
    # the late result settled the key: no reconcile was needed, none is measured
    assert _sample(registry, "headway_reconcile_seconds_count") == 0


def test_the_logging_sink_emits_a_structured_record_with_secrets_redacted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gov = headway.Governor(audit=[headway.LoggingSink()])
    gov.register("login", lambda user, password: "ok", effect="write")
    with caplog.at_level(logging.INFO, logger="headway.audit"), gov.session("r") as s:
        s.call("login", {"user": "ann", "password": "hunter2"})
    (entry,) = [r for r in caplog.records if r.name == "headway.audit"]
    fields = entry.headway  # type: ignore[attr-defined]
    assert fields["tool"] == "login" and fields["decision"] == "execute"
    assert "hunter2" not in entry.getMessage() and "hunter2" not in str(fields)


def test_a_reconciled_unknown_write_observes_its_time_to_resolution_once() -> None:
    registry = prometheus_client.CollectorRegistry()
    clock = FakeClock()
    charges: list[str] = []

    async def charge(ref: str) -> str:
        charges.append(ref)  # the provider acted ...
        if len(charges) == 1:
            await asyncio.sleep(5)  # ... but its answer never came back (cancelled: no late result)
        return "ch-1"

    gov = headway.Governor(audit=[PrometheusSink(registry=registry)], clock=clock)
    gov.register(
        "charge",
        charge,
        effect="write",
        timeout=0.05,
        reconcile=lambda k, a: "ch-1" if charges else None,
    )

    async def scenario() -> tuple[headway.Outcome, headway.Outcome]:
        s = gov.session("r")
        first = await s.acall("charge", {"ref": "o-1"}, idempotency_key="o-1")
        assert _sample(registry, "headway_unknown_outstanding") == 1
        clock.advance(7.0)
        return first, await s.acall("charge", {"ref": "o-1"}, idempotency_key="o-1")

    first, again = asyncio.run(scenario())
    assert first.status is headway.Status.UNKNOWN and again.status is headway.Status.REPLAYED
    assert charges == ["o-1"]
    assert _sample(registry, "headway_reconcile_seconds_count") == 1
    assert _sample(registry, "headway_reconcile_seconds_sum") == 7.0
    assert _sample(registry, "headway_unknown_outstanding") == 0


def test_a_call_id_reaches_the_audit_record_and_the_span(spans: Any) -> None:
    provider, exporter = spans
    audit = headway.MemoryAudit()
    gov = _lookup_gov([audit, OpenTelemetrySink(tracer_provider=provider)])
    with gov.session("r") as s:
        s.call("lookup", {"q": "a"}, call_id="toolu_01")
        s.call("lookup", {"q": "b"})
    first, second = exporter.get_finished_spans()
    assert first.attributes["gen_ai.tool.call.id"] == "toolu_01"
    assert "gen_ai.tool.call.id" not in second.attributes  # unknown: left out, not made up
    assert [r["call_id"] for r in audit.records("r")] == ["toolu_01", None]


def test_a_call_id_that_is_not_a_string_is_refused() -> None:
    gov = _lookup_gov([])
    with (
        gov.session("r") as s,
        pytest.raises(headway.ArgumentError, match="call_id must be a string"),
    ):
        s.call("lookup", {"q": "a"}, call_id=7)  # type: ignore[arg-type]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_record_read_by_a_metrics_sink_keeps_the_sha256_of_the_arguments_and_result() -> None:
    """A record made by a sink's first read holds the same digests a full read would."""
    registry = prometheus_client.CollectorRegistry()
    audit = headway.MemoryAudit()
    gov = headway.Governor(audit=[PrometheusSink(registry=registry), audit])
    gov.register("lookup", lambda q: {"rows": [q]}, effect="read", timeout=None)
    with gov.session("r") as s:
        s.call("lookup", {"q": "a"})
    (record,) = audit.records("r")
    assert record["args_digest"] == _sha(headway.canonical_json({"q": "a"}))
    assert record["result_digest"] == _sha('{"rows":["a"]}')
    assert record["result_size"] == len('{"rows":["a"]}')


def test_the_breaker_gauge_follows_the_state_each_call_saw() -> None:
    registry = prometheus_client.CollectorRegistry()
    clock = FakeClock()
    gov = headway.Governor(audit=[PrometheusSink(registry=registry)], clock=clock)
    failing = [True]

    def q(i: int) -> str:
        if failing[0]:
            raise ConnectionError("connection refused")
        return "ok"

    gov.register(
        "q",
        q,
        effect="read",
        timeout=None,
        retry=headway.Retry(attempts=1),
        breaker=headway.Breaker(failures=2, cooldown_s=30),
    )
    s = gov.session("r")
    s.call("q", {"i": 0})
    assert _sample(registry, "headway_breaker_state", {"tool": "q"}) == 0
    s.call("q", {"i": 1})  # the second failure opens it
    s.call("q", {"i": 2})  # refused: the call sees it open
    assert _sample(registry, "headway_breaker_state", {"tool": "q"}) == 2
    failing[0] = False
    clock.advance(31)
    s.call("q", {"i": 3})  # the probe, half open, succeeds
    assert _sample(registry, "headway_breaker_state", {"tool": "q"}) == 1
    s.call("q", {"i": 4})  # closed again
    assert _sample(registry, "headway_breaker_state", {"tool": "q"}) == 0


class _Sampler:
    """Samples nothing and remembers the attributes each span started with."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def should_sample(self, parent: Any, trace_id: int, name: str, *args: Any, **kw: Any) -> Any:
        attributes = kw.get("attributes", args[1] if len(args) > 1 else None)
        self.seen.append(dict(attributes or {}))
        return sdk_trace.sampling.SamplingResult(sdk_trace.sampling.Decision.DROP)

    def get_description(self) -> str:
        return "drop all"


def test_a_sampler_sees_the_calls_attributes_and_a_dropped_span_is_not_exported() -> None:
    sampler = _Sampler()
    exporter = in_memory.InMemorySpanExporter()
    provider = sdk_trace.TracerProvider(sampler=sampler)
    provider.add_span_processor(export.SimpleSpanProcessor(exporter))
    gov = _lookup_gov([OpenTelemetrySink(tracer_provider=provider)])
    with gov.session("r") as s:
        assert s.call("lookup", {"q": "a"}).status is headway.Status.EXECUTED
    (seen,) = sampler.seen
    assert seen["gen_ai.operation.name"] == "execute_tool" and seen["gen_ai.tool.name"] == "lookup"
    assert seen["headway.status"] == "executed"
    assert exporter.get_finished_spans() == ()
