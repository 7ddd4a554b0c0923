"""LangChain v1 and LangGraph: ``HeadwayMiddleware(gov)`` for ``create_agent(...,
middleware=[...])``, and ``governed_tool_node(gov, tools)`` for a custom graph's ToolNode.

Each tool call goes through ``session.call``/``acall`` with the framework's own handler as
its runner. The session is the state's ``headway_session``, else the thread id, else (the
middleware only) a fresh id per ``invoke()``. A stop ends the run: the middleware jumps to
"end" with the diagnostic in ``state["headway_stop"]``, or raises it (``on_stop="raise"``).
"""

from __future__ import annotations

import contextvars
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NotRequired, cast

from ._common import declare, require, step_of

require("langchain.agents", "langchain")

from langchain.agents.middleware import AgentMiddleware, AgentState, hook_config  # noqa: E402
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage  # noqa: E402
from langgraph.config import get_config  # noqa: E402
from langgraph.prebuilt import ToolNode  # noqa: E402

from ..errors import Stop  # noqa: E402
from ..outcome import CACHED, ERROR, EXECUTED, REPLAYED, Outcome  # noqa: E402

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import BaseTool
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.runtime import Runtime
    from langgraph.types import Command

    from .._session import Governor, Session

__all__ = ["HeadwayMiddleware", "HeadwayState", "governed_tool_node"]

_HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
Handler = Callable[["ToolCallRequest"], Any]


class HeadwayState(AgentState[Any]):
    """The agent state with headway's two keys: the session id, and a stop's diagnostic."""

    headway_session: NotRequired[str]
    headway_stop: NotRequired[dict[str, Any]]


class HeadwayMiddleware(AgentMiddleware[HeadwayState, Any]):
    """headway in a LangChain agent: every tool call governed, the run ended on a stop.

    ``on_stop="end"`` (the default, like LangChain's own limit middleware) ends the run with
    an AI message and the diagnostic in ``state["headway_stop"]``; ``"raise"`` lets the
    ``headway.Stop`` propagate out of ``invoke()``. ``idempotency_key(request)`` may give a
    tool call an explicit key; by default a write is keyed by the session and its call id.
    """

    state_schema = HeadwayState

    def __init__(
        self,
        gov: Governor,
        *,
        on_stop: str = "end",
        idempotency_key: Callable[[ToolCallRequest], str | None] | None = None,
    ) -> None:
        if on_stop not in ("end", "raise"):
            raise ValueError(f"on_stop must be 'end' or 'raise', not {on_stop!r}")
        super().__init__()
        self.gov = gov
        self.on_stop = on_stop
        self.key_of = idempotency_key
        self.tools: Sequence[BaseTool] = []

    # -- the run: session, user turns, model turns, the end on a stop ------------------

    def before_agent(self, state: HeadwayState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """A new ``invoke()``: name the session; a new human message is a new user turn."""
        sid = state.get("headway_session") or _thread_of(get_config()) or uuid.uuid4().hex
        messages = state["messages"]
        if messages and isinstance(messages[-1], HumanMessage):
            self.gov.session(sid).user_turn()
        return None if state.get("headway_session") == sid else {"headway_session": sid}

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: HeadwayState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """A tool call of the last turn was stopped: end before asking the model again."""
        for message in reversed(state["messages"]):
            if not isinstance(message, ToolMessage):
                return None
            stop = (
                message.artifact.get("headway_stop") if isinstance(message.artifact, dict) else None
            )
            if stop is not None:
                return {
                    "jump_to": "end",
                    "headway_stop": stop,
                    "messages": [AIMessage(_said(stop))],
                }
        return None

    @hook_config(can_jump_to=["end"])
    def after_model(self, state: HeadwayState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Report the model turn (turn and token budgets); a stopped session ends here."""
        last = state["messages"][-1]
        usage = getattr(last, "usage_metadata", None) or {}
        try:
            self._session(state, get_config()).record_turn(tokens=int(usage.get("total_tokens", 0)))
        except Stop as stop:
            if self.on_stop == "raise":
                raise
            calls = getattr(last, "tool_calls", None) or []
            answers: list[AnyMessage] = [_stopped(c, stop) for c in calls]  # none left dangling
            return {
                "jump_to": "end",
                "headway_stop": stop.diagnostic,
                "messages": [*answers, AIMessage(_said(stop.diagnostic))],
            }
        return None

    # -- tool calls ------------------------------------------------------------------

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]
    ) -> ToolMessage | Command[Any]:
        session, name, args, keys = self._begin(request)
        box: list[Any] = []
        ctx = contextvars.copy_context()  # the tool may run in headway's timeout thread
        try:
            out = session.call(
                name, args, run=_runner(box, lambda: ctx.copy().run(handler, request)), **keys
            )
        except Stop as stop:
            if self.on_stop == "raise":
                raise
            return _stopped(request.tool_call, stop)
        return _answer(request, out, box)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        session, name, args, keys = self._begin(request)
        box: list[Any] = []

        async def run(**_: Any) -> Any:
            try:
                return _content(box, await handler(request))
            except Exception as exc:
                box.append(exc)
                raise

        try:
            out = await session.acall(name, args, run=run, **keys)
        except Stop as stop:
            if self.on_stop == "raise":
                raise
            return _stopped(request.tool_call, stop)
        return _answer(request, out, box)

    def _begin(self, request: ToolCallRequest) -> tuple[Session, str, Any, dict[str, Any]]:
        call = request.tool_call
        name = call["name"]
        spec = self.gov.spec(name) or declare(self.gov, name, _annotations(request.tool))
        keys: dict[str, Any] = {}
        if spec.effect != "read":
            explicit = self.key_of(request) if self.key_of is not None else None
            if explicit is not None:
                keys["idempotency_key"] = explicit
            else:
                keys["step_id"] = step_of(call.get("id"))
        state = request.state if isinstance(request.state, Mapping) else {}
        return self._session(state, request.runtime.config), name, call["args"], keys

    def _session(self, state: Mapping[str, Any], config: RunnableConfig | None) -> Session:
        sid = state.get("headway_session") or _thread_of(config)
        if not sid:
            raise ValueError(
                "headway needs a session for this run: give the graph a thread id "
                '(config={"configurable": {"thread_id": ...}}) or a "headway_session" state key'
            )
        return self.gov.session(str(sid))


def governed_tool_node(gov: Governor, tools: Sequence[Any], **options: Any) -> ToolNode:
    """A LangGraph ``ToolNode`` whose tool calls go through headway (for custom graphs).

    The session is the thread id (or a ``headway_session`` key of the graph's state); a stop
    is raised out of ``invoke()`` as the ``headway.Stop`` it is. Other options go to ToolNode.
    """
    mw = HeadwayMiddleware(gov, on_stop="raise")
    return ToolNode(
        tools, wrap_tool_call=mw.wrap_tool_call, awrap_tool_call=mw.awrap_tool_call, **options
    )


def _runner(box: list[Any], call: Callable[[], Any]) -> Callable[..., Any]:
    def run(**_: Any) -> Any:
        try:
            return _content(box, call())
        except Exception as exc:
            box.append(exc)
            raise

    return run


def _content(box: list[Any], result: Any) -> Any:
    """What headway judges: the message's content (its id differs on every call), and a
    framework error as an error result with the same text."""
    box.append(result)
    if not isinstance(result, ToolMessage):
        return result
    if result.status == "error":
        return {"is_error": True, "content": result.content}
    return result.content


def _answer(request: ToolCallRequest, out: Outcome, box: list[Any]) -> ToolMessage | Command[Any]:
    """The outcome as LangChain's ToolMessage; an exception of the handler is re-raised, so
    ToolNode's ``handle_tool_errors`` decides as it would without headway."""
    own = box[-1] if box else None
    status = out.status
    if status is ERROR and isinstance(own, Exception):
        raise own
    if status is EXECUTED or (status is ERROR and isinstance(own, ToolMessage)):
        if isinstance(own, ToolMessage) and out.correction is not None:
            return own.model_copy(update={"content": _with(own.content, out.correction)})
        return cast("ToolMessage | Command[Any]", own)  # the handler's own answer, unchanged
    call = request.tool_call
    if status is CACHED or status is REPLAYED:
        content = out.value if out.correction is None else _with(out.value, out.correction)
        return ToolMessage(content=content, tool_call_id=call["id"], name=call["name"])
    return ToolMessage(
        content=out.to_model(), tool_call_id=call["id"], name=call["name"], status="error"
    )


def _with(content: Any, note: str) -> Any:
    if isinstance(content, list):
        return [*content, {"type": "text", "text": note}]
    return f"{content}\n{note}" if isinstance(content, str) else note


def _stopped(call: Mapping[str, Any], stop: Stop) -> ToolMessage:
    return ToolMessage(
        content=_said(stop.diagnostic),
        tool_call_id=call["id"],
        name=call["name"],
        status="error",
        artifact={"headway_stop": stop.diagnostic},
    )


def _said(diagnostic: Mapping[str, Any]) -> str:
    why = diagnostic.get("signal") or diagnostic.get("budget_type") or ""
    advice = diagnostic.get("suggestion") or diagnostic.get("hint") or ""
    return f"headway stopped this run ({diagnostic.get('terminated_by')} {why}). {advice}".strip()


def _thread_of(config: Mapping[str, Any] | None) -> str | None:
    thread = ((config or {}).get("configurable") or {}).get("thread_id")
    return None if thread is None else str(thread)


def _annotations(tool: BaseTool | None) -> dict[str, Any] | None:
    """MCP annotations as langchain-mcp-adapters leave them: in the tool's metadata."""
    meta = getattr(tool, "metadata", None) or {}
    hints = {k: meta[k] for k in _HINTS if meta.get(k) is not None}
    return hints or None
