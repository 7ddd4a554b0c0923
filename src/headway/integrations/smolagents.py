"""smolagents: ``GovernedTool(gov, tool)`` wraps a ``Tool``.

    agent = ToolCallingAgent(tools=[GovernedTool(gov, search)], model=model)

smolagents gives a tool no run or call id, so a governed tool finds the agent calling it:
each ``agent.run()`` (its task) is a session of its own, whatever tools and agents it
shares (``session=`` names one session for every run instead; each new run on it is a new
user input). Corrections and errors raise from ``forward``, so smolagents shows them to the
model as a tool error with headway's text. smolagents turns every tool exception into an
error the run survives, so a stop is answered to the model as such an error and raised out
of ``agent.run()`` at the end of that step by ``stop_run``, a step callback that headway
adds to the agent the first time the agent calls a governed tool.
"""

from __future__ import annotations

import weakref
from typing import Any

from .._session import Governor, Session
from ..errors import Stop
from ._common import answer, caller_local, fresh, require, stop_text

require("smolagents", "smolagents")

from smolagents import Tool  # noqa: E402
from smolagents.agents import MultiStepAgent  # noqa: E402
from smolagents.memory import ActionStep, TaskStep  # noqa: E402

__all__ = ["GovernedTool", "HeadwayAnswer", "stop_run"]


class HeadwayAnswer(Exception):  # noqa: N818 - what smolagents shows the model as the error
    """A correction, an error outcome or a stop, for smolagents to show the model."""


class _Run:
    """headway's state of one ``agent.run()``: its session id and its stop."""

    __slots__ = ("session_id", "stop")

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.stop: Stop | None = None


_RUN = "_headway_run"  # headway's run, kept on the run's own task step


def _task_of(agent: Any) -> Any:
    """The task step of the agent's current run: the latest one in its memory."""
    for step in reversed(agent.memory.steps):
        if isinstance(step, TaskStep):
            return step
    return None


class GovernedTool(Tool):  # type: ignore[misc]  # smolagents is untyped
    """A smolagents tool whose calls headway governs (the wrapped tool runs them)."""

    skip_forward_signature_validation = True

    def __init__(self, gov: Governor, tool: Any, *, session: str | None = None) -> None:
        self.name = tool.name
        self.description = tool.description
        self.inputs = tool.inputs
        self.output_type = tool.output_type
        super().__init__()
        self.governor, self.tool, self.session_id = gov, tool, session
        self._outside = fresh("smolagents") if session is None else session  # no agent

    def _run(self) -> tuple[_Run | None, Session]:
        """The run of the agent making this call (smolagents passes the tool nothing that
        names it) and its session; an agent's first run also gets the ``stop_run`` step."""
        agent = caller_local("self", MultiStepAgent)
        task = None if agent is None else _task_of(agent)
        if task is None:
            return None, self.governor.session(self._outside)
        _hook(agent)
        run: _Run | None = getattr(task, _RUN, None)
        if run is None:
            run = _Run(self.session_id or fresh("smolagents"))
            setattr(task, _RUN, run)
            if self.session_id is not None:  # a new run on a named session: a new input
                self.governor.session(run.session_id).user_turn()
        return run, self.governor.session(run.session_id)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if args:  # one positional input (a tool with a single argument)
            kwargs = {next(iter(self.inputs)): args[0], **kwargs}
        run, session = self._run()
        try:
            out = session.call(self.name, kwargs, run=self.tool)
        except Stop as stop:
            if run is not None and run.stop is None:
                run.stop = stop
            raise HeadwayAnswer(stop_text(stop.diagnostic)) from None
        if out.ok:
            return answer(out)
        raise HeadwayAnswer(out.to_model())


_hooked: weakref.WeakSet[Any] = weakref.WeakSet()


def _hook(agent: Any) -> None:
    if agent in _hooked:
        return
    _hooked.add(agent)
    registry = agent.step_callbacks
    if stop_run not in getattr(registry, "_callbacks", {}).get(ActionStep, []):
        registry.register(ActionStep, stop_run)


def stop_run(step: Any, agent: Any = None) -> None:
    """A step callback (headway adds it for you): raise the stop of the agent's current run
    out of ``agent.run()`` at the end of the step that was stopped."""
    task = None if agent is None else _task_of(agent)
    run = getattr(task, _RUN, None)
    if run is not None and run.stop is not None:
        raise run.stop
