"""headway in the OpenAI Agents SDK: governed ``FunctionTool``s and MCP servers.

``govern_tools(gov, tools)`` wraps each tool's ``on_invoke_tool``; ``GovernedMCPServer``
wraps an MCP server's ``call_tool``. One session per run: ``run_id`` on the context passed
to ``Runner.run(context=...)`` (an attribute or a mapping key) names it, and every new
``Runner.run`` on it is a new user input (``user_turn()``); without one, each
``Runner.run`` is a session of its own. The model requests the run's usage counted are
reported as model turns (with their tokens) at its next tool call. A stop ends the run by
raising ``HeadwayStop``, an ``AgentsException`` (the SDK lets it through unchanged) that is
also a ``headway.Stop``.
"""

from __future__ import annotations

import contextvars
import copy
import inspect
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._session import Governor, Session
from ..errors import BudgetExceeded, LoopDetected, Stop
from ..outcome import Outcome, Status
from ._common import declare, native, require, served, step_of, writes

require("agents", "openai-agents")

from agents import FunctionTool, Tool  # noqa: E402
from agents.exceptions import AgentsException  # noqa: E402
from agents.mcp import MCPServer  # noqa: E402
from agents.tool import (  # noqa: E402
    default_tool_error_function,
    set_function_tool_failure_error_function,
)
from agents.tool_context import ToolContext  # noqa: E402
from mcp.types import CallToolResult, TextContent  # noqa: E402

__all__ = ["BudgetStopped", "GovernedMCPServer", "HeadwayStop", "LoopStopped", "govern_tools"]


class HeadwayStop(Stop, AgentsException):
    """headway stopped the run: raised out of ``Runner.run``; ``diagnostic`` says why."""


class LoopStopped(HeadwayStop, LoopDetected):
    """The run made no progress for its no-progress limit."""


class BudgetStopped(HeadwayStop, BudgetExceeded):
    """The run exhausted one of its budgets."""


def _native(stop: Stop) -> HeadwayStop:
    return native(stop, BudgetStopped, LoopStopped)


# An explicit idempotency key for a write: ``idempotency_key(ctx, args)``, or None for the
# default (the run's session and the tool call id).
KeyOf = Callable[[ToolContext[Any], Mapping[str, Any]], str | None]


class _Run:
    """headway's state of one ``Runner.run``, kept on its Usage object (one per run, shared
    by its tool calls): the session, and the model requests and tokens already reported."""

    __slots__ = ("requests", "session", "tokens")

    def __init__(self, session: Session) -> None:
        self.session = session
        self.requests = 0
        self.tokens = 0


# Outcomes an MCP client reads as a failed call (``isError``), as ``headway proxy`` answers
# them: the call did not run, or nobody knows whether it did.
_NOT_DONE = (Status.CORRECTED, Status.UNKNOWN, Status.ERROR)

_RUN = "_headway_run"
# The SDK marks a tool context whose result its default formatter made from an exception.
_SDK_FAILURE = "_function_tool_default_failure_handled"


def _session(gov: Governor, ctx: ToolContext[Any]) -> Session:
    """The session of the run this tool call belongs to (see the module docstring), told
    of the model turns the run made since its last tool call."""
    usage = ctx.usage
    run: _Run | None = getattr(usage, _RUN, None)
    if run is None:
        context = ctx.context
        run_id = (
            context.get("run_id")
            if isinstance(context, Mapping)
            else getattr(context, "run_id", None)
        )
        run = _Run(gov.session(str(run_id) if run_id is not None else f"run-{uuid.uuid4().hex}"))
        if run_id is not None:
            run.session.user_turn()  # a new Runner.run on a named session: a new user input
        setattr(usage, _RUN, run)
    while run.requests < usage.requests:  # turn and token budgets (raises once stopped)
        tokens, run.tokens = usage.total_tokens - run.tokens, usage.total_tokens
        run.requests += 1
        run.session.record_turn(tokens=tokens)
    return run.session


def _arguments(raw: str) -> dict[str, Any] | None:
    try:
        args = json.loads(raw) if raw else {}
    except ValueError:
        return None
    return args if isinstance(args, dict) else None


async def _govern_call(
    gov: Governor,
    name: str,
    ctx: ToolContext[Any],
    args: Mapping[str, Any],
    run: Any,
    key_of: KeyOf | None,
) -> Outcome:
    try:
        session = _session(gov, ctx)
        call_id = ctx.tool_call_id
        spec = gov.spec(name)
        key = key_of(ctx, args) if key_of is not None and writes(spec) else None
        if key is not None:
            return await session.acall(name, args, run=run, idempotency_key=key, call_id=call_id)
        step = step_of(call_id, spec, args)
        return await session.acall(name, args, run=run, step_id=step, call_id=call_id)
    except Stop as stop:
        raise _native(stop) from stop


def _govern(gov: Governor, tool: FunctionTool, key_of: KeyOf | None) -> FunctionTool:
    annotations = tool.mcp_annotations
    declare(gov, tool.name, annotations.model_dump(exclude_none=True) if annotations else None)
    # With the SDK's default error formatter (no failure_error_function, no run-level
    # tool_error_formatter of the user's), a tool's exception reaches headway: it is
    # classified and retried, and the model reads headway's text (retryable or not, what to
    # do), not the SDK's generic "try again".
    default = bool(getattr(tool, "_use_default_failure_error_function", False))
    own = tool.on_invoke_tool
    raw_errors = copy.copy(tool)  # the copy's invoker answers to the copy's error policy
    set_function_tool_failure_error_function(raw_errors, None)

    async def on_invoke_tool(ctx: ToolContext[Any], raw: str) -> Any:
        args = _arguments(raw)
        if args is None:  # malformed arguments: the SDK reports them its own way
            return await own(ctx, raw)
        config = getattr(ctx, "run_config", None)
        classified = default and getattr(config, "tool_error_formatter", None) is None
        invoke = raw_errors.on_invoke_tool if classified else own
        raised: list[Exception] = []

        async def run(**_: Any) -> Any:
            setattr(ctx, _SDK_FAILURE, False)  # this attempt's own mark, not an earlier one's
            try:
                result = await invoke(ctx, raw)
            except Exception as exc:  # no failure_error_function turned it into text
                raised.append(exc)
                raise
            if getattr(ctx, _SDK_FAILURE, False) and isinstance(result, str):
                return f"Error: {result}"  # an exception the SDK turned into text: an ERROR
            return result

        out = await _govern_call(gov, tool.name, ctx, args, run, key_of)
        if out.status is Status.EXECUTED and out.correction is None:
            return out.value  # the tool's own output, structured outputs included
        if out.status is Status.ERROR and raised and not classified:
            raise raised[-1]  # failure_error_function=None: the SDK raises it, as unwrapped
        if out.ok:
            return served(out)  # a served answer keeps its type; text gets headway's note
        return out.to_model()

    governed = copy.copy(tool)
    governed.on_invoke_tool = on_invoke_tool
    return governed


def govern_tools(
    gov: Governor, tools: Sequence[FunctionTool], *, idempotency_key: KeyOf | None = None
) -> list[Tool]:
    """Governed copies of ``tools`` for ``Agent(tools=...)``. A tool's spec is the one
    registered under its name, else its MCP annotations, else an unkeyed write.

    ``idempotency_key(ctx, args)`` may give a write an explicit key (from ``ctx.context``,
    the run's context, or the arguments); None keeps the default, the run and call id."""
    bad = [t for t in tools if not isinstance(t, FunctionTool)]
    if bad:
        raise TypeError(
            f"govern_tools takes FunctionTools (@function_tool); got {type(bad[0]).__name__}: "
            "hosted tools run on OpenAI's side and cannot be governed here"
        )
    return [_govern(gov, t, idempotency_key) for t in tools]


_CALL: contextvars.ContextVar[ToolContext[Any] | None] = contextvars.ContextVar(
    "headway_mcp_call", default=None
)


class GovernedMCPServer(MCPServer):
    """An MCP server whose ``call_tool`` goes through headway; pass it to
    ``Agent(mcp_servers=[...])`` in place of the server it wraps."""

    def __init__(
        self, server: MCPServer, gov: Governor, *, idempotency_key: KeyOf | None = None
    ) -> None:
        super().__init__(
            use_structured_content=server.use_structured_content,
            failure_error_function=self._failure,
            tool_meta_resolver=self._resolve_meta,
            custom_data_extractor=server.custom_data_extractor,
            tool_input_guardrails=server.tool_input_guardrails,
            tool_output_guardrails=server.tool_output_guardrails,
        )
        self._needs_approval_policy = server._needs_approval_policy
        self.server = server
        self.gov = gov
        self.key_of = idempotency_key
        self._inner_failure = server._get_failure_error_function(default_tool_error_function)

    @property
    def name(self) -> str:
        return self.server.name

    async def connect(self) -> None:
        await self.server.connect()  # type: ignore[no-untyped-call]

    async def cleanup(self) -> None:
        await self.server.cleanup()  # type: ignore[no-untyped-call]

    async def list_tools(self, run_context: Any = None, agent: Any = None) -> Any:
        tools = await self.server.list_tools(run_context, agent)
        for tool in tools:
            ann = tool.annotations
            declare(self.gov, tool.name, ann.model_dump(exclude_none=True) if ann else None)
        return tools

    async def list_prompts(self) -> Any:
        return await self.server.list_prompts()

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        return await self.server.get_prompt(name, arguments)

    @property
    def cached_tools(self) -> Any:
        return self.server.cached_tools

    async def _resolve_meta(self, meta_context: Any) -> dict[str, Any] | None:
        # The SDK calls this in the tool call's task just before call_tool, which runs in a
        # task created from it: the context variable carries the call's context across.
        _CALL.set(meta_context.run_context)
        resolver = self.server.tool_meta_resolver
        meta = resolver(meta_context) if resolver is not None else None
        return await meta if inspect.isawaitable(meta) else meta

    def _failure(self, ctx: Any, error: Exception) -> Any:
        cause: BaseException | None = error
        while cause is not None:  # the SDK wraps what call_tool raises; a stop ends the run
            if isinstance(cause, HeadwayStop):
                raise cause
            cause = cause.__cause__
        if self._inner_failure is None:
            raise error
        return self._inner_failure(ctx, error)

    async def call_tool(
        self, tool_name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None = None
    ) -> CallToolResult:
        ctx = _CALL.get()
        if ctx is None or not isinstance(ctx, ToolContext):  # called outside an agent run
            return await self.server.call_tool(tool_name, arguments, meta)

        raised: list[Exception] = []

        async def run(**args: Any) -> Any:
            try:
                result = await self.server.call_tool(tool_name, args, meta)
            except Exception as exc:
                raised.append(exc)
                raise
            return result.model_dump(mode="json", by_alias=True, exclude_none=True)

        declare(self.gov, tool_name)
        out = await _govern_call(self.gov, tool_name, ctx, arguments or {}, run, self.key_of)
        if out.status is Status.EXECUTED and out.correction is None:
            return CallToolResult.model_validate(out.value)
        if out.ok and isinstance(out.value, dict):  # the stored result, still a tool result,
            stored = CallToolResult.model_validate(out.value)  # with headway's note after it
            note = str(served(out._replace(value=""))).lstrip("\n")
            content = [*stored.content, TextContent(type="text", text=note)]
            return stored.model_copy(update={"content": content})
        if out.status is Status.ERROR and raised and self._inner_failure is None:
            raise raised[-1]  # failure_error_function=None: the SDK raises it, as unwrapped
        text = TextContent(type="text", text=out.to_model())
        return CallToolResult.model_validate(
            {"content": [text], "isError": out.status in _NOT_DONE}
        )
