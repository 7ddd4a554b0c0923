"""Claude's tool use (the Anthropic SDK's tool runner): ``govern_tools(gov, tools)``.

    tools = govern_tools(gov, [get_weather, book_flight], session="run-7")
    runner = client.beta.messages.tool_runner(model=..., messages=..., tools=tools)
    tools.runner = runner  # optional: a stop then closes the run at its next step
    final = runner.until_done()
    tools.raise_if_stopped()  # the headway.Stop, if headway stopped the run

Each governed tool is a ``BetaFunctionTool`` (or ``BetaAsyncFunctionTool``) whose ``call``
goes through headway; the runner calls ``tool.call(input)`` only, so there is no tool-use
id to key a write by: writes through the runner are unkeyed (executed each time, guarded by
the UNKNOWN rule) unless you call ``session.call`` yourself with a key. Corrections and errors reach Claude as ``is_error`` tool results
(``ToolError``), results as they are.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

from .._session import Governor
from ..errors import Stop
from ..outcome import Outcome
from ._common import require

require("anthropic", "anthropic")

from anthropic.lib.tools import BetaAsyncFunctionTool, BetaFunctionTool, ToolError  # noqa: E402


class GovernedTools(list[Any]):
    """The governed tools, plus the run's stop (``stop``) and the runner a stop closes."""

    def __init__(self, tools: Iterable[Any]) -> None:
        super().__init__(tools)
        self.stop: Stop | None = None
        self.runner: Any = None

    def stopped(self, stop: Stop) -> None:
        self.stop = self.stop or stop
        if self.runner is not None:
            self.runner.close()  # from inside a tool call: the runner ends at its next step

    def raise_if_stopped(self) -> None:
        if self.stop is not None:
            raise self.stop


def govern_tools(
    gov: Governor, tools: Iterable[Any], *, session: str = "anthropic"
) -> GovernedTools:
    """Governed copies of the runner's function tools (``@beta_tool`` / ``@beta_async_tool``),
    all in the headway session ``session`` (one per run: give each run its own id)."""
    governed = GovernedTools(())
    for tool in tools:
        cls = _AsyncTool if inspect.iscoroutinefunction(tool.func) else _SyncTool
        governed.append(cls(gov, tool, session, governed))
    return governed


class _Governed:
    def __init__(self, gov: Governor, tool: Any, session: str, group: GovernedTools) -> None:
        # a governed tool is the original one (name, description, schema) with another call
        self.__dict__.update(tool.__dict__)
        self._governor, self._tool, self._session_id, self._group = gov, tool, session, group

    def _answer(self, out: Outcome) -> Any:
        if out.ok:
            return out.value
        raise ToolError(out.to_model())  # an is_error tool result, with headway's text

    def _stopped(self, stop: Stop) -> Any:
        self._group.stopped(stop)
        raise ToolError(f"headway stopped this run: {stop}")


class _SyncTool(_Governed, BetaFunctionTool[Any]):
    def call(self, tool_input: object) -> Any:
        session = self._governor.session(self._session_id)
        try:
            out = session.call(self.name, _mapping(tool_input), run=lambda **a: self._tool.call(a))
        except Stop as stop:
            return self._stopped(stop)
        return self._answer(out)


class _AsyncTool(_Governed, BetaAsyncFunctionTool[Any]):
    async def call(self, tool_input: object) -> Any:
        session = self._governor.session(self._session_id)

        async def run(**a: Any) -> Any:
            return await self._tool.call(a)

        try:
            out = await session.acall(self.name, _mapping(tool_input), run=run)
        except Stop as stop:
            return self._stopped(stop)
        return self._answer(out)


def _mapping(value: object) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {"input": value}
