"""One MCP ``tools/call`` through headway, on the JSON of the protocol: its spec from the
tool's annotations (``declare``), the call (``govern``) and the answer the client receives
(``answer_json``). Both forms of ``headway proxy`` use it; it imports no MCP library, so
the stdio relay (``_mcp_relay``) runs without loading one (a smaller, quicker process).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson

from ._call import result_text
from ._recent import Recent
from ._session import Governor, Session
from .errors import HeadwayError, LoopDetected, Stop
from .outcome import Outcome, Status

IDEMPOTENCY_KEY = "headway/idempotency_key"
USER_TURN = "headway/user_turn"
SESSION = "headway/session"


class UpstreamError(ConnectionError):
    """The upstream MCP server crashed, closed the connection or cannot be reached."""


class UpstreamUnreachableError(UpstreamError, ConnectionRefusedError):
    """The request never reached the upstream: it could not be started, or it had exited
    before the request was written. Nothing ran, so a retry may help (a refused
    connection, to the classifier: semantics §5.2)."""


class UpstreamLostError(UpstreamError, ConnectionResetError):
    """The upstream exited or closed the connection after the request was sent: the call
    may have run (semantics §5.2, a lost connection). A read is tried again; a write's
    outcome is unknown, and it is never run again in the same call."""


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


def _lost(exc: BaseException) -> bool:
    """An upstream that went away after the request was sent (an MCP "connection closed",
    a reset, a broken stream), not one that could not be reached (refused, no such
    command, a name that does not resolve): the call may have run."""
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return False
        if isinstance(seen, UpstreamError):  # the relay said which it was
            return isinstance(seen, UpstreamLostError)
        if isinstance(seen, ConnectionRefusedError | FileNotFoundError | PermissionError):
            return False
        if type(seen).__name__ in ("ConnectError", "ConnectTimeout"):
            return False  # httpx: the connection was never made
        if _connection_closed(seen) or type(seen).__name__ in ("RemoteProtocolError", "ReadError"):
            return True
        if isinstance(seen, ConnectionResetError | ConnectionAbortedError | BrokenPipeError):
            return True
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


class Turns:
    """User turns of clients that mark none: per client session, the calls in flight and
    when the last one ended. A call that comes after an idle gap of ``idle_s`` with
    nothing in flight starts a new user turn (semantics §4.2: a stdio session lives as
    long as the desktop client, across the user's requests). ``idle_s`` 0: never."""

    def __init__(self, idle_s: float, clock: Callable[[], float]) -> None:
        self.idle_s = idle_s
        self.clock = clock
        self._sessions: Recent[list[Any]] = Recent(10_000)  # id -> [in flight, last end]

    def begin(self, session: str) -> bool:
        """A call starts; True when it starts a new user turn."""
        state = self._sessions.get(session)
        if state is None:
            state = self._sessions.put(session, [0, None])
        in_flight, ended = state
        state[0] += 1
        return bool(
            self.idle_s
            and in_flight == 0
            and ended is not None
            and self.clock() - ended >= self.idle_s
        )

    def end(self, session: str) -> None:
        state = self._sessions.get(session)
        if state is not None:
            state[0] = max(state[0] - 1, 0)
            state[1] = self.clock()


class Taken:
    """When this process received the results later calls may be served (CACHED, REPLAYED):
    the time each was received, and a fingerprint of it, so that an answer says when its
    stored result was taken only when it is the very result this process received then
    (another replica sharing the store may have stored it: then no time is claimed)."""

    def __init__(self) -> None:
        self._results: Recent[tuple[float, int]] = Recent(4096)

    def received(self, key: str, value: Any) -> None:
        mark = _fingerprint(value)
        if mark is not None:
            self._results.put(key, (time.time(), mark))

    def when(self, key: str, value: Any) -> float | None:
        seen = self._results.get(key)
        return seen[0] if seen is not None and seen[1] == _fingerprint(value) else None


def _fingerprint(value: Any) -> int | None:
    try:
        return hash(orjson.dumps(value, option=orjson.OPT_SORT_KEYS))
    except TypeError:  # what orjson does not write (integers past 64 bits): no claim
        return None


def result_key(session: str, name: str, arguments: Any, idempotency_key: Any) -> str:
    """What identifies a stored result: the keyed write's key, else the read's session,
    tool and arguments."""
    if idempotency_key is not None:
        return f"key\0{idempotency_key}"
    try:
        args = orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        args = repr(arguments)
    return f"read\0{session}\0{name}\0{args}"


async def govern(
    session: Session,
    name: str,
    arguments: Mapping[str, Any],
    meta: Mapping[str, Any],
    forward: Callable[[], Awaitable[dict[str, Any]]],
    turns: Turns,
    taken: Taken,
) -> Outcome | Refusal:
    """One ``tools/call`` through ``session``: its outcome, or headway's refusal (a stop,
    a key that cannot be used). ``forward`` runs it upstream and gives the JSON of the
    upstream's ``CallToolResult`` (raising ``UpstreamLostError`` when the upstream went away
    after the request was sent); ``meta`` is the request's ``_meta``. A new user turn
    (``headway/user_turn``, or an idle gap) comes first: it lifts a no-progress stop."""
    idle = turns.begin(session.id)
    try:
        if meta.get(USER_TURN) is True or idle:
            session.user_turn()

        async def run(**_: Any) -> dict[str, Any]:
            try:
                return await forward()
            except UpstreamLostError:
                raise
            except Exception as exc:
                if _unreachable(exc):  # retryable: reads are tried again, stdio restarted
                    lost = _lost(exc)
                    raise (UpstreamLostError if lost else UpstreamUnreachableError)(
                        f"the upstream MCP server crashed, closed the connection or cannot "
                        f"be reached ({type(exc).__name__}: {exc})"
                    ) from exc
                raise

        key = meta.get(IDEMPOTENCY_KEY)
        out = await session.acall(
            name,
            dict(arguments),
            idempotency_key=str(key) if key is not None else None,
            run=run,
        )
    except Stop as stop:
        return _stopped(stop, session.id, session.governor.idle_turn_s)
    except HeadwayError as exc:  # arguments that cannot be keyed, a reused key
        refused = {"status": "refused", "session": session.id, "executed": False}
        return f"headway refused this call: {exc}", refused
    else:
        if out.status is Status.EXECUTED:
            taken.received(result_key(session.id, name, arguments, key), out.value)
        return out
    finally:
        turns.end(session.id)


def _stopped(stop: Stop, session: str, idle_s: float) -> Refusal:
    """A stopped session's answer: its diagnostic, and what lifts the stop (semantics
    §4.2: a new user turn lifts a no-progress stop; a budget's stop stays)."""
    text = f"headway stopped this session: {json.dumps(stop.diagnostic, default=str)}."
    if isinstance(stop, LoopDetected):
        text += " This call did not run, nor will any other until the user makes a new request"
        text += (
            f" (the client marks a new user turn, or no call is made for {idle_s:g} s)."
            if idle_s
            else " (the client marks a new user turn)."
        )
    else:
        text += " This call did not run: the budget is spent for the rest of the session."
    meta = {"status": "stopped", "session": session, "executed": False}
    return text, {**meta, "diagnostic": stop.diagnostic}


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


def headway_meta(out: Outcome, session: str, ran: bool) -> dict[str, Any]:
    """``_meta.headway``: ``executed`` is true only when the upstream ran the call and
    answered with a result during it (``ran``)."""
    meta: dict[str, Any] = {
        "status": str(out.status),
        "session": session,
        "step": out.step,
        "executed": ran,
    }
    if out.reconcile_key is not None:
        meta["reconcile_key"] = out.reconcile_key
    if out.correction:
        meta["correction"] = out.correction
    return meta


def stored_note(out: Outcome, when: float | None) -> str | None:
    """The text block a CACHED or REPLAYED answer carries, in the content the model reads
    (clients do not show ``_meta`` to models): the result is a stored one, and when this
    process received it, if it knows."""
    if when is not None:
        stamp = datetime.datetime.fromtimestamp(when, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        at = f", taken at {stamp} ({max(time.time() - when, 0):.0f} s ago)"
    else:
        at = ""
    if out.status is Status.CACHED:
        return (
            f"[headway: the stored result of an identical earlier call of {out.tool}{at}; "
            "the tool did not run for this call]"
        )
    if out.status is Status.REPLAYED:
        return (
            f"[headway: this operation already completed{at}; this is its stored result, "
            "it was not performed again]"
        )
    return None


def answer_json(
    out: Outcome,
    ran: Mapping[str, Any] | None,
    session: str,
    schema: Any = None,
    taken: float | None = None,
) -> dict[str, Any]:
    """``answer`` on JSON (the stdio relay): the ``CallToolResult`` the client receives.
    ``ran``: the upstream's result during this call, if it ran, as the upstream sent it;
    ``schema``: the tool's output schema, if it listed one; ``taken``: when a stored
    result was received, if known."""
    headway = headway_meta(out, session, ran is not None)
    note = stored_note(out, taken)
    extra: list[Any] = [{"type": "text", "text": out.correction}] if out.correction else []
    if note is not None:
        extra.insert(0, {"type": "text", "text": note})
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
