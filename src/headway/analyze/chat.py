"""Chat transcripts: OpenAI chat-completions and Anthropic messages.

A file holds conversations: a JSON document (one list of messages, a list of
conversations, or an object with ``messages``) or JSONL (one conversation a line). A
conversation is a list of messages or an object with ``messages`` (and optionally ``id``
and an outcome: ``reward``, ``success`` or ``outcome``). Each conversation is one run.

- OpenAI: an assistant message's ``tool_calls`` (``function.name``, ``function.arguments``
  as JSON text) matched by ``id`` to the ``tool`` messages' ``tool_call_id``.
- Anthropic: ``tool_use`` content blocks (``name``, ``input``) matched by ``id`` to the
  ``tool_result`` blocks' ``tool_use_id`` (``is_error`` marks an error).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ._lines import json_document, json_lines
from ._model import Call, Problem, Run, digest
from .uniform import succeeded


def text_of(content: Any) -> str:
    """Message or result content as text: a string, or the text of its blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, Mapping):
                text = block.get("text")
                parts.append(text if isinstance(text, str) else f"[{block.get('type', 'block')}]")
            else:
                parts.append(str(block))
        return "\n".join(parts)
    return "" if content is None else json.dumps(content, sort_keys=True, default=str)


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw  # the model wrote bad JSON: the call is still a call
    return raw


def openai_calls(messages: list[Any]) -> list[Call]:
    calls: dict[str, Call] = {}
    order: list[Call] = []
    for msg in messages:
        if not isinstance(msg, Mapping):
            raise TypeError("a message is not an object")
        if msg.get("role") == "assistant":
            for tc in msg.get("tool_calls") or ():
                fn = tc.get("function") or {}
                call = Call(str(fn.get("name", "")), _arguments(fn.get("arguments")), "", "")
                calls[str(tc.get("id"))] = call
                order.append(call)
        elif msg.get("role") == "tool":
            answered = calls.get(str(msg.get("tool_call_id")))
            if answered is not None:
                answered.result = text_of(msg.get("content"))
    return _finish(order)


def anthropic_calls(messages: list[Any]) -> list[Call]:
    calls: dict[str, Call] = {}
    order: list[Call] = []
    for msg in messages:
        if not isinstance(msg, Mapping):
            raise TypeError("a message is not an object")
        content = msg.get("content")
        for block in content if isinstance(content, list) else ():
            if not isinstance(block, Mapping):
                continue
            if block.get("type") == "tool_use":
                call = Call(str(block.get("name", "")), block.get("input"), "", "")
                calls[str(block.get("id"))] = call
                order.append(call)
            elif block.get("type") == "tool_result":
                answered = calls.get(str(block.get("tool_use_id")))
                if answered is not None:
                    answered.result = text_of(block.get("content"))
                    answered.error = bool(block.get("is_error"))
    return _finish(order)


def _finish(calls: list[Call]) -> list[Call]:
    for call in calls:
        call.result_id = digest(call.result)
    return calls


def is_anthropic(messages: list[Any]) -> bool:
    return any(
        isinstance(m, Mapping)
        and isinstance(m.get("content"), list)
        and any(
            isinstance(b, Mapping) and b.get("type") in ("tool_use", "tool_result")
            for b in m["content"]
        )
        for m in messages
    )


def conversations(doc: Any) -> list[Any]:
    """The conversations in one JSON document."""
    if isinstance(doc, Mapping):
        if isinstance(doc.get("conversations"), list):
            return list(doc["conversations"])
        return [doc]
    if isinstance(doc, list) and doc and all(isinstance(m, Mapping) and "role" in m for m in doc):
        return [doc]  # one bare list of messages
    return list(doc) if isinstance(doc, list) else [doc]


def _run(conv: Any, source: str, default_id: str, anthropic: bool) -> Run:
    meta: Mapping[str, Any] = conv if isinstance(conv, Mapping) else {}
    messages = meta.get("messages") if meta else conv
    if not isinstance(messages, list):
        raise TypeError("a conversation is a list of messages or an object with 'messages'")
    calls = anthropic_calls(messages) if anthropic else openai_calls(messages)
    run_id = str(meta.get("id") or meta.get("run_id") or default_id)
    return Run(source, run_id, calls, succeeded(meta))


def read(path: Path, *, anthropic: bool, jsonl: bool) -> Iterator[Run | Problem]:
    source = path.name.split(".")[0]
    if jsonl:
        items: Iterator[tuple[int, Any] | Problem] = json_lines(path)
    else:
        doc = json_document(path)
        items = iter([doc if isinstance(doc, Problem) else (0, doc)])
    for item in items:
        if isinstance(item, Problem):
            yield item
            continue
        number, doc = item
        convs = conversations(doc)
        for k, conv in enumerate(convs, 1):
            default_id = f"{source}#{number or k}" + (f".{k}" if number and len(convs) > 1 else "")
            try:
                yield _run(conv, source, default_id, anthropic)
            except (ValueError, TypeError, AttributeError) as exc:
                what = f"conversation {k}: " if len(convs) > 1 or not number else ""
                yield Problem(str(path), number, f"{what}{exc}")
