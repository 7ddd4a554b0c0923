"""Chat transcripts: OpenAI chat-completions (and the layouts built on it: tau-bench's
results file, Inspect AI eval logs) and Anthropic messages.

A file holds conversations: a JSON document (one list of messages, a list of
conversations, an object with ``messages`` or ``conversations``, an Inspect eval log with
``samples``) or JSONL (one conversation a line). A conversation is a list of messages or
an object with ``messages`` (tau-bench: ``traj``) and optionally an id (``id``,
``run_id``; tau-bench ``task_id`` and ``trial``; Inspect ``id`` and ``epoch``) and an
outcome (``reward``, ``success``, ``outcome``; Inspect ``scores``). Each conversation is
one run; each assistant message is one model turn.

- OpenAI: an assistant message's ``tool_calls`` (``function.name``, ``function.arguments``
  as JSON text; Inspect: ``function`` is the name and ``arguments`` an object) matched by
  ``id`` to the ``tool`` messages' ``tool_call_id`` (Inspect's ``error`` marks an error).
- Anthropic: ``tool_use`` content blocks (``name``, ``input``) matched by ``id`` to the
  ``tool_result`` blocks' ``tool_use_id`` (``is_error`` marks an error).

A message's ``usage`` (when the export keeps it) is the recorded tokens of that turn.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ._lines import items
from ._model import Call, Problem, Run, digest, usage_of
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


def arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw  # the model wrote bad JSON: the call is still a call
    return raw


def _size(msg: Mapping[str, Any]) -> int:
    """Characters a message adds to the context: its text and its tool calls."""
    n = len(text_of(msg.get("content")))
    for tc in msg.get("tool_calls") or ():
        n += len(json.dumps(tc, default=str)) if isinstance(tc, Mapping) else 0
    return n


def _openai_call(tc: Any) -> Call:
    if not isinstance(tc, Mapping):
        raise TypeError("a tool call is not an object")
    fn = tc.get("function")
    if isinstance(fn, str):  # Inspect AI: the name, with the arguments beside it
        return Call(fn, arguments(tc.get("arguments")), "", "")
    fn = fn if isinstance(fn, Mapping) else {}
    return Call(str(fn.get("name", "")), arguments(fn.get("arguments")), "", "")


def _messages(messages: list[Any], run: Run, anthropic: bool) -> None:
    calls: dict[str, Call] = {}
    context = 0
    for turn, msg in enumerate(messages):
        if not isinstance(msg, Mapping):
            raise TypeError("a message is not an object")
        if msg.get("role") == "assistant":
            run.context[turn] = context
            recorded = usage_of(msg.get("usage"))
            if recorded is not None:
                run.usage[turn] = recorded
        context += _size(msg)
        if anthropic:
            content = msg.get("content")
            for block in content if isinstance(content, list) else ():
                if not isinstance(block, Mapping):
                    continue
                if block.get("type") == "tool_use":
                    call = Call(str(block.get("name", "")), block.get("input"), "", "", turn=turn)
                    calls[str(block.get("id"))] = call
                    run.calls.append(call)
                elif block.get("type") == "tool_result":
                    answered = calls.get(str(block.get("tool_use_id")))
                    if answered is not None:
                        answered.result = text_of(block.get("content"))
                        answered.error = bool(block.get("is_error"))
        elif msg.get("role") == "assistant":
            for tc in msg.get("tool_calls") or ():
                call = _openai_call(tc)
                call.turn = turn
                calls[str(tc.get("id"))] = call
                run.calls.append(call)
        elif msg.get("role") == "tool":
            answered = calls.get(str(msg.get("tool_call_id")))
            if answered is not None:
                answered.result = text_of(msg.get("content"))
                answered.error = bool(msg.get("error"))  # Inspect AI's ToolCallError
    finish(run.calls)


def finish(calls: list[Call]) -> list[Call]:
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
        for key in ("conversations", "samples"):  # samples: an Inspect AI eval log
            if isinstance(doc.get(key), list):
                return list(doc[key])
        return [doc]
    if isinstance(doc, list) and doc and all(isinstance(m, Mapping) and "role" in m for m in doc):
        return [doc]  # one bare list of messages
    return list(doc) if isinstance(doc, list) else [doc]


def scored(sample: Mapping[str, Any]) -> bool | None:
    """An Inspect AI sample's verdict: its scores' values, ``C`` (correct) or ``I``, or a
    number (1 is a success); None without scores."""
    scores = sample.get("scores")
    if not isinstance(scores, Mapping) or not scores:
        return None
    verdicts = []
    for score in scores.values():
        v = score.get("value") if isinstance(score, Mapping) else None
        if v in ("C", "I"):
            verdicts.append(v == "C")
        elif isinstance(v, bool | int | float):
            verdicts.append(float(v) >= 1)
    return all(verdicts) if verdicts else None


def _run_id(meta: Mapping[str, Any], default: str) -> str:
    if "task_id" in meta and "trial" in meta:  # tau-bench: one task, several trials
        return f"task {meta['task_id']} trial {meta['trial']}"
    if "epoch" in meta and "id" in meta:  # Inspect AI: one sample, several epochs
        return f"{meta['id']} epoch {meta['epoch']}"
    return str(meta.get("id") or meta.get("run_id") or default)


def run_of(conv: Any, source: str, default_id: str, anthropic: bool) -> Run:
    meta: Mapping[str, Any] = conv if isinstance(conv, Mapping) else {}
    messages = (meta.get("messages") or meta.get("traj")) if meta else conv
    if not isinstance(messages, list):
        raise TypeError(
            "a conversation is a list of messages or an object with 'messages' (or 'traj')"
        )
    verdict = succeeded(meta) if "scores" not in meta else scored(meta)
    run = Run(source, _run_id(meta, default_id), [], verdict)
    _messages(messages, run, anthropic or is_anthropic(messages))
    return run


def read(path: Path, *, anthropic: bool, jsonl: bool) -> Iterator[Run | Problem]:
    source = path.name.split(".")[0]
    for item in items(path, jsonl):
        if isinstance(item, Problem):
            yield item
            continue
        number, doc = item
        convs = conversations(doc)
        for k, conv in enumerate(convs, 1):
            default_id = f"{source}#{number or k}" + (f".{k}" if number and len(convs) > 1 else "")
            try:
                yield run_of(conv, source, default_id, anthropic)
            except (ValueError, TypeError, AttributeError) as exc:
                what = f"conversation {k}: " if len(convs) > 1 or not number else ""
                yield Problem(str(path), number, f"{what}{exc}")
