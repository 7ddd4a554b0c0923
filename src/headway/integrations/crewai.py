"""CrewAI: ``governed_tool(gov, tool)`` wraps a ``BaseTool``.

A crew's kickoff is one headway session (the crew's id), and the agent of each call is the
executing agent's role, so the crew shares one read cache and one budget while each role
keeps its own loop judgment. CrewAI's own untimed tool cache is turned off for the tool
(headway's cache knows what may be served). Corrections and errors come back as CrewAI
``ToolFailure``s (the agent reads headway's text; the task output records the failure). A
stop ends the run CrewAI's way: the tool's failure policy becomes ``raise`` for that answer,
so ``kickoff()`` raises ``ToolExecutionFailedError`` whose ``record.failure.details["headway"]``
is the stop's diagnostic; the ``headway.Stop`` itself is ``tool.headway_stop``.

The crew and the role come from a global before-tool-call hook that headway registers once.
"""

from __future__ import annotations

import contextvars
import threading
from typing import Any

from .._session import Governor
from ..errors import Stop
from ._common import require

require("crewai", "crewai")

from crewai.hooks import register_before_tool_call_hook  # noqa: E402
from crewai.tools import BaseTool  # noqa: E402
from crewai.tools.tool_failure import ToolFailure, ToolFailurePolicy  # noqa: E402

_where: contextvars.ContextVar[tuple[str, str | None]] = contextvars.ContextVar(
    "headway_crewai_call", default=("crewai", None)
)
_hooked = threading.Lock()
_hook_on: list[bool] = []


def _note_call(context: Any) -> None:
    """Before each tool call: remember the crew and the role making it (same thread)."""
    crew = getattr(context, "crew", None)
    agent = getattr(context, "agent", None)
    session = f"crew-{crew.id}" if crew is not None else "crewai"
    _where.set((session, getattr(agent, "role", None)))


def _install_hook() -> None:
    with _hooked:
        if not _hook_on:
            register_before_tool_call_hook(_note_call)
            _hook_on.append(True)


def governed_tool(gov: Governor, tool: BaseTool, *, session: str | None = None) -> GovernedTool:
    """A copy of ``tool`` whose calls headway governs (``session`` overrides the crew's id)."""
    _install_hook()
    return GovernedTool(
        name=tool.name,
        description=tool.description,
        args_schema=tool.args_schema,
        inner=tool,
        governor=gov,
        session_id=session,
        cache_function=_never_cache,  # headway decides what is served
    )


def _never_cache(_args: Any, _result: Any) -> bool:
    return False


class GovernedTool(BaseTool):
    """A CrewAI tool whose calls headway governs (the wrapped tool runs them)."""

    inner: Any
    governor: Any
    session_id: str | None = None
    headway_stop: Any = None

    def _run(self, **kwargs: Any) -> Any:
        session_id, role = _where.get()
        session = self.governor.session(self.session_id or session_id)
        try:
            out = session.call(self.name, kwargs, run=self.inner.run, agent=role)
        except Stop as stop:
            self.headway_stop = self.headway_stop or stop
            self.tool_failure_policy = ToolFailurePolicy.RAISE  # this answer ends the run
            return ToolFailure(
                message=f"headway stopped this run: {stop}",
                code="headway_stop",
                details={"headway": stop.diagnostic},
            )
        if out.ok:
            return out.value
        return ToolFailure(
            message=out.to_model(),
            code=(out.error or {}).get("code", out.status.value),
            retryable=bool((out.error or {}).get("retryable")),
        )
