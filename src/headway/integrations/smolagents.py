"""smolagents: ``GovernedTool(gov, tool)`` wraps a ``Tool``; ``stop_run`` ends a stopped run.

    agent = ToolCallingAgent(
        tools=[GovernedTool(gov, search, session="run-7")], model=model, step_callbacks=[stop_run]
    )

smolagents gives a tool no run or call id: the session is ``session=`` (one per run; the
default ``"smolagents"`` is shared by every run that uses the tool). Corrections and errors
raise from ``forward``, so smolagents shows them to the model as a tool error with
headway's text. smolagents turns every tool exception into an error the run survives, so a
stop cannot be raised from the tool: the tool keeps it (``tool.stop``) and answers with it,
and the ``stop_run`` step callback raises it out of ``agent.run()`` at the end of the step.
"""

from __future__ import annotations

from typing import Any

from .._session import Governor
from ..errors import Stop
from ._common import require

require("smolagents", "smolagents")

from smolagents import Tool  # noqa: E402


class HeadwayAnswer(Exception):  # noqa: N818 - what smolagents shows the model as the error
    """A correction or an error outcome, for smolagents to show the model."""


class GovernedTool(Tool):  # type: ignore[misc]  # smolagents is untyped
    """A smolagents tool whose calls headway governs (the wrapped tool runs them)."""

    skip_forward_signature_validation = True

    def __init__(self, gov: Governor, tool: Any, *, session: str = "smolagents") -> None:
        self.name = tool.name
        self.description = tool.description
        self.inputs = tool.inputs
        self.output_type = tool.output_type
        super().__init__()
        self.governor, self.tool, self.session_id = gov, tool, session
        self.stop: Stop | None = None

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if args:  # one positional input (a tool with a single argument)
            kwargs = {next(iter(self.inputs)): args[0], **kwargs}
        try:
            out = self.governor.session(self.session_id).call(self.name, kwargs, run=self.tool)
        except Stop as stop:
            self.stop = self.stop or stop
            raise HeadwayAnswer(f"headway stopped this run: {stop}") from None
        if out.ok:
            return out.value
        raise HeadwayAnswer(out.to_model())


def stop_run(step: Any, agent: Any = None) -> None:
    """A step callback: raise the stop of any governed tool of ``agent`` out of its run."""
    tools = getattr(agent, "tools", None) or {}
    for tool in tools.values():
        if isinstance(tool, GovernedTool) and tool.stop is not None:
            raise tool.stop
