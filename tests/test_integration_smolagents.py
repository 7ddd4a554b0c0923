"""smolagents: a real ToolCallingAgent loop with a scripted Model, through GovernedTool."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest

import headway

if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
    pytest.importorskip("smolagents", reason="smolagents is not installed")

from smolagents import Tool, ToolCallingAgent
from smolagents.memory import ActionStep
from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, Model

from headway.integrations.smolagents import GovernedTool, stop_run


class Scripted(Model):  # type: ignore[misc]
    """Makes the given tool calls, one per step, then gives the final answer."""

    def __init__(self, calls: Sequence[tuple[str, dict[str, Any]]]) -> None:
        super().__init__(model_id="scripted")
        self.calls = [*calls, ("final_answer", {"answer": "done"})]
        self.turn = itertools.count()

    def generate(self, messages: Any, **kwargs: Any) -> ChatMessage:
        n = next(self.turn)
        name, args = self.calls[min(n, len(self.calls) - 1)]
        call = ChatMessageToolCall(
            id=f"call-{n}",
            type="function",
            function=ChatMessageToolCallFunction(arguments=json.dumps(args), name=name),
        )
        return ChatMessage(role="assistant", content="", tool_calls=[call])


def _tool(name: str, fn: Any) -> Tool:
    class _T(Tool):  # type: ignore[misc]
        inputs: ClassVar[dict[str, Any]] = {"q": {"type": "string", "description": "the query"}}
        output_type = "string"

        def forward(self, q: str) -> str:
            return str(fn(q))

    _T.name, _T.description = name, name
    return _T()


def _run(
    gov: headway.Governor, tool: Tool, calls: list[Any], session: str
) -> tuple[GovernedTool, list[Any]]:
    governed = GovernedTool(gov, tool, session=session)
    agent = ToolCallingAgent(
        tools=[governed],
        model=Scripted(calls),
        step_callbacks=[stop_run],
        max_steps=60,
        verbosity_level=0,
    )
    agent.run("go")
    steps = [s for s in agent.memory.steps if isinstance(s, ActionStep)]
    return governed, steps


def test_a_deterministic_read_asked_three_times_runs_once_then_is_corrected() -> None:
    gov = headway.Governor()
    runs: list[str] = []
    gov.register("company", None, effect="read", deterministic=True)

    def company(q: str) -> str:
        runs.append(q)
        return f"{q}: Apple Inc."

    _, steps = _run(
        gov,
        _tool("company", company),
        [("company", {"q": "AAPL"})] * 3,
        "a",
    )
    assert runs == ["AAPL"]
    errors = [s.error for s in steps[:3]]
    assert errors[0] is None and errors[1] is None and errors[2] is not None
    assert "stored result" in str(steps[1].observations)  # the note of a served answer
    assert "identical" in str(errors[2])


def test_a_changing_poll_is_never_corrected_or_stopped() -> None:
    gov = headway.Governor()
    polls = itertools.count(1)
    gov.register("status", None, effect="read", poll=True)

    def status(q: str) -> str:
        n = next(polls)
        return f"{q}: {'DONE' if n >= 10 else f'RUNNING {n * 10}%'}"

    _, steps = _run(gov, _tool("status", status), [("status", {"q": "j"})] * 10, "b")
    assert [s.error for s in steps[:10]] == [None] * 10


def test_a_loop_without_progress_is_stopped_and_raised_out_of_the_run() -> None:
    gov = headway.Governor()
    gov.register("search", None, effect="read")
    tool = _tool("search", lambda q: "no results for that query, try something else entirely")
    calls = [("search", {"q": f"v{n % 2}"}) for n in range(40)]
    with pytest.raises(headway.LoopDetected) as stop:
        _run(gov, tool, calls, "c")
    assert stop.value.diagnostic["terminated_by"] == "no_progress"


def _nothing(q: str) -> str:
    return "no results for that query, try something else entirely"


def test_a_stop_ends_the_run_without_any_callback_wired() -> None:
    """No step_callbacks: the stop is raised out of agent.run() at the end of its step."""
    gov = headway.Governor()
    gov.register("search", None, effect="read")
    calls = [("search", {"q": f"v{n % 2}"}) for n in range(40)]
    model = Scripted(calls)
    agent = ToolCallingAgent(
        tools=[GovernedTool(gov, _tool("search", _nothing))],
        model=model,
        max_steps=60,
        verbosity_level=0,
    )
    with pytest.raises(headway.LoopDetected) as stop:
        agent.run("go")
    assert next(model.turn) < 40  # the run ended at the stop, not at the end of the script
    assert stop.value.diagnostic["terminated_by"] == "no_progress"


def test_two_runs_of_one_agent_share_nothing_and_a_stop_belongs_to_its_run() -> None:
    """A default session is one run: run B's read is not served from run A's cache, and the
    run after a stopped one, with the same agent and tools, runs normally."""
    gov = headway.Governor()
    gov.register("company", None, effect="read", deterministic=True)
    gov.register("search", None, effect="read")
    runs: list[str] = []

    def company(q: str) -> str:
        runs.append(q)
        return f"{q}: Apple Inc."

    tools = [
        GovernedTool(gov, _tool("company", company)),
        GovernedTool(gov, _tool("search", _nothing)),
    ]
    agent = ToolCallingAgent(tools=tools, model=Scripted([]), max_steps=60, verbosity_level=0)
    agent.model = Scripted([("company", {"q": "AAPL"})])
    agent.run("a")
    agent.model = Scripted([("company", {"q": "AAPL"})])
    agent.run("b")
    assert runs == ["AAPL", "AAPL"]
    agent.model = Scripted([("search", {"q": f"v{n % 2}"}) for n in range(40)])
    with pytest.raises(headway.LoopDetected):
        agent.run("c")
    agent.model = Scripted([("search", {"q": "v0"}), ("company", {"q": "MSFT"})])
    assert agent.run("d") == "done"
    steps = [s for s in agent.memory.steps if isinstance(s, ActionStep)]
    assert [s.error for s in steps[:2]] == [None, None]
