"""Exports written by the real libraries that produce them (installed with the test
extras), not by hand: the OpenAI Agents SDK's trace and span exports, and pydantic-ai's
OpenTelemetry spans in each of its instrumentation versions, each read back by
``headway analyze`` with every call, argument, result and recorded usage."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from headway.analyze._model import Run
from headway.analyze.formats import detect, read


def _runs(path: Path) -> list[Run]:
    items = list(read(path))
    assert [i for i in items if not isinstance(i, Run)] == []
    return [i for i in items if isinstance(i, Run)]


def test_openai_agents_sdk_trace_exports_are_read(tmp_path: Path) -> None:
    agents = pytest.importorskip("agents")
    from agents import Agent, Runner, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call
    from agents.tracing import TracingProcessor

    exported: list[dict[str, Any]] = []

    class Keep(TracingProcessor):  # what an exporter is handed: each trace and span's export()
        def on_trace_start(self, trace: Any) -> None: ...
        def on_trace_end(self, trace: Any) -> None:
            exported.append(trace.export())

        def on_span_start(self, span: Any) -> None: ...
        def on_span_end(self, span: Any) -> None:
            exported.append(span.export())

        def shutdown(self) -> None: ...
        def force_flush(self) -> None: ...

    @function_tool
    def lookup(q: str) -> str:
        return f"found {q}"

    model = ScriptedModel([[function_call("lookup", {"q": "a"}, call_id="c1")],
                           [function_call("lookup", {"q": "b"}, call_id="c2"),
                            function_call("lookup", {"q": "a"}, call_id="c3")],
                           [assistant_message("done")]])  # fmt: skip
    agents.set_trace_processors([Keep()])
    agents.set_tracing_disabled(False)  # another test module may have turned tracing off
    try:
        asyncio.run(Runner.run(Agent("a", model=model, tools=[lookup]), "go"))
    finally:
        agents.set_trace_processors([])
        agents.set_tracing_disabled(True)  # nothing left to export to
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in exported))
    assert detect(path) == ("openai-agents", True)
    (run,) = _runs(path)
    assert [(c.tool, c.args, c.result, c.turn) for c in run.calls] == [
        ("lookup", {"q": "a"}, "found a", 0),
        ("lookup", {"q": "b"}, "found b", 1),
        ("lookup", {"q": "a"}, "found a", 1),
    ]


def _otlp(spans: list[Any]) -> dict[str, Any]:
    """OTLP JSON of finished OpenTelemetry spans (the shape an OTLP/JSON exporter sends)."""

    def value(v: Any) -> dict[str, Any]:
        if isinstance(v, bool):
            return {"boolValue": v}
        if isinstance(v, int):
            return {"intValue": str(v)}
        if isinstance(v, float):
            return {"doubleValue": v}
        return {"stringValue": str(v)}

    return {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {"name": "pydantic-ai"}, "spans": [
        {"traceId": f"{s.context.trace_id:032x}", "spanId": f"{s.context.span_id:016x}", "name": s.name,
         "startTimeUnixNano": str(s.start_time), "endTimeUnixNano": str(s.end_time),
         "status": {"code": s.status.status_code.value},
         "attributes": [{"key": k, "value": value(v)} for k, v in s.attributes.items()]}
        for s in spans]}]}]}  # fmt: skip


@pytest.mark.filterwarnings("ignore:Instrumentation format versions")
@pytest.mark.parametrize("version", [2, 3, 5])
def test_pydantic_ai_spans_of_each_instrumentation_version_are_read(
    tmp_path: Path, version: Any
) -> None:
    pytest.importorskip("pydantic_ai")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.usage import RequestUsage

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        if n >= 2:
            return ModelResponse(parts=[TextPart("done")])
        part = ToolCallPart("lookup", {"q": "a"}, tool_call_id=f"t{n}")
        return ModelResponse(parts=[part], usage=RequestUsage(input_tokens=50 + n, output_tokens=5))

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = Agent(FunctionModel(respond))

    @agent.tool_plain
    def lookup(q: str) -> str:
        return f"found {q}"

    settings = InstrumentationSettings(
        tracer_provider=provider, version=version, include_content=True
    )
    Agent.instrument_all(settings)
    try:
        asyncio.run(agent.run("go"))  # its own loop, closed after (run_sync leaves one open)
    finally:
        Agent.instrument_all(False)
    path = tmp_path / "spans.json"
    path.write_text(json.dumps(_otlp(list(exporter.get_finished_spans())), indent=1))
    assert detect(path) == ("otel", False)
    (run,) = _runs(path)
    assert [(c.tool, c.args, c.result) for c in run.calls] == [
        ("lookup", {"q": "a"}, "found a")
    ] * 2
    assert [run.usage[c.turn] for c in run.calls if c.turn is not None] == [(50, 5), (51, 5)]


def test_langsmith_runs_serialised_by_its_own_schema_are_read(tmp_path: Path) -> None:
    pytest.importorskip("langsmith")
    import datetime
    import uuid

    from langsmith import schemas

    root = uuid.uuid4()
    start = datetime.datetime(2025, 3, 1, 10, 0, tzinfo=datetime.UTC)

    def run(name: str, kind: str, k: int, **fields: Any) -> str:
        rid = root if kind == "chain" else uuid.uuid4()
        r = schemas.Run(id=rid, trace_id=root, name=name, run_type=kind,
                        start_time=start + datetime.timedelta(seconds=k),
                        dotted_order=f"20250301T1000{k:02d}000000Z{rid}",
                        parent_run_id=None if kind == "chain" else root, **fields)  # fmt: skip
        return r.model_dump_json() + "\n"

    lines = [
        run("agent", "chain", 0, inputs={"q": "go"}, outputs={}),
        run("ChatOpenAI", "llm", 1, inputs={}, outputs={}, prompt_tokens=300, completion_tokens=20),
        run("search", "tool", 2, inputs={"input": '{"q": "a"}'}, outputs={"output": "found a"}),
        run("search", "tool", 3, inputs={"query": "a"}, outputs={"output": "x"}, error="boom"),
    ]
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(lines))
    assert detect(path) == ("langsmith", True)
    (r,) = _runs(path)
    assert [(c.tool, c.args, c.result, c.error, c.turn) for c in r.calls] == [
        ("search", {"q": "a"}, "found a", False, 0),
        ("search", {"query": "a"}, "x", True, 0),
    ]
    assert r.usage == {0: (300, 20)} and r.run_id == str(root)
