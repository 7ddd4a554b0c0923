"""LlamaIndex: ``GovernedTool(gov, tool)`` wraps a ``BaseTool`` / ``FunctionTool``.

Each call goes through headway. The session is the workflow run
(``workflows.plugins.basic.get_current_run_id()``: each ``agent.run()`` is a session of its
own; ``session=`` names one instead). Answers come back as ``ToolOutput``: results as the
tool gave them, corrections and errors with ``is_error=True`` (as LlamaIndex flags a failed
tool). A stop ends its run the way a ``return_direct`` tool does: the agent's final
response is the stop's sentence, and ``response.raw`` is the ``headway.Stop``. The next run
with the same tools runs normally.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .._recent import Recent
from .._session import Governor, Session
from ..errors import Stop
from ..outcome import Outcome, Status
from ._common import fresh, require, stop_text

require("llama_index.core", "llamaindex")

from llama_index.core.tools import AsyncBaseTool, ToolMetadata, ToolOutput  # noqa: E402
from llama_index.core.tools.types import adapt_to_async_tool  # noqa: E402


def _run_id() -> str | None:
    try:
        from workflows.plugins.basic import get_current_run_id
    except ImportError:  # pragma: no cover - older llama-index-core
        return None
    return get_current_run_id()


class GovernedTool(AsyncBaseTool):
    """A LlamaIndex tool whose calls headway governs (the wrapped tool runs them)."""

    def __init__(self, gov: Governor, tool: Any, *, session: str | None = None) -> None:
        self.governor = gov
        self.tool: AsyncBaseTool = adapt_to_async_tool(tool)
        self.session_id = session
        self._outside = fresh("llamaindex")  # calls made outside a workflow run
        self._stops: Recent[Stop] = Recent(1_000)  # run id -> the stop that ended it
        name = self.tool.metadata.get_name()
        self.name = name

    @property
    def metadata(self) -> ToolMetadata:
        meta = self.tool.metadata
        if not meta.return_direct and self._stops.get(_run_id() or self._outside):
            # read by the agent right after the call: a stop ends its run like a direct answer
            return dataclasses.replace(meta, return_direct=True)
        return meta

    def _session(self) -> Session:
        return self.governor.session(self.session_id or _run_id() or self._outside)

    def call(self, *args: Any, **kwargs: Any) -> ToolOutput:
        arguments = _arguments(args, kwargs)
        ran: list[ToolOutput] = []

        def run(**a: Any) -> Any:
            ran.append(self.tool.call(**a))
            return _value(ran[-1])

        try:
            out = self._session().call(self.name, arguments, run=run)
        except Stop as stop:
            return self._stopped(stop, arguments)
        return _output(self.name, arguments, out, ran)

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        arguments = _arguments(args, kwargs)
        ran: list[ToolOutput] = []

        async def run(**a: Any) -> Any:
            ran.append(await self.tool.acall(**a))
            return _value(ran[-1])

        try:
            out = await self._session().acall(self.name, arguments, run=run)
        except Stop as stop:
            return self._stopped(stop, arguments)
        return _output(self.name, arguments, out, ran)

    def _stopped(self, stop: Stop, arguments: dict[str, Any]) -> ToolOutput:
        self._stops.put(_run_id() or self._outside, stop)
        return ToolOutput(
            tool_name=self.name,
            content=stop_text(stop.diagnostic),
            raw_input=arguments,
            raw_output=stop,
        )


def _arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    if args:  # a tool called with one positional input (LlamaIndex's older convention)
        return {"input": args[0], **kwargs}
    return dict(kwargs)


def _value(output: ToolOutput) -> Any:
    """What headway keeps of a tool's output: its text (what the agent reads), or the output
    itself when it is an error (so the error predicate sees ``is_error``)."""
    return output if output.is_error else output.content


def _output(
    name: str, arguments: dict[str, Any], out: Outcome, ran: list[ToolOutput]
) -> ToolOutput:
    if out.status is Status.EXECUTED and ran:
        return ran[-1]  # the tool's own output, untouched
    text = out.to_model()
    return ToolOutput(
        tool_name=name,
        content=text,
        raw_input=arguments,
        raw_output=out.value if out.ok else text,
        is_error=not out.ok,
    )
