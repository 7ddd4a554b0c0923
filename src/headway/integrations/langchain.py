"""LangChain v1 and LangGraph: ``HeadwayMiddleware(gov)`` for ``create_agent(...,
middleware=[...])``, and ``governed_tool_node(gov, tools)`` for a custom graph's ToolNode.

Each tool call goes through ``session.call``/``acall`` with the framework's own handler as
its runner. The session is the state's ``headway_session``, else the thread id, else (the
middleware only) a fresh id per ``invoke()``; each model turn opens it (a session shared
through the store is read again then), and the turn's tool calls use that handle. A stop
ends the run: the middleware answers the next model call itself with a final AI message
(the model is not asked) and puts the diagnostic in ``state["headway_stop"]``, or raises it
(``on_stop="raise"``) as ``HeadwayStop``: a ``headway.Stop`` that is also a LangGraph
``GraphBubbleUp``, so no ToolNode ``handle_tool_errors`` or retry policy turns it into a
message while the run goes on. Everything happens in ``wrap_model_call`` /
``wrap_tool_call``: no extra graph step per turn.
"""

from __future__ import annotations

import contextvars
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NotRequired, cast

from .._canonical import canonical_json
from .._recent import Recent
from ._common import declare, native, require, served, step_of, stop_text

require("langchain.agents", "langchain")

from langchain.agents.middleware import (  # noqa: E402
    AgentMiddleware,
    AgentState,
    ExtendedModelResponse,
    ModelCallResult,
    ModelRequest,
    ModelResponse,
)
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langgraph.config import get_config  # noqa: E402
from langgraph.errors import GraphBubbleUp  # noqa: E402

try:
    from langgraph.errors import is_invalid_resume
except ImportError:  # pragma: no cover - a langgraph that never marks resume errors

    def is_invalid_resume(error: BaseException) -> bool:
        return False


from langgraph.prebuilt import ToolNode  # noqa: E402
from langgraph.types import Command  # noqa: E402

from ..errors import BudgetExceeded, ConfigError, LoopDetected, Stop  # noqa: E402
from ..outcome import CACHED, ERROR, EXECUTED, REPLAYED, Outcome  # noqa: E402

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import BaseTool
    from langgraph.prebuilt.tool_node import ToolCallRequest

    from .._session import Governor, Session

__all__ = [
    "BudgetStopped",
    "HeadwayMiddleware",
    "HeadwayState",
    "HeadwayStop",
    "LoopStopped",
    "governed_tool_node",
]

# MCP tool annotations: camelCase as the protocol spells them, snake_case as mcp 2.x's
# ToolAnnotations fields are named (langchain-mcp-adapters copies its model_dump())
_HINTS = (
    "readOnlyHint",
    "destructiveHint",
    "idempotentHint",
    "openWorldHint",
    "read_only_hint",
    "destructive_hint",
    "idempotent_hint",
    "open_world_hint",
)


class HeadwayStop(Stop, GraphBubbleUp):
    """headway stopped the run: raised out of ``invoke()``; ``diagnostic`` says why. A
    LangGraph ``GraphBubbleUp``, as interrupts are: never made into a tool error message."""


class LoopStopped(HeadwayStop, LoopDetected):
    """The run made no progress for its no-progress limit."""


class BudgetStopped(HeadwayStop, BudgetExceeded):
    """The run exhausted one of its budgets."""


def _native(stop: Stop) -> HeadwayStop:
    return native(stop, BudgetStopped, LoopStopped)


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
            raise ConfigError(f"on_stop must be 'end' or 'raise', not {on_stop!r}")
        super().__init__()
        self.gov = gov
        self.on_stop = on_stop
        self.key_of = idempotency_key
        self.tools: Sequence[BaseTool] = []
        self._open: Recent[Session] = Recent()  # session id -> the handle of its latest turn
        # (session, tool, arguments) -> the artifact of its latest executed ToolMessage, so a
        # served answer of a content_and_artifact tool keeps it (in this process)
        self._artifacts: Recent[Any] = Recent(1_000)

    # -- model calls: the session, user turns, model turns, the end on a stop ---------
    # (inside the model node, so headway adds no graph step to the agent loop)

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse]
    ) -> ModelCallResult:
        begun = self._before_model(request)
        if isinstance(begun, ExtendedModelResponse):
            return begun
        return self._after_model(*begun, handler(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse]],
    ) -> ModelCallResult:
        begun = self._before_model(request)
        if isinstance(begun, ExtendedModelResponse):
            return begun
        return self._after_model(*begun, await handler(request))

    def _before_model(
        self, request: ModelRequest[Any]
    ) -> tuple[Session, dict[str, Any]] | ExtendedModelResponse[Any]:
        """Name the session; a new human message is a new user turn; a stopped session (a
        tool call of the last turn was stopped, or an earlier run) ends the run here,
        before the model is asked again."""
        state = request.state
        sid = state.get("headway_session") or _thread_of(get_config())
        update: dict[str, Any] = {}
        if not sid:  # no thread: this invoke() is its own session, named in the state
            sid = update["headway_session"] = uuid.uuid4().hex
        sid = str(sid)
        session = self._open.put(sid, self.gov.session(sid))
        messages = request.messages
        for message in reversed(messages):
            if not isinstance(message, ToolMessage):
                break
            artifact = message.artifact
            if isinstance(artifact, dict) and "headway_stop" in artifact:
                return self._end(Stop(artifact["headway_stop"]), update)
        if messages and isinstance(messages[-1], HumanMessage):
            session.user_turn()
        if session.stopped:
            try:
                session.record_turn()  # raises the session's stop
            except Stop as stop:
                return self._end(stop, update)
        return session, update

    def _after_model(
        self, session: Session, update: dict[str, Any], response: ModelResponse
    ) -> ModelCallResult:
        """Report the model turn with its tokens (turn and token budgets)."""
        usage = getattr(response.result[-1], "usage_metadata", None) if response.result else None
        try:
            session.record_turn(tokens=int((usage or {}).get("total_tokens", 0)))
        except Stop as stop:
            return self._end(stop, update)
        if update:
            return ExtendedModelResponse(model_response=response, command=Command(update=update))
        return response

    def _end(self, stop: Stop, update: dict[str, Any]) -> ExtendedModelResponse[Any]:
        """The run ends as LangChain's limit middleware ends one: a last AI message (with
        no tool calls) saying why, and the diagnostic in ``state["headway_stop"]``."""
        if self.on_stop == "raise":
            raise _native(stop) from None
        return ExtendedModelResponse(
            model_response=ModelResponse(result=[AIMessage(stop_text(stop.diagnostic))]),
            command=Command(update={**update, "headway_stop": stop.diagnostic}),
        )

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
                raise _native(stop) from None
            return _stopped(request.tool_call, stop)
        return self._answer(request, session, out, box)

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
                raise _native(stop) from None
            return _stopped(request.tool_call, stop)
        return self._answer(request, session, out, box)

    def _answer(
        self, request: ToolCallRequest, session: Session, out: Outcome, box: list[Any]
    ) -> ToolMessage | Command[Any]:
        """The outcome as LangChain's ToolMessage, a served one with the artifact its tool
        gave (a ``content_and_artifact`` tool keeps it)."""
        call = request.tool_call
        where = f"{session.id}\x00{call['name']}\x00{canonical_json(call['args'])}"
        own = box[-1] if box else None
        if isinstance(own, ToolMessage) and own.artifact is not None:
            self._artifacts.put(where, own.artifact)
        answer = _answer(request, out, box)
        if out.status is CACHED or out.status is REPLAYED:
            artifact = self._artifacts.get(where)
            if artifact is not None and isinstance(answer, ToolMessage):
                return answer.model_copy(update={"artifact": artifact})
        return answer

    def _begin(self, request: ToolCallRequest) -> tuple[Session, str, Any, dict[str, Any]]:
        call = request.tool_call
        name = call["name"]
        spec = self.gov.spec(name) or declare(self.gov, name, _annotations(request.tool))
        keys: dict[str, Any] = {"call_id": call.get("id")}
        state = request.state if isinstance(request.state, Mapping) else {}
        if spec.effect != "read":
            explicit = self.key_of(request) if self.key_of is not None else None
            if explicit is not None:
                keys["idempotency_key"] = explicit
            else:
                keys["step_id"] = step_of(call.get("id"), spec, call["args"])
        return self._session(state, request.runtime.config), name, call["args"], keys

    def _session(self, state: Mapping[str, Any], config: RunnableConfig | None) -> Session:
        sid = state.get("headway_session") or _thread_of(config)
        if not sid:
            raise ConfigError(
                "headway needs a session for this run: give the graph a thread id "
                '(config={"configurable": {"thread_id": ...}}) or a "headway_session" state key'
            )
        sid = str(sid)
        session = self._open.get(sid)  # opened by this turn's model call, or an earlier call
        return self._open.put(sid, self.gov.session(sid)) if session is None else session


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
    """The outcome as LangChain's ToolMessage. An exception of the tool reaches headway only
    when no ``handle_tool_errors`` of the ToolNode answered it (LangChain's default answers
    none but bad arguments, and would end the run with it): the model reads headway's
    classified error (retryable or not, what to do) after headway's retries. Interrupts and
    resume errors go on up, as LangGraph wants."""
    own = box[-1] if box else None
    status = out.status
    if status is ERROR and isinstance(own, GraphBubbleUp | Exception) and _passes(own):
        raise own
    if status is EXECUTED or (status is ERROR and isinstance(own, ToolMessage)):
        if isinstance(own, ToolMessage) and out.correction is not None:
            return own.model_copy(update={"content": _with(own.content, out.correction)})
        return cast("ToolMessage | Command[Any]", own)  # the handler's own answer, unchanged
    call = request.tool_call
    if status is CACHED or status is REPLAYED:
        value = out.value
        content = served(out) if isinstance(value, str) or out.correction is not None else value
        if isinstance(value, list):  # content blocks: headway's note is one more block
            content = _with(value, served(out._replace(value="")).lstrip("\n"))
        return ToolMessage(content=content, tool_call_id=call["id"], name=call["name"])
    return ToolMessage(
        content=out.to_model(), tool_call_id=call["id"], name=call["name"], status="error"
    )


def _passes(exc: BaseException) -> bool:
    """An exception headway leaves to LangGraph: an interrupt, a bad resume value."""
    return isinstance(exc, GraphBubbleUp) or is_invalid_resume(exc)


def _with(content: Any, note: str) -> Any:
    if isinstance(content, list):
        return [*content, {"type": "text", "text": note}]
    return f"{content}\n{note}" if isinstance(content, str) else note


def _stopped(call: Mapping[str, Any], stop: Stop) -> ToolMessage:
    return ToolMessage(
        content=stop_text(stop.diagnostic),
        tool_call_id=call["id"],
        name=call["name"],
        status="error",
        artifact={"headway_stop": stop.diagnostic},
    )


def _thread_of(config: Mapping[str, Any] | None) -> str | None:
    thread = ((config or {}).get("configurable") or {}).get("thread_id")
    return None if thread is None else str(thread)


def _annotations(tool: BaseTool | None) -> dict[str, Any] | None:
    """MCP annotations as langchain-mcp-adapters leave them: in the tool's metadata, with
    the field names of the installed mcp's ``ToolAnnotations``."""
    meta = getattr(tool, "metadata", None) or {}
    hints = {k: meta[k] for k in _HINTS if meta.get(k) is not None}
    return hints or None
