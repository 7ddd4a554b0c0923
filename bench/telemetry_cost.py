"""What telemetry adds to a call, side by side in one run.

    python bench/telemetry_cost.py [--quick]

The executed path (a read with retry and breaker, no timeout thread, in-memory audit on)
with no telemetry, with ``OpenTelemetrySink`` (the SDK's tracer with an in-memory
exporter: every span is really built and exported), with ``OpenTelemetrySink`` over the
API's no-op tracer (headway's own share: building the attributes and events), with
``PrometheusSink``, and with both. Prints microseconds per call and the added cost as a fraction of the plain path.
"""

from __future__ import annotations

import sys
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracerProvider
from prometheus_client import CollectorRegistry

import headway
from headway.telemetry import OpenTelemetrySink, PrometheusSink
from overhead import VARIANTS, measure_all, tool


def _session(sinks: list[Any], name: str) -> headway.Session:
    gov = headway.Governor(no_progress_limit=10**9, audit=[headway.MemoryAudit(), *sinks])
    gov.register("guarded", tool, effect="read", timeout=None, retry=headway.Retry(attempts=3))
    return gov.session(name)


def main() -> None:
    quick = "--quick" in sys.argv
    batch, rounds = (300, 10) if quick else (1_000, 40)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sessions = {
        "executed path, no telemetry": _session([], "plain"),
        "+ OpenTelemetrySink (SDK, in-memory export)": _session(
            [OpenTelemetrySink(tracer_provider=provider)], "otel"
        ),
        "+ OpenTelemetrySink (API no-op tracer: ours)": _session(
            [OpenTelemetrySink(tracer_provider=NoOpTracerProvider())], "noop"
        ),
        "+ PrometheusSink": _session([PrometheusSink(registry=CollectorRegistry())], "prom"),
        "+ both": _session(
            [
                OpenTelemetrySink(tracer_provider=provider),
                PrometheusSink(registry=CollectorRegistry()),
            ],
            "both",
        ),
    }
    counter = iter(range(10**12))

    def row(s: headway.Session) -> Any:
        def call() -> Any:
            if len(exporter.get_finished_spans()) > 50_000:
                exporter.clear()  # keep memory flat over a long run
            return s.call("guarded", VARIANTS[next(counter) % 64])

        return call

    results = measure_all([(name, row(s)) for name, s in sessions.items()], batch, rounds)
    base = results["executed path, no telemetry"]
    print(f"{'path':<46} {'us/call':>9} {'added':>8}")
    for name, us in results.items():
        print(f"{name:<46} {us:>9.2f} {(us - base) / base:>8.1%}")


if __name__ == "__main__":
    main()
