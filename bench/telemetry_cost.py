"""What telemetry adds to a call, side by side in one run.

    python bench/telemetry_cost.py [--quick] [--default-timeout]

The executed path (a read with retry and breaker, in-memory audit on), with the tool
inline (``timeout=None``), or with ``--default-timeout`` the default 30 s timeout (the
tool runs in a worker thread), with no telemetry and with each sink:

- ``OpenTelemetrySink`` over the SDK's tracer with an in-memory exporter (every span is
  really built and exported);
- the SDK alone: a sink that makes the same span with the same attributes, prepared once,
  without reading the record (what the SDK costs whoever calls it; the difference to the
  row above is headway's share);
- ``OpenTelemetrySink`` over the API's no-op tracer (what an unconfigured or unsampled
  tracer costs);
- ``PrometheusSink``, and both sinks.

Prints microseconds per call and the added cost as a fraction of the plain path.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracerProvider, SpanKind
from prometheus_client import CollectorRegistry

import headway
from headway.telemetry import OpenTelemetrySink, PrometheusSink
from overhead import VARIANTS, measure_all, tool


class SDKAlone:
    """The SDK's own cost: the span headway makes for this call, attributes prepared once."""

    lazy = True

    def __init__(self, provider: TracerProvider) -> None:
        self.tracer = provider.get_tracer("sdk-alone")
        self.attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "guarded",
            "gen_ai.tool.type": "function",
            "headway.session": "sdk",
            "headway.status": "executed",
            "headway.decision": "execute",
            "headway.cache": "none",
            "headway.mark": "neutral",
            "headway.budget.tool_calls": 1,
        }

    def write(self, record: Mapping[str, Any]) -> None:
        end = time.time_ns()
        self.tracer.start_span(
            "execute_tool guarded", kind=SpanKind.INTERNAL, start_time=end - 1000,
            attributes=self.attributes,
        ).end(end_time=end)  # fmt: skip


def _session(sinks: list[Any], name: str, timeout: float | None) -> headway.Session:
    gov = headway.Governor(no_progress_limit=10**9, audit=[headway.MemoryAudit(), *sinks])
    gov.register("guarded", tool, effect="read", timeout=timeout, retry=headway.Retry(attempts=3))
    return gov.session(name)


def main() -> None:
    quick = "--quick" in sys.argv
    batch, rounds = (300, 10) if quick else (1_000, 40)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    def variants(label: str, timeout: float | None) -> dict[str, headway.Session]:
        return {
            f"{label}, no telemetry": _session([], f"plain-{label}", timeout),
            f"{label} + OpenTelemetrySink (SDK, in-memory export)": _session(
                [OpenTelemetrySink(tracer_provider=provider)], f"otel-{label}", timeout
            ),
            f"{label} + the SDK alone (same span, no headway)": _session(
                [SDKAlone(provider)], f"sdk-{label}", timeout
            ),
            f"{label} + OpenTelemetrySink (no-op tracer)": _session(
                [OpenTelemetrySink(tracer_provider=NoOpTracerProvider())], f"noop-{label}", timeout
            ),
            f"{label} + PrometheusSink": _session(
                [PrometheusSink(registry=CollectorRegistry())], f"prom-{label}", timeout
            ),
            f"{label} + both": _session(
                [
                    OpenTelemetrySink(tracer_provider=provider),
                    PrometheusSink(registry=CollectorRegistry()),
                ],
                f"both-{label}",
                timeout,
            ),
        }

    timed = "--default-timeout" in sys.argv
    label = "default timeout" if timed else "inline"
    sessions = variants(label, 30.0 if timed else None)
    counter = iter(range(10**12))

    def row(s: headway.Session) -> Any:
        def call() -> Any:
            if len(exporter.get_finished_spans()) > 50_000:
                exporter.clear()  # keep memory flat over a long run
            return s.call("guarded", VARIANTS[next(counter) % 64])

        return call

    results = measure_all([(name, row(s)) for name, s in sessions.items()], batch, rounds)
    print(f"{'path':<62} {'us/call':>9} {'added':>8}")
    for label in sorted({name.split(",")[0].split(" +")[0] for name in results}):
        base = results[f"{label}, no telemetry"]
        for name, us in results.items():
            if name.startswith((label + ",", label + " +")):
                print(f"{name:<62} {us:>9.2f} {(us - base) / base:>8.1%}")
        otel = results[f"{label} + OpenTelemetrySink (SDK, in-memory export)"]
        sdk = results[f"{label} + the SDK alone (same span, no headway)"]
        print(f"{label}: headway's share of the OpenTelemetry row: {otel - sdk:.2f} us "
              f"({(otel - sdk) / base:.1%}); the SDK's own: {sdk - base:.2f} us "
              f"({(sdk - base) / base:.1%})\n")  # fmt: skip


if __name__ == "__main__":
    main()
