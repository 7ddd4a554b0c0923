"""Claude's tool use (the Anthropic SDK's tool runner): ``govern_tools(gov, tools)``.

    tools = govern_tools(gov, [get_weather, book_flight])
    runner = client.beta.messages.tool_runner(model=..., messages=..., tools=tools)
    final = runner.until_done()  # raises the headway.Stop if headway stopped the run

Each governed tool is a ``BetaFunctionTool`` (or ``BetaAsyncFunctionTool``) whose ``call``
goes through headway. A run is one runner: each runner that calls the tools is a session of
its own (``session=`` names it instead, and each new runner on it is a new user input). A
stop is answered to Claude as an ``is_error`` result, closes the runner (no further request
is made) and is raised out of ``until_done()``; ``stop_of(runner)`` is that stop.

The runner calls ``tool.call(input)`` only, so there is no tool-use id to key a write by:
writes through the runner are unkeyed (executed each time, guarded by the UNKNOWN rule)
unless you call ``session.call`` yourself with a key. Corrections and errors reach Claude as
``is_error`` tool results (``ToolError``), results as they are.
"""

from __future__ import annotations

import inspect
import logging
import weakref
from collections.abc import Iterable
from typing import Any

from .._session import Governor, Session
from ..errors import Stop
from ..outcome import Outcome
from ._common import answer, caller_local, fresh, require, stop_text

require("anthropic", "anthropic")

from anthropic.lib.tools import BetaAsyncFunctionTool, BetaFunctionTool, ToolError  # noqa: E402
from anthropic.lib.tools._beta_runner import (  # noqa: E402
    BaseAsyncToolRunner,
    BaseSyncToolRunner,
)

__all__ = ["GovernedTools", "govern_tools", "stop_of"]

_log = logging.getLogger("headway")
_RUNNERS = (BaseSyncToolRunner, BaseAsyncToolRunner)


class _Run:
    """headway's state of one runner: its session id and its stop."""

    __slots__ = ("__weakref__", "session_id", "stop")

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.stop: Stop | None = None


# runner -> its run; a runner that is gone takes its run with it
_RUNS: weakref.WeakKeyDictionary[Any, _Run] = weakref.WeakKeyDictionary()


def stop_of(runner: Any) -> Stop | None:
    """The ``headway.Stop`` that ended ``runner``'s run, or None."""
    run = _RUNS.get(runner)
    return None if run is None else run.stop


class GovernedTools(list[Any]):
    """The governed tools of ``govern_tools``: give them to ``tool_runner(tools=...)``."""


def govern_tools(
    gov: Governor, tools: Iterable[Any], *, session: str | None = None
) -> GovernedTools:
    """Governed copies of the runner's function tools (``@beta_tool`` / ``@beta_async_tool``).
    Each runner that calls them is a run and a session of its own; ``session`` names one
    session for every runner instead (each new runner on it is a new user input)."""
    governed = GovernedTools(())
    for tool in tools:
        cls = _AsyncTool if inspect.iscoroutinefunction(tool.func) else _SyncTool
        governed.append(cls(gov, tool, session))
    return governed


class _Governed:
    def __init__(self, gov: Governor, tool: Any, session: str | None) -> None:
        # a governed tool is the original one (name, description, schema) with another call
        self.__dict__.update(tool.__dict__)
        self._governor, self._tool, self._session_id = gov, tool, session
        self._outside = fresh("anthropic") if session is None else session  # a call no runner made

    def _begin(self) -> tuple[Any, _Run | None, Session]:
        """The runner making this call (the SDK passes the tool nothing else), its run and
        its session: a runner seen for the first time starts a run."""
        runner = caller_local("self", _RUNNERS)
        if runner is None:
            return None, None, self._governor.session(self._outside)
        run = _RUNS.get(runner)
        if run is None:
            run = _RUNS[runner] = _Run(self._session_id or fresh("anthropic"))
            if self._session_id is not None:  # a new runner on a named session: a new input
                self._governor.session(run.session_id).user_turn()
        return runner, run, self._governor.session(run.session_id)

    def _answer(self, out: Outcome) -> Any:
        if out.ok:
            return answer(out)
        raise ToolError(out.to_model())  # an is_error tool result, with headway's text

    def _stopped(self, stop: Stop, runner: Any, run: _Run | None) -> None:
        """The run ends: the runner is closed (it makes no further request) and its
        ``until_done()`` raises the stop instead of returning Claude's last message."""
        if run is None:
            _log.warning("headway stopped session %s outside a tool runner", self._outside)
        elif run.stop is None:
            run.stop = stop
            if hasattr(runner, "_last_message"):  # until_done() returns what this gives
                runner._last_message = _raiser(stop, isinstance(runner, BaseAsyncToolRunner))


def _raiser(stop: Stop, asynchronous: bool) -> Any:
    def last() -> Any:
        raise stop

    async def alast() -> Any:
        raise stop

    return alast if asynchronous else last


class _SyncTool(_Governed, BetaFunctionTool[Any]):
    def call(self, tool_input: object) -> Any:
        runner, run, session = self._begin()
        try:
            out = session.call(self.name, _mapping(tool_input), run=lambda **a: self._tool.call(a))
        except Stop as stop:
            self._stopped(stop, runner, run)
            if runner is not None:
                runner.close()  # from inside a tool call: the runner ends at its next step
            raise ToolError(stop_text(stop.diagnostic)) from None
        return self._answer(out)


class _AsyncTool(_Governed, BetaAsyncFunctionTool[Any]):
    async def call(self, tool_input: object) -> Any:
        runner, run, session = self._begin()

        async def call(**a: Any) -> Any:
            return await self._tool.call(a)

        try:
            out = await session.acall(self.name, _mapping(tool_input), run=call)
        except Stop as stop:
            self._stopped(stop, runner, run)
            if runner is not None:
                await runner.close()
            raise ToolError(stop_text(stop.diagnostic)) from None
        return self._answer(out)


def _mapping(value: object) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {"input": value}
