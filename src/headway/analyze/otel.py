"""OpenTelemetry GenAI spans exported as OTLP JSON (a document, or JSONL of exports).

Tool calls are the ``execute_tool`` spans (``gen_ai.operation.name``, or a span name
starting with ``execute_tool``) with ``gen_ai.tool.name``, ``gen_ai.tool.call.arguments``
and ``gen_ai.tool.call.result``. A run is a ``gen_ai.conversation.id``, else a trace;
calls are ordered by start time. Spans of one trace may be anywhere in the file, so a
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


def _tool_call(span: Mapping[str, Any]) -> tuple[str, float, Call] | None:
    attrs = {a["key"]: value(a.get("value")) for a in span.get("attributes") or ()}
    name = str(span.get("name", ""))
    if attrs.get("gen_ai.operation.name") != "execute_tool" and not name.startswith("execute_tool"):
        return None
    tool = attrs.get("gen_ai.tool.name") or name.removeprefix("execute_tool").strip()
    raw = attrs.get("gen_ai.tool.call.arguments")
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        args = raw
    result = attrs.get("gen_ai.tool.call.result")
    text = result if isinstance(result, str) else "" if result is None else json.dumps(result)
    start = int(span.get("startTimeUnixNano") or 0) / 1e9
    status = span.get("status") or {}
    error = status.get("code") in (2, "STATUS_CODE_ERROR") or "error.type" in attrs
    run = attrs.get("gen_ai.conversation.id") or span.get("traceId") or "trace"
    call = Call(
        str(tool), args, text, digest(text), str(attrs.get("gen_ai.agent.name") or ""), start, error
    )
    return str(run), start, call


def read(path: Path, *, jsonl: bool) -> Iterator[Run | Problem]:
    source = path.name.split(".")[0]
    if jsonl:
        exports: Iterator[tuple[int, Any] | Problem] = json_lines(path)
    else:
        doc = json_document(path)
        exports = iter([doc if isinstance(doc, Problem) else (0, doc)])
    runs: dict[str, list[tuple[float, int, Call]]] = {}
    for item in exports:
        if isinstance(item, Problem):
            yield item
            continue
        number, export = item
        try:
            for span in spans(export):
                found = _tool_call(span)
                if found is not None:
                    calls = runs.setdefault(found[0], [])
                    calls.append((found[1], len(calls), found[2]))
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            yield Problem(str(path), number, str(exc))
    for run_id, calls in runs.items():
        yield Run(source, run_id, [c for _, _, c in sorted(calls, key=lambda t: t[:2])])
