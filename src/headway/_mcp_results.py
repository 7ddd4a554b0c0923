"""How headway reads an MCP tool and its results: a tool's spec from its listed
annotations (``declare``), progress from fields of its structured content, what a
``CallToolResult`` says (``result_said``, the text its detectors judge) and a round that
asks the client for input (``is_ask``, ``not_final``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from ._call import result_text
from ._session import Governor


def not_final(result: dict[str, Any]) -> dict[str, Any]:
    """What headway judges of a round that asks the client for input (2026-07-28, an
    ``InputRequiredResult``): not a result, so never cached or replayed (the client's
    next round of the same call, with its answers, must reach the upstream); the client
    still receives the ask as the upstream sent it."""
    return {**result, "isError": True}


def is_ask(result: Mapping[str, Any]) -> bool:
    return result.get("resultType") == "input_required"


def declare(
    gov: Governor, name: str, annotations: dict[str, Any], seen: dict[str, dict[str, Any]]
) -> None:
    """A tool's spec from its listed MCP annotations (the operator's table wins, in
    register); declared again when a changed tool list brings new annotations. ``seen``:
    the annotations each tool was last declared with."""
    if seen.get(name) == annotations and gov.spec(name):
        return
    seen[name] = annotations
    fields = gov.tool_config.get(name, {}).get("progress_fields")
    # the governed value is the whole CallToolResult: progress_fields name fields of
    # its structured content (or of a JSON object in its text)
    progress = fields_changed(tuple(fields)) if fields else None
    # replace=True: a tools/list change re-declares the tool from its new annotations
    gov.register(name, None, annotations=annotations, progress=progress, replace=True)


def fields_changed(fields: tuple[str, ...]) -> Callable[[Any, Any], bool]:
    """Progress of an MCP tool: one of ``fields`` of its structured result changed."""

    def progress(previous: Any, current: Any) -> bool:
        old, new = structured(previous), structured(current)
        return any(old.get(f) != new.get(f) for f in fields)

    return progress


def structured(value: Any) -> Mapping[str, Any]:
    """A result's structured content, else the first JSON object in its text, else {}."""
    if not isinstance(value, Mapping):
        return {}
    content = value.get("structuredContent")
    if isinstance(content, Mapping):
        return content
    for block in value.get("content") or ():
        if isinstance(block, Mapping) and block.get("type") == "text":
            with contextlib.suppress(ValueError, TypeError):
                parsed = json.loads(block.get("text", ""))
                if isinstance(parsed, Mapping):
                    return parsed
    return {}


def judge_results(gov: Governor) -> None:
    """Make ``gov``'s detectors judge an MCP result by what it says (``result_said``), not
    by its envelope; sessions opened from now on. Both forms of the proxy call it."""
    if result_said not in gov.normalizers:
        gov.normalizers = (result_said, *gov.normalizers)


_ENVELOPE = frozenset(("content", "structuredContent", "isError", "_meta", "resultType"))


def result_said(text: str) -> str:
    """A normaliser: the text of an MCP ``CallToolResult`` (as JSON) that its detectors
    judge, what the result says, once: its text blocks (non-text blocks as JSON), and its
    ``structuredContent`` only when the text does not already carry it (the protocol asks
    a tool to repeat its structured value as text; FastMCP wraps a plain value as
    ``{"result": value}``). Not judged: ``_meta`` (protocol data: trace ids, timings) and
    the envelope's field names, which made every result of a tool look alike (a short
    answer judged as a 130-character text escaped the short-answer rule, and its escaped
    newlines made a page one line). Any other text is returned as it is."""
    if not text.startswith('{"'):
        return text
    try:
        value = orjson.loads(text)
    except ValueError:  # not JSON, or what orjson does not read (NaN, big integers)
        return text
    content = value.get("content") if isinstance(value, dict) else None
    if not isinstance(content, list) or not value.keys() <= _ENVELOPE:
        return text
    said = "\n".join(
        b["text"]
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        else result_text(b)
        for b in content
    )
    structured = value.get("structuredContent")
    if structured is None or _carries(said, structured):
        return said
    return f"{said}\n{result_text(structured)}" if said else result_text(structured)


def _carries(text: str, structured: Any) -> bool:
    """The text is the structured value written as JSON, or FastMCP's wrapped value."""
    wrapped = _NOTHING
    if isinstance(structured, dict) and len(structured) == 1:
        wrapped = structured.get("result", _NOTHING)
    if wrapped == text:
        return True
    try:
        parsed = orjson.loads(text)
    except ValueError:  # not JSON, or what orjson does not read (NaN, big integers)
        return False
    return parsed in (structured, wrapped)


_NOTHING: Any = object()
