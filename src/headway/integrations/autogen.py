"""AutoGen (agentchat): ``GovernedTool(gov, tool)`` and ``GovernedWorkbench(gov, workbench)``.

Inside a team, the session is the team (its id) and each call's agent is the participant
that made it, so the team shares one read cache and one budget while each agent keeps its
own loop judgment. Outside a team, each ``agent.run()`` is a session of its own (the run's
cancellation token names it; ``session=`` names one session for every run instead).
Corrections and errors come back as error tool results (``is_error``), with headway's text.

A stop is answered as an error tool result, and the run asks the model nothing more: the
agent's next model call (its tool loop, ``max_tool_iterations``) raises the stop out of
``run()`` (in a team, AutoGen reports it as the team's error), and in a team the
governed tool's ``termination`` (an ``ExternalTermination``, shareable through
``termination=``; ``termination_condition=tool.termination | ...``) ends the team after
the agent's turn.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Mapping
from types import FrameType
from typing import Any

from .._session import Governor
from ..errors import Stop
from ..outcome import Outcome
from ._common import answer, fresh, require, step_of, stop_text

require("autogen_agentchat", "autogen")

from autogen_agentchat.conditions import ExternalTermination  # noqa: E402
from autogen_core import AgentId, CancellationToken, MessageHandlerContext  # noqa: E402
from autogen_core.tools import (  # noqa: E402
    BaseTool,
    TextResultContent,
    ToolResult,
    ToolSchema,
    Workbench,
)
from pydantic import BaseModel  # noqa: E402


class _Run:
    """headway's state of one run (one cancellation token): its session and its stop."""

    __slots__ = ("session_id", "stop")

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.stop: Stop | None = None


# a run's cancellation token -> its run: ``run()`` makes one token per run, and hands it
# to every tool call and model call of the run
_RUNS: weakref.WeakKeyDictionary[CancellationToken, _Run] = weakref.WeakKeyDictionary()


def _where(
    gov: Governor, session: str | None, token: CancellationToken | None
) -> tuple[_Run, str | None]:
    """The run of the running call, and its agent: the team and the participant inside a
    team; else the run its cancellation token names (a new run on a named session is a new
    user input)."""
    agent_id: AgentId | None
    name: str | None = None
    try:
        agent_id = MessageHandlerContext.agent_id()
    except (RuntimeError, LookupError):
        agent_id = None
    else:
        suffix = "_" + agent_id.key
        name = agent_id.type[: -len(suffix)] if agent_id.type.endswith(suffix) else agent_id.type
    run = _RUNS.get(token) if token is not None else None
    if run is None:
        named = session or (agent_id.key if agent_id is not None else None)
        run = _Run(named or fresh("autogen"))
        if token is not None:
            _RUNS[token] = run
        if session is not None and agent_id is None:
            gov.session(session).user_turn()
    return run, name


def _raise_if_stopped() -> None:
    """Before a model call of a stopped run: raise the stop, so the model is not asked
    again. AutoGen hands a workbench's ``list_tools`` nothing that names the run; the model
    call listing the tools (a caller holding a ``model_client``) holds the run's
    cancellation token. Never while the run's tool calls look up their tools: an exception
    there would hang the agent."""
    frame: FrameType | None = sys._getframe(1)
    for _ in range(12):
        frame = frame.f_back if frame is not None else None
        if frame is None:
            return
        local = frame.f_locals
        if "model_client" in local and isinstance(
            local.get("cancellation_token"), CancellationToken
        ):
            break
    else:
        return
    run = _RUNS.get(local["cancellation_token"])
    if run is not None and run.stop is not None:
        raise run.stop


class _Governs:
    """What a governed tool and a governed workbench share: the session and the stop."""

    def __init__(
        self, gov: Governor, session: str | None, termination: ExternalTermination | None
    ) -> None:
        self.governor = gov
        self.session_id = session
        self.termination = termination if termination is not None else ExternalTermination()

    async def _govern(
        self,
        name: str,
        args: Mapping[str, Any],
        call_id: str | None,
        token: CancellationToken | None,
        run: Any,
    ) -> Outcome | str:
        spec = self.governor.spec(name)  # an undeclared tool is declared by its first call
        where, agent = _where(self.governor, self.session_id, token)
        step = step_of(call_id, spec, args)
        try:
            return await self.governor.session(where.session_id).acall(
                name, dict(args), run=run, agent=agent, step_id=step, call_id=call_id
            )
        except Stop as stop:
            where.stop = where.stop or stop
            self.termination.set()
            return stop_text(stop.diagnostic)


class GovernedTool(_Governs, BaseTool[BaseModel, Any]):
    """An AutoGen tool whose calls headway governs (the wrapped tool runs them)."""

    def __init__(
        self,
        gov: Governor,
        tool: Any,
        *,
        session: str | None = None,
        termination: ExternalTermination | None = None,
    ) -> None:
        _Governs.__init__(self, gov, session, termination)
        BaseTool.__init__(self, tool.args_type(), tool.return_type(), tool.name, tool.description)
        self.tool = tool

    async def run(self, args: BaseModel, cancellation_token: CancellationToken) -> Any:
        return await self.tool.run(args, cancellation_token)

    async def run_json(
        self,
        args: Mapping[str, Any],
        cancellation_token: CancellationToken,
        call_id: str | None = None,
    ) -> Any:
        async def run(**a: Any) -> Any:
            return await self.tool.run_json(a, cancellation_token, call_id=call_id)

        out = await self._govern(self.name, args, call_id, cancellation_token, run)
        if isinstance(out, str) or not out.ok:
            # the workbench turns an exception into an error result with its text
            raise RuntimeError(out if isinstance(out, str) else out.to_model())
        return answer(out)

    def return_value_as_string(self, value: Any) -> str:
        return str(self.tool.return_value_as_string(value))

    @property
    def schema(self) -> ToolSchema:
        _raise_if_stopped()  # read for each model call of the agent
        return super().schema


class GovernedWorkbench(_Governs, Workbench):
    """A workbench (MCP workbenches included) whose tool calls headway governs."""

    def __init__(
        self,
        gov: Governor,
        workbench: Workbench,
        *,
        session: str | None = None,
        termination: ExternalTermination | None = None,
    ) -> None:
        _Governs.__init__(self, gov, session, termination)
        self.workbench = workbench

    async def list_tools(self) -> list[ToolSchema]:
        _raise_if_stopped()  # called before each model call of the agent
        return list(await self.workbench.list_tools())

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        cancellation_token: CancellationToken | None = None,
        call_id: str | None = None,
    ) -> ToolResult:
        async def run(**a: Any) -> Any:
            result = await self.workbench.call_tool(name, a, cancellation_token, call_id)
            text = result.to_text()
            return {"is_error": True, "content": text} if result.is_error else text

        out = await self._govern(name, arguments or {}, call_id, cancellation_token, run)
        if isinstance(out, str):
            return ToolResult(name=name, result=[TextResultContent(content=out)], is_error=True)
        text = answer(out) if out.ok and isinstance(out.value, str) else out.to_model()
        return ToolResult(name=name, result=[TextResultContent(content=text)], is_error=not out.ok)

    async def start(self) -> None:
        await self.workbench.start()

    async def stop(self) -> None:
        await self.workbench.stop()

    async def reset(self) -> None:
        await self.workbench.reset()

    async def save_state(self) -> Mapping[str, Any]:
        return await self.workbench.save_state()

    async def load_state(self, state: Mapping[str, Any]) -> None:
        await self.workbench.load_state(state)
