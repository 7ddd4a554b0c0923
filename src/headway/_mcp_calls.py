"""One MCP ``tools/call`` through headway, on the JSON of the protocol: its spec from the
tool's annotations (``declare``), the call (``govern``) and the answer the client receives
(``answer_json``). Both forms of ``headway proxy`` use it; it imports no MCP library, so
the stdio relay (``_mcp_relay``) runs without loading one (a smaller, quicker process).
"""

from __future__ import annotations

import contextlib
import json
import sys
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson

from ._call import result_text
from ._session import Governor, Session
from .errors import HeadwayError, Stop
from .outcome import Outcome, Status

IDEMPOTENCY_KEY = "headway/idempotency_key"
USER_TURN = "headway/user_turn"
SESSION = "headway/session"


class UpstreamError(ConnectionError):
    """The upstream MCP server crashed, closed the connection or cannot be reached."""


def _unreachable(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(10):  # the chain FastMCP raises is a few errors deep
        if seen is None:
            return False
        if isinstance(seen, OSError) or _connection_closed(seen):
            return True
        if type(seen).__name__ in ("ConnectError", "RemoteProtocolError", "ReadError"):
            return True  # httpx, for an HTTP upstream
        seen = seen.__cause__ or seen.__context__
    return False


def _connection_closed(exc: BaseException) -> bool:
    """The MCP library's "connection closed" error. Looked up only when that library is
    loaded (the stdio relay never loads it): no such error can exist otherwise."""
    exceptions = sys.modules.get("mcp.shared.exceptions")
    if exceptions is None or not isinstance(exc, exceptions.MCPError):
        return False
    from mcp_types import CONNECTION_CLOSED

    return bool(exc.error.code == CONNECTION_CLOSED)


ANSWERED = (Status.EXECUTED, Status.CACHED, Status.REPLAYED, Status.FALLBACK)


Refusal = tuple[str, dict[str, Any]]  # headway's text and _meta.headway for a call not run


async def govern(
    session: Session,
    name: str,
    arguments: Mapping[str, Any],
    meta: Mapping[str, Any],
    forward: Callable[[], Awaitable[dict[str, Any]]],
) -> Outcome | Refusal:
    """One ``tools/call`` through ``session``: its outcome, or headway's refusal (a stop,
    a key that cannot be used). ``forward`` runs it upstream and gives the JSON of the
    upstream's ``CallToolResult``; ``meta`` is the request's ``_meta``."""
    if meta.get(USER_TURN) is True:
        session.user_turn()

    async def run(**_: Any) -> dict[str, Any]:
        try:
            return await forward()
        except Exception as exc:
            if _unreachable(exc):  # retryable: reads are tried again, stdio restarted
                raise UpstreamError(
                    f"the upstream MCP server crashed, closed the connection or cannot "
                    f"be reached ({type(exc).__name__}: {exc})"
                ) from exc
            raise

    key = meta.get(IDEMPOTENCY_KEY)
    try:
        return await session.acall(
            name,
            dict(arguments),
            idempotency_key=str(key) if key is not None else None,
            run=run,
        )
    except Stop as stop:
        return (
            f"headway stopped this session: {json.dumps(stop.diagnostic, default=str)}",
            {"status": "stopped", "session": session.id, "diagnostic": stop.diagnostic},
        )
    except HeadwayError as exc:  # arguments that cannot be keyed, a reused key
        return f"headway refused this call: {exc}", {"status": "refused", "session": session.id}


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


def headway_meta(out: Outcome, session: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "status": str(out.status),
        "session": session,
        "step": out.step,
        "executed": out.executed,
    }
    if out.reconcile_key is not None:
        meta["reconcile_key"] = out.reconcile_key
    if out.correction:
        meta["correction"] = out.correction
    return meta


def answer_json(
    out: Outcome, ran: Mapping[str, Any] | None, session: str, schema: Any = None
) -> dict[str, Any]:
    """``answer`` on JSON (the stdio relay): the ``CallToolResult`` the client receives.
    ``ran``: the upstream's result during this call, if it ran, as the upstream sent it;
    ``schema``: the tool's output schema, if it listed one."""
    headway = headway_meta(out, session)
    extra: list[Any] = [{"type": "text", "text": out.correction}] if out.correction else []
    error = out.error or {}
    if ran is not None and (
        out.status is Status.EXECUTED
        or (out.status is Status.ERROR and error.get("code") == "error_result")
    ):
        base: Mapping[str, Any] = ran
    elif out.status in ANSWERED and isinstance(out.value, Mapping) and "content" in out.value:
        base = out.value  # the stored upstream result
    elif out.status in ANSWERED:  # a fallback value from the operator's configuration
        base, extra = {"content": []}, [{"type": "text", "text": out.to_model()}]
        structured = fallback_structured(out.value, schema)
        if structured is not None:
            base = {**base, "structuredContent": structured}
    else:
        return error_json(out.to_model(), headway)
    return {
        "resultType": "complete",  # required from 2026-07-28 on; absent means the same
        **base,
        "content": [*(base.get("content") or []), *extra],
        "_meta": {**(base.get("_meta") or {}), "headway": headway},
    }


def fallback_structured(value: Any, schema: Any) -> Any:
    """The structured content of a fallback for a tool with an output schema (a client
    rejects a result without one): the value if it is an object, else wrapped as
    ``{"result": value}``, the form FastMCP servers give a tool that returns a plain value.
    None for a tool without an output schema."""
    if schema is None:
        return None
    return dict(value) if isinstance(value, Mapping) else {"result": value}


def error_json(text: str, headway: dict[str, Any]) -> dict[str, Any]:
    return {
        "resultType": "complete",
        "content": [{"type": "text", "text": text}],
        "isError": True,
        "_meta": {"headway": headway},
    }


def new_stdio_session() -> str:
    return f"stdio-{uuid.uuid4().hex[:12]}"


def note(text: str) -> None:
    """A line for the operator: stderr, since stdout carries the MCP protocol."""
    print(f"headway proxy: {text}", file=sys.stderr, flush=True)
