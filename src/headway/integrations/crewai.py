"""CrewAI: ``governed_tool(gov, tool)`` wraps a ``BaseTool``.

A crew's kickoff is one headway session (``session_of(crew)``), and the agent of each call is the
executing agent's role, so the crew shares one read cache and one budget while each role
keeps its own loop judgment. CrewAI's own untimed tool cache is turned off for the tool
(headway's cache knows what may be served), and so is CrewAI's own repeat guard (it ends a
run after 5 identical results, which would end a declared poll that is waiting): loop
control of a governed tool is headway's. Corrections and errors come back as CrewAI
``ToolFailure``s (the agent reads headway's text; the task output records the failure). A
stop ends the run CrewAI's way: that one answer is under the ``raise`` failure policy, so
``kickoff()`` raises ``ToolExecutionFailedError`` whose ``record.failure.details["headway"]``
is the stop's diagnostic; the next crew using the tool runs under its own policy again.

The crew and the role come from a global before-tool-call hook that headway registers once.
"""

from __future__ import annotations

import contextvars
import threading
from typing import Any

from .._session import Governor
from ..errors import Stop
from ._common import answer, require, stop_text

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
    """Before each tool call: remember the crew and the role making it (same thread), give
    back the policy of a tool whose last answer was a stop, and leave the loop control of a
    governed tool's call to headway (CrewAI's repeat guard does not count it)."""
    crew = getattr(context, "crew", None)
    agent = getattr(context, "agent", None)
    session = session_of(crew) if crew is not None else "crewai"
    _where.set((session, getattr(agent, "role", None)))
    while _stopped:
        stopped = _stopped.pop()
        stopped.tool_failure_policy = stopped.policy
    tool = getattr(context, "tool", None)
    governed = isinstance(tool, GovernedTool) or isinstance(
        getattr(tool, "_original_tool", None), GovernedTool
    )
    executor = getattr(agent, "agent_executor", None)
    counts = getattr(executor, "_tool_call_counts", None)
    if isinstance(counts, dict):
        if not isinstance(counts, _Tally):
            counts = _Tally(counts)
            executor._tool_call_counts = counts  # type: ignore[union-attr]
        counts.governed = governed


def session_of(crew: Any) -> str:
    """The headway session of a crew's current (or last) kickoff: each kickoff is one run,
    and a kickoff resumed from a checkpoint is the same run."""
    kickoff = getattr(crew, "_kickoff_event_id", None)
    return f"crew-{crew.id}" + (f"-{kickoff}" if kickoff else "")


class _Tally(dict[Any, int]):
    """CrewAI's count of identical tool results (its repeat guard), with the calls of
    governed tools left out: their repeats are headway's to judge."""

    governed = False

    def __setitem__(self, key: Any, value: int) -> None:
        super().__setitem__(key, 0 if self.governed else value)


_stopped: list[GovernedTool] = []  # tools whose last answer was a stop


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
        tool_failure_policy=tool.tool_failure_policy,
        policy=tool.tool_failure_policy,
    )


def _never_cache(_args: Any, _result: Any) -> bool:
    return False


class GovernedTool(BaseTool):
    """A CrewAI tool whose calls headway governs (the wrapped tool runs them)."""

    inner: Any
    governor: Any
    session_id: str | None = None
    policy: Any = None  # the failure policy of the tool, for every answer but a stop

    def to_structured_tool(self) -> Any:
        # the copy CrewAI calls defers to this tool's policy (it is read per answer: ``raise``
        # for a stop, the tool's own otherwise), never a copy taken after a stop
        structured = super().to_structured_tool()
        structured.tool_failure_policy = None
        return structured

    def _run(self, **kwargs: Any) -> Any:
        session_id, role = _where.get()
        session = self.governor.session(self.session_id or session_id)
        try:
            out = session.call(self.name, kwargs, run=self.inner.run, agent=role)
        except Stop as stop:
            # this answer ends the run; the next tool call gives the policy back
            self.tool_failure_policy = ToolFailurePolicy.RAISE
            _stopped.append(self)
            return ToolFailure(
                message=stop_text(stop.diagnostic),
                code="headway_stop",
                details={"headway": stop.diagnostic},
            )
        if out.ok:
            return answer(out)
        return ToolFailure(
            message=out.to_model(),
            code=(out.error or {}).get("code", out.status.value),
            retryable=bool((out.error or {}).get("retryable")),
        )
