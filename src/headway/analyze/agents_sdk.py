"""OpenAI Agents SDK trace exports: the traces and spans its exporters send, one JSON
object a line or a document (a list, or ``{"data": [...]}`` as the SDK's exporter posts).

A span (``"object": "trace.span"``) has ``trace_id``, ``started_at`` and ``span_data``;
the tool calls are the spans whose ``span_data.type`` is ``function``: ``name``,
``input`` (the arguments as JSON text) and ``output``; a span's ``error`` marks a failed
call. The model turns are the SDK's ``turn`` spans (``custom`` spans whose
``data.sdk_span_type`` is ``turn``, with the turn's ``usage``); in exports without them,
the ``generation`` and ``response`` spans. A trace is a run; its calls are ordered by start time. A file's spans are held
until its end (a trace's spans may be anywhere in it).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ._lines import records
from ._model import Call, Problem, Run, iso_time, usage_of
from .chat import arguments, finish


def is_record(obj: Any) -> bool:
    return isinstance(obj, Mapping) and (
        obj.get("object") in ("trace", "trace.span") or isinstance(obj.get("span_data"), Mapping)
    )


def read(path: Path, *, jsonl: bool) -> Iterator[Run | Problem]:
    source = path.name.split(".")[0]
    traces: dict[str, list[tuple[str, int, Mapping[str, Any]]]] = {}
    for item in records(path, jsonl, ("data", "spans")):
        if isinstance(item, Problem):
            yield item
            continue
        number, rec = item
        if not is_record(rec):
            yield Problem(str(path), number, "not an OpenAI Agents SDK trace or span")
            continue
        data = rec.get("span_data")
        if not isinstance(data, Mapping):
            continue
        kind, usage = data.get("type"), data.get("usage")
        inner = data.get("data")
        if kind == "custom" and isinstance(inner, Mapping) and inner.get("sdk_span_type") == "turn":
            kind, usage = "turn", inner.get("usage")
        if kind not in ("function", "generation", "response", "turn"):
            continue
        spans = traces.setdefault(str(rec.get("trace_id")), [])
        slim = {"type": kind, "name": data.get("name"), "input": data.get("input"),
                "output": data.get("output"), "usage": usage,
                "error": rec.get("error"), "at": rec.get("started_at")}  # fmt: skip
        spans.append((str(rec.get("started_at") or ""), len(spans), slim))
    for trace, spans in traces.items():
        run = Run(source, trace, [])
        turn = -1
        turns = "turn" if any(s[2]["type"] == "turn" for s in spans) else None
        for _, _, span in sorted(spans, key=lambda s: s[:2]):
            if span["type"] != "function":
                if turns is not None and span["type"] != turns:
                    continue  # a turn's generation or response: the turn counts once
                turn += 1
                recorded = usage_of(span["usage"])
                if recorded is not None:
                    run.usage[turn] = recorded
                continue
            output = span["output"]
            text = output if isinstance(output, str) else "" if output is None else str(output)
            run.calls.append(Call(str(span["name"] or ""), arguments(span["input"]), text, "",
                                  time=iso_time(span["at"]), error=bool(span["error"]),
                                  turn=turn if turn >= 0 else None))  # fmt: skip
        finish(run.calls)
        yield run
