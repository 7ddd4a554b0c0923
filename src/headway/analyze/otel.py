"""OpenTelemetry GenAI spans exported as OTLP JSON (a document, or JSONL of exports).

Tool calls are, in the three conventions in use:

- GenAI semantic conventions: ``execute_tool`` spans (``gen_ai.operation.name``, or a
  span name starting with ``execute_tool``) with ``gen_ai.tool.name``,
  ``gen_ai.tool.call.arguments`` and ``gen_ai.tool.call.result`` (pydantic-ai from its
  instrumentation version 3);
- pydantic-ai/Logfire's default spans before that: ``running tool``, with
  ``gen_ai.tool.name``, ``tool_arguments`` and ``tool_response``;
- OpenInference (Phoenix, Arize): ``openinference.span.kind = TOOL`` with ``tool.name``,
  ``input.value`` and ``output.value``.

Model calls (``chat`` spans, OpenInference ``LLM`` spans) are turns, with their tokens
when recorded (``gen_ai.usage.input_tokens`` / ``output_tokens``,
``llm.token_count.prompt`` / ``completion``). A run is a ``gen_ai.conversation.id`` (or
``session.id``), else a trace; calls are ordered by start time. Spans of one trace may be anywhere in the file, so a
file's tool spans (their attributes only) are held until its end.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ._lines import json_document, json_lines
from ._model import Call, Problem, Run, digest


def value(v: Any) -> Any:
    """An OTLP ``AnyValue`` as a plain value."""
    if not isinstance(v, Mapping):
        return v
    for kind in ("stringValue", "boolValue", "doubleValue"):
        if kind in v:
            return v[kind]
    if "intValue" in v:
        return int(v["intValue"])
    if "arrayValue" in v:
        return [value(x) for x in v["arrayValue"].get("values", [])]
    if "kvlistValue" in v:
        return {kv["key"]: value(kv.get("value")) for kv in v["kvlistValue"].get("values", [])}
    return None


def spans(export: Any) -> Iterator[Mapping[str, Any]]:
    if not isinstance(export, Mapping) or not isinstance(export.get("resourceSpans"), list):
        raise TypeError("not an OTLP JSON export (no resourceSpans)")
    for rs in export["resourceSpans"]:
        for ss in rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or ():
            yield from ss.get("spans") or ()


def _attrs(span: Mapping[str, Any]) -> dict[str, Any]:
    return {a["key"]: value(a.get("value")) for a in span.get("attributes") or ()}


def _tool(name: str, attrs: Mapping[str, Any]) -> tuple[str, Any, Any] | None:
    """(tool, arguments, result) of a tool span in any of the three conventions, or None."""
    if name == "running tool" or "tool_arguments" in attrs:  # pydantic-ai/Logfire, before v3
        return (
            attrs.get("gen_ai.tool.name") or "",
            attrs.get("tool_arguments"),
            attrs.get("tool_response"),
        )
    if attrs.get("gen_ai.operation.name") == "execute_tool" or name.startswith("execute_tool"):
        tool = attrs.get("gen_ai.tool.name") or name.removeprefix("execute_tool").strip()
        return tool, attrs.get("gen_ai.tool.call.arguments"), attrs.get("gen_ai.tool.call.result")
    if attrs.get("openinference.span.kind") == "TOOL":  # OpenInference (Phoenix, Arize)
        return attrs.get("tool.name") or name, attrs.get("input.value"), attrs.get("output.value")
    return None


def _usage(attrs: Mapping[str, Any]) -> tuple[int, int] | None:
    """A model call's recorded tokens: GenAI ``gen_ai.usage.*`` or OpenInference
    ``llm.token_count.*``."""
    for tin, tout in (
        ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"),
        ("llm.token_count.prompt", "llm.token_count.completion"),
    ):
        if isinstance(attrs.get(tin), int):
            out = attrs.get(tout)
            return int(attrs[tin]), int(out) if isinstance(out, int) else 0
    return None


def _is_model_call(name: str, attrs: Mapping[str, Any]) -> bool:
    op = attrs.get("gen_ai.operation.name")
    return (
        op in ("chat", "text_completion", "generate_content")
        or attrs.get("openinference.span.kind") == "LLM"
        or name.startswith("chat ")
    )


def _span(span: Mapping[str, Any]) -> tuple[str, float, Call | tuple[int, int] | None] | None:
    """(run, start, a Call) for a tool span, (run, start, usage or None) for a model call."""
    attrs = _attrs(span)
    name = str(span.get("name", ""))
    start = int(span.get("startTimeUnixNano") or 0) / 1e9
    run = str(attrs.get("gen_ai.conversation.id") or attrs.get("session.id") or
              span.get("traceId") or "trace")  # fmt: skip
    found = _tool(name, attrs)
    if found is None:
        return (run, start, _usage(attrs)) if _is_model_call(name, attrs) else None
    tool, raw, result = found
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        args = raw
    text = result if isinstance(result, str) else "" if result is None else json.dumps(result)
    status = span.get("status") or {}
    error = status.get("code") in (2, "STATUS_CODE_ERROR") or "error.type" in attrs
    agent = str(attrs.get("gen_ai.agent.name") or attrs.get("agent_name") or "")
    return run, start, Call(str(tool), args, text, digest(text), agent, start, error)


def read(path: Path, *, jsonl: bool) -> Iterator[Run | Problem]:
    source = path.name.split(".")[0]
    if jsonl:
        exports: Iterator[tuple[int, Any] | Problem] = json_lines(path)
    else:
        doc = json_document(path)
        exports = iter([doc if isinstance(doc, Problem) else (0, doc)])
    runs: dict[str, list[tuple[float, int, Call | tuple[int, int] | None]]] = {}
    for item in exports:
        if isinstance(item, Problem):
            yield item
            continue
        number, export = item
        try:
            for span in spans(export):
                found = _span(span)
                if found is not None:
                    events = runs.setdefault(found[0], [])
                    events.append((found[1], len(events), found[2]))
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            yield Problem(str(path), number, str(exc))
    for run_id, events in runs.items():
        run = Run(source, run_id, [])
        turn = -1
        for _, _, event in sorted(events, key=lambda t: t[:2]):
            if isinstance(event, Call):
                event.turn = turn if turn >= 0 else None
                run.calls.append(event)
            else:
                turn += 1
                if event is not None:
                    run.usage[turn] = event
        yield run
