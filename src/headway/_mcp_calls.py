"""One MCP ``tools/call`` through headway, on the JSON of the protocol: the call itself
(``govern``: user turns, the session's call, a refusal), the per-process state around it
(``Turns``, ``Taken``) and the protocol's ``_meta`` keys. Both forms of ``headway proxy``
import what they need of a call from here: the tool's spec (``_mcp_results``), the
answer the client receives (``_mcp_answers``) and the upstream's failures
(``_mcp_errors``) are re-exported. None of these imports an MCP library, so the stdio
relay (``_mcp_relay``) runs without loading one (a smaller, quicker process).
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson

from ._mcp_answers import (
    ANSWERED,
    Refusal,
    answer_json,
    error_json,
    fallback_structured,
    headway_meta,
    stopped,
    stored_note,
)
from ._mcp_errors import UpstreamLostError, UpstreamUnreachableError, _lost, _unreachable
from ._mcp_results import declare, is_ask, judge_results, not_final, result_said
from ._recent import Recent
from ._session import Session
from .errors import HeadwayError, Stop
from .outcome import Outcome, Status

__all__ = [
    "ANSWERED",
    "IDEMPOTENCY_KEY",
    "SESSION",
    "USER_TURN",
    "Refusal",
    "Taken",
    "Turns",
    "UpstreamLostError",
    "UpstreamUnreachableError",
    "answer_json",
    "declare",
    "error_json",
    "fallback_structured",
    "govern",
    "headway_meta",
    "is_ask",
    "judge_results",
    "new_stdio_session",
    "not_final",
    "note",
    "result_key",
    "result_said",
    "stored_note",
]

IDEMPOTENCY_KEY = "headway/idempotency_key"
USER_TURN = "headway/user_turn"
SESSION = "headway/session"


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
        return stopped(stop, session.id, session.governor.idle_turn_s)
    except HeadwayError as exc:  # arguments that cannot be keyed, a reused key
        refused = {"status": "refused", "session": session.id, "executed": False}
        return f"headway refused this call: {exc}", refused
    else:
        if out.status is Status.EXECUTED:
            taken.received(result_key(session.id, name, arguments, key), out.value)
        return out
    finally:
        turns.end(session.id)


def new_stdio_session() -> str:
    return f"stdio-{uuid.uuid4().hex[:12]}"


def note(text: str) -> None:
    """A line for the operator: stderr, since stdout carries the MCP protocol."""
    print(f"headway proxy: {text}", file=sys.stderr, flush=True)
