"""OpenAI Responses API items: ``function_call`` items (``call_id``, ``name``,
``arguments`` as JSON text) matched by ``call_id`` to ``function_call_output`` items
(``output``).

A conversation is a list of items (what a Responses ``input`` holds), an object holding
one (``input``, ``output`` or ``items``), or a response object (``"object": "response"``,
whose ``usage`` is recorded for that turn). A file holds one conversation (a JSON
document) or one a line (JSONL); a JSON document that is a list of conversations is read
as several. The function calls between two other items (messages, reasoning) are one
model turn.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ._lines import json_document, json_lines
from ._model import Call, Problem, Run, usage_of
from .chat import arguments, finish, text_of

_KINDS = ("function_call", "function_call_output")


def is_item(obj: Any) -> bool:
    return isinstance(obj, Mapping) and obj.get("type") in _KINDS


def items_of(conv: Any) -> list[Any] | None:
    if isinstance(conv, list):
        return conv
    if isinstance(conv, Mapping):
        found: list[Any] = []
        for key in ("input", "items", "output"):
            if isinstance(conv.get(key), list):
                found += conv[key]
        return found if found else None
    return None


def has_calls(conv: Any) -> bool:
    items = items_of(conv)
    return bool(items) and any(is_item(i) for i in items or ())


def _run(conv: Any, source: str, run_id: str) -> Run:
    items = items_of(conv)
    if items is None:
        raise TypeError("not a list of Responses items (or an object with input/output)")
    meta = conv if isinstance(conv, Mapping) else {}
    run = Run(source, str(meta.get("id") or run_id), [])
    pending: dict[str, Call] = {}
    turn, in_calls, context = -1, False, 0
    for item in items:
        if not isinstance(item, Mapping):
            raise TypeError("an item is not an object")
        kind = item.get("type")
        if kind == "function_call":
            if not in_calls:
                turn, in_calls = turn + 1, True
                run.context[turn] = context
            call = Call(str(item.get("name", "")), arguments(item.get("arguments")), "", "",
                        turn=turn)  # fmt: skip
            pending[str(item.get("call_id"))] = call
            run.calls.append(call)
        elif kind == "function_call_output":
            answered = pending.get(str(item.get("call_id")))
            if answered is not None:
                output = item.get("output")
                answered.result = output if isinstance(output, str) else text_of(output)
        else:
            in_calls = False
        context += len(json.dumps(item, default=str))
    recorded = usage_of(meta.get("usage"))
    if recorded is not None and turn >= 0:
        run.usage[turn] = recorded
    finish(run.calls)
    return run


def read(path: Path, *, jsonl: bool) -> Iterator[Run | Problem]:
    source = path.name.split(".")[0]
    if jsonl:
        lines: Iterator[tuple[int, Any] | Problem] = json_lines(path)
    else:
        doc = json_document(path)
        lines = iter([doc if isinstance(doc, Problem) else (0, doc)])
    for item in lines:
        if isinstance(item, Problem):
            yield item
            continue
        number, doc = item
        # a list of conversations (lists, or objects that are no item) or one of items
        many = (
            isinstance(doc, list)
            and bool(doc)
            and all(
                isinstance(c, list) or (isinstance(c, Mapping) and "type" not in c) for c in doc
            )
        )
        convs = doc if many else [doc]
        for k, conv in enumerate(convs, 1):
            try:
                yield _run(conv, source, f"{source}#{number or k}")
            except (TypeError, ValueError, AttributeError) as exc:
                yield Problem(str(path), number, str(exc))
