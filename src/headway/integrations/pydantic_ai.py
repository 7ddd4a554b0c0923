"""headway in Pydantic AI: ``Agent(..., capabilities=[HeadwayCapability(gov)])``.

Every tool call goes through ``wrap_tool_execute``. One session per conversation
(``RunContext.conversation_id``: pass ``conversation_id=`` or continue a
``message_history``); each new run in it (a new ``run_id``) is a new user input
(``user_turn()``), and each model response is a model turn (``record_turn`` with its
tokens: turn and token budgets). A correction goes back as a ``ModelRetry`` prompt while
the tool has retries left, else as ``ToolFailed`` (the same text, no retry consumed), so a
correction never exhausts a tool's retries and crashes the run. A stop raises
``HeadwayStop``, an ``AgentRunError`` that is also a ``headway.Stop``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._recent import Recent
from .._session import Governor, Session
from ..errors import BudgetExceeded, LoopDetected, Stop
from ..outcome import Status
from ._common import declare, native, require, served, step_of, writes

require("pydantic_ai", "pydantic-ai")

from pydantic_ai import RunContext  # noqa: E402
from pydantic_ai.capabilities import AbstractCapability  # noqa: E402
from pydantic_ai.capabilities.abstract import WrapToolExecuteHandler  # noqa: E402
from pydantic_ai.exceptions import (  # noqa: E402
    AgentRunError,
    ApprovalRequired,
    CallDeferred,
    ModelRetry,
    ToolFailed,
    ToolFailedError,
    ToolRetryError,
)
from pydantic_ai.messages import ModelResponse, ToolCallPart  # noqa: E402
from pydantic_ai.models import ModelRequestContext  # noqa: E402
from pydantic_ai.tools import ToolDefinition  # noqa: E402

__all__ = ["BudgetStopped", "HeadwayCapability", "HeadwayStop", "LoopStopped"]


class HeadwayStop(Stop, AgentRunError):  # noqa: N818 - a verdict, like headway.Stop
    """headway stopped the run: raised out of ``agent.run``; ``diagnostic`` says why."""


class LoopStopped(HeadwayStop, LoopDetected):
    """The run made no progress for its no-progress limit."""


class BudgetStopped(HeadwayStop, BudgetExceeded):
    """The run exhausted one of its budgets."""


_ERROR = "Error: "
# How a Pydantic AI tool answers a failure: a retry prompt or a failed result for the model.
_TOOL_ERRORS = (ModelRetry, ToolFailed, ToolRetryError, ToolFailedError)
# How a tool defers its call (to an approval, to another process): control flow, kept.
_DEFERRALS = (ApprovalRequired, CallDeferred)


def _native(stop: Stop) -> HeadwayStop:
    return native(stop, BudgetStopped, LoopStopped)


@dataclass
class HeadwayCapability(AbstractCapability[Any]):
    """Governs every tool call of the agent it is given to.

    ``idempotency_key(ctx, args)`` may give a write an explicit key (from ``ctx.deps``,
    ``ctx.metadata`` or the arguments); None keeps the default, the conversation and the
    tool call id.
    """

    gov: Governor
    idempotency_key: Callable[[RunContext[Any], Mapping[str, Any]], str | None] | None = None
    _runs: Recent[tuple[str | None, Session]] = field(
        default_factory=Recent, init=False, repr=False
    )

    def _session(self, ctx: RunContext[Any]) -> Session:
        sid = ctx.conversation_id or ctx.run_id or "pydantic-ai"
        known = self._runs.get(sid)
        if known is not None and known[0] == ctx.run_id:
            return known[1]
        session = self.gov.session(sid)  # a new run of the conversation: a new user input
        session.user_turn()
        self._runs.put(sid, (ctx.run_id, session))
        return session

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        if self._session(ctx).stopped:  # stopped by an earlier run of the conversation:
            self._turn(ctx, 0)  # its stop is raised, no model is asked
        return request_context

    async def after_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        response: ModelResponse,
    ) -> ModelResponse:
        """Each model response is a model turn (turn and token budgets)."""
        self._turn(ctx, response.usage.total_tokens)
        return response

    def _turn(self, ctx: RunContext[Any], tokens: int) -> None:
        """``record_turn``: a stop (the session's, or a budget now used up) ends the run."""
        try:
            self._session(ctx).record_turn(tokens=tokens)
        except Stop as stop:
            raise _native(stop) from stop

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: dict[str, Any],
        handler: WrapToolExecuteHandler,
    ) -> Any:
        name = tool_def.name
        spec = self.gov.spec(name) or declare(
            self.gov, name, (tool_def.metadata or {}).get("annotations")
        )
        failures: list[Exception] = []
        deferred: list[Exception] = []

        async def run(**kwargs: Any) -> Any:
            try:
                return await handler(kwargs)
            except _TOOL_ERRORS as exc:  # the tool's own error message to the model
                failures.append(exc)
                return _ERROR + str(exc)
            except _DEFERRALS as exc:  # not a failure: the run ends with deferred calls
                deferred.append(exc)
                raise

        call_id = call.tool_call_id
        keys: dict[str, Any] = {"call_id": call_id, "step_id": step_of(call_id, spec, args)}
        if self.idempotency_key is not None and writes(spec):
            key = self.idempotency_key(ctx, args)
            if key is not None:
                keys = {"call_id": call_id, "idempotency_key": key}
        try:
            out = await self._session(ctx).acall(name, args, run=run, **keys)
        except Stop as stop:
            raise _native(stop) from stop
        if out.status is Status.EXECUTED and out.correction is None:
            return out.value
        if out.status is Status.ERROR and deferred:  # recorded as not done (a write's key
            raise deferred[-1]  # released); Pydantic AI defers the call
        text = out.to_model()
        if out.status is Status.ERROR and failures:  # the tool's retry prompt or failure, kept
            failure = failures[-1]
            if out.correction is None:
                raise failure
            text = text.removeprefix(_ERROR)
            if isinstance(failure, ToolFailed | ToolFailedError):
                raise ToolFailed(text)
        if out.status is Status.CORRECTED or failures:
            if ctx.retries.get(call.tool_name, 0) < ctx.max_retries:
                raise ModelRetry(text)
            raise ToolFailed(text)  # no retries left: a failed result, not a crash
        if out.status is Status.ERROR and (out.error or {}).get("code") != "error_result":
            raise ToolFailed(text)  # the tool raised (or could not run): a failed result
        return served(out) if out.ok else text  # a served dict stays a dict
