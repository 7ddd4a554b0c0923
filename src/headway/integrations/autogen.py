"""AutoGen (agentchat): ``GovernedTool(gov, tool)`` and ``GovernedWorkbench(gov, workbench)``.

Inside a team, the session is the team (its id) and each call's agent is the participant
that made it, so the team shares one read cache and one budget while each agent keeps its
own loop judgment. Outside a team, the session is ``session=`` (default ``"autogen"``).
Corrections and errors come back as error tool results (``is_error``), with headway's text.

A stop cannot be raised through AutoGen (an exception in a workbench never lets ``run()``
return), so it ends the run AutoGen's way: each governed tool or workbench has a
``termination`` (an ``ExternalTermination``, shareable through ``termination=``) that a
stop sets; give it to the team (``termination_condition=tool.termination | ...``). The
stop itself is ``tool.headway_stop``, a ``headway.Stop``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._session import Governor
from ..errors import Stop
from ..outcome import Outcome
from ._common import require, step_of

require("autogen_agentchat", "autogen")

from autogen_agentchat.conditions import ExternalTermination  # noqa: E402
from autogen_core import CancellationToken, MessageHandlerContext  # noqa: E402
from autogen_core.tools import (  # noqa: E402
    BaseTool,
    TextResultContent,
    ToolResult,
    ToolSchema,
    Workbench,
)
from pydantic import BaseModel  # noqa: E402


def _where(session: str | None) -> tuple[str, str | None]:
    """(session, agent) of the running call: the team and the participant, inside a team."""
    try:
        agent_id = MessageHandlerContext.agent_id()
    except (RuntimeError, LookupError):
        return session or "autogen", None
    suffix = "_" + agent_id.key
    name = agent_id.type[: -len(suffix)] if agent_id.type.endswith(suffix) else agent_id.type
    return session or agent_id.key, name


class _Governs:
    """What a governed tool and a governed workbench share: the session and the stop."""

    def __init__(
        self, gov: Governor, session: str | None, termination: ExternalTermination | None
    ) -> None:
        self.governor = gov
        self.session_id = session
        self.termination = termination if termination is not None else ExternalTermination()
        self.headway_stop: Stop | None = None  # ``stop`` is a Workbench method

    async def _govern(
        self, name: str, args: Mapping[str, Any], call_id: str | None, run: Any
    ) -> Outcome | str:
        spec = self.governor.spec(name)  # an undeclared tool is declared by its first call
        session_id, agent = _where(self.session_id)
        step = step_of(call_id, spec, args)
        try:
            return await self.governor.session(session_id).acall(
                name, dict(args), run=run, agent=agent, step_id=step, call_id=call_id
            )
        except Stop as stop:
            self.headway_stop = self.headway_stop or stop
            self.termination.set()
            return f"headway stopped this run: {stop}"


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

        out = await self._govern(self.name, args, call_id, run)
        if isinstance(out, str) or not out.ok:
            # the workbench turns an exception into an error result with its text
            raise RuntimeError(out if isinstance(out, str) else out.to_model())
        return out.value

    def return_value_as_string(self, value: Any) -> str:
        return str(self.tool.return_value_as_string(value))


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

        out = await self._govern(name, arguments or {}, call_id, run)
        if isinstance(out, str):
            return ToolResult(name=name, result=[TextResultContent(content=out)], is_error=True)
        text = out.value if out.ok and isinstance(out.value, str) else out.to_model()
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
