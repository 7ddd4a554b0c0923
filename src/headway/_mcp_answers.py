"""What the MCP client receives for a governed ``tools/call``: the ``CallToolResult`` of an
outcome (``answer_json``), its ``_meta.headway``, the note on a stored result, and the
answer to a call headway refused or a stopped session (``Refusal``).
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Mapping
from typing import Any

from .errors import LoopDetected, Stop
from .outcome import Outcome, Status

ANSWERED = (Status.EXECUTED, Status.CACHED, Status.REPLAYED, Status.FALLBACK)


Refusal = tuple[str, dict[str, Any]]  # headway's text and _meta.headway for a call not run


def stopped(stop: Stop, session: str, idle_s: float) -> Refusal:
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
