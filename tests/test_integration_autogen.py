"""AutoGen agentchat: real teams of AssistantAgents, scripted by ReplayChatCompletionClient,
with GovernedTool and GovernedWorkbench."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Sequence
from typing import Any

import pytest

import headway

if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
    pytest.importorskip("autogen_agentchat", reason="autogen-agentchat is not installed")
    pytest.importorskip("autogen_ext.models.replay", reason="autogen-ext is not installed")

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.messages import ToolCallExecutionEvent
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, ModelFamily, ModelInfo, RequestUsage
from autogen_core.tools import FunctionTool, StaticWorkbench
from autogen_ext.models.replay import ReplayChatCompletionClient

from headway.integrations.autogen import GovernedTool, GovernedWorkbench

IDS = itertools.count()
INFO = ModelInfo(
    vision=False,
    function_calling=True,
    json_output=False,
    family=ModelFamily.UNKNOWN,
    structured_output=False,
)


def _model(calls: Sequence[tuple[str, dict[str, Any]]]) -> ReplayChatCompletionClient:
    """A model that makes one tool call per turn, in order."""
    results = [
        CreateResult(
            finish_reason="function_calls",
            content=[FunctionCall(id=f"call-{next(IDS)}", name=name, arguments=json.dumps(args))],
            usage=RequestUsage(prompt_tokens=0, completion_tokens=0),
            cached=False,
        )
        for name, args in calls
    ]
    return ReplayChatCompletionClient(results, model_info=INFO)


async def _run(team: RoundRobinGroupChat) -> list[Any]:
    """The tool results of the run, in order."""
    results = []
    async for event in team.run_stream(task="go"):
        if isinstance(event, ToolCallExecutionEvent):
            results += event.content
    return results


def _company(runs: list[str]) -> FunctionTool:
    def company(ticker: str) -> str:
        """Company overview."""
        runs.append(ticker)
        return f"{ticker}: Apple Inc."

    return FunctionTool(company, description="Company overview.")


async def test_two_agents_share_the_cache_and_each_is_judged_on_its_own_calls() -> None:
    gov = headway.Governor()
    gov.register("company", None, effect="read", deterministic=True)
    runs: list[str] = []
    tool = GovernedTool(gov, _company(runs), session="team-1")
    read = ("company", {"ticker": "AAPL"})
    researcher = AssistantAgent("researcher", model_client=_model([read] * 3), tools=[tool])
    writer = AssistantAgent("writer", model_client=_model([read, read]), tools=[tool])
    team = RoundRobinGroupChat([researcher, writer], termination_condition=MaxMessageTermination(6))
    results = await _run(team)
    # researcher, writer, researcher, writer, researcher
    assert runs == ["AAPL"]  # one execution for the whole team
    assert [r.is_error for r in results] == [False, False, False, False, True]
    assert "stored result" in results[1].content  # the writer's answer was served
    assert "[agent researcher]" in results[4].content
    audit = gov.audit_records("team-1")
    assert [r["agent"] for r in audit] == ["researcher", "writer"] * 2 + ["researcher"]


async def test_a_changing_poll_is_never_corrected_or_stopped() -> None:
    gov = headway.Governor()
    polls = itertools.count(1)

    def status(job: str) -> str:
        """Job status."""
        n = next(polls)
        return f"{job}: {'DONE' if n >= 10 else f'RUNNING {n * 10}%'}"

    gov.register("status", None, effect="read", poll=True)
    tool = GovernedTool(gov, FunctionTool(status, description="Job status."))
    agent = AssistantAgent(
        "poller", model_client=_model([("status", {"job": "j"})] * 10), tools=[tool]
    )
    team = RoundRobinGroupChat(
        [agent], termination_condition=MaxMessageTermination(11) | tool.termination
    )
    results = await _run(team)
    assert len(results) == 10 and not any(r.is_error for r in results)


async def test_a_loop_without_progress_ends_the_team_run_with_the_stop_reachable() -> None:
    gov = headway.Governor()

    def search(q: str) -> str:
        """Search."""
        return "no results for that query, try something else entirely"

    gov.register("search", None, effect="read")
    bench = GovernedWorkbench(gov, StaticWorkbench([FunctionTool(search, description="Search.")]))
    calls = [("search", {"q": f"v{n % 2}"}) for n in range(30)]
    agent = AssistantAgent("searcher", model_client=_model(calls), workbench=bench)
    team = RoundRobinGroupChat(
        [agent], termination_condition=MaxMessageTermination(31) | bench.termination
    )
    results = await _run(team)
    assert len(results) < 30  # ended by headway, not by the message limit
    assert results[-1].is_error and "headway stopped this run" in results[-1].content
    assert gov.session(team.__dict__["_team_id"]).stopped


async def test_a_tool_error_repeated_three_times_gets_the_repeated_error_correction() -> None:
    gov = headway.Governor()

    def book(amount: int) -> str:
        """Book."""
        raise ValueError("payment amount does not add up")

    gov.register("book", None, effect="write")
    bench = GovernedWorkbench(gov, StaticWorkbench([FunctionTool(book, description="Book.")]))
    agent = AssistantAgent(
        "booker", model_client=_model([("book", {"amount": 5})] * 3), workbench=bench
    )
    team = RoundRobinGroupChat([agent], termination_condition=MaxMessageTermination(4))
    results = await _run(team)
    assert [r.is_error for r in results] == [True, True, True]
    assert "will fail again" in results[2].content


class _Counted(ReplayChatCompletionClient):
    """A scripted model that counts the times it is asked."""

    asked = 0

    async def create(self, *args: Any, **kwargs: Any) -> CreateResult:
        self.asked += 1
        return await super().create(*args, **kwargs)


def _counted(calls: Sequence[tuple[str, dict[str, Any]]]) -> _Counted:
    return _Counted(_model(calls).chat_completions, model_info=INFO)


def search(q: str) -> str:
    """Search."""
    return "no results for that query, try something else entirely"


def lookup(q: str) -> str:
    """Lookup."""
    return "nothing here either, sorry"


async def test_a_stop_ends_a_plain_agent_run_with_several_tools() -> None:
    """AssistantAgent.run() alone, a tool loop of 40 iterations: a stop on either tool is
    raised out of run() before the model is asked again."""
    gov = headway.Governor()
    gov.register("search", None, effect="read")
    gov.register("lookup", None, effect="read")
    tools = [
        GovernedTool(gov, FunctionTool(lookup, description="Lookup.")),
        GovernedTool(gov, FunctionTool(search, description="Search.")),
    ]
    calls = [("search", {"q": f"v{n % 2}"}) for n in range(40)]
    model = _counted(calls)
    agent = AssistantAgent("solo", model_client=model, tools=tools, max_tool_iterations=40)
    with pytest.raises(headway.LoopDetected) as stop:
        await agent.run(task="go")
    assert stop.value.diagnostic["terminated_by"] == "no_progress"
    assert model.asked < 10  # not the 40 of the script: no model call after the stop


async def test_a_stop_in_a_team_ends_the_agents_tool_loop() -> None:
    """In a team, an agent looping over tools is not asked again after the stop."""
    gov = headway.Governor()
    gov.register("search", None, effect="read")
    bench = GovernedWorkbench(gov, StaticWorkbench([FunctionTool(search, description="S.")]))
    model = _counted([("search", {"q": f"v{n % 2}"}) for n in range(40)])
    agent = AssistantAgent("looper", model_client=model, workbench=bench, max_tool_iterations=40)
    team = RoundRobinGroupChat(
        [agent], termination_condition=MaxMessageTermination(80) | bench.termination
    )
    with pytest.raises(RuntimeError, match="LoopDetected"):
        await team.run(task="go")
    assert model.asked < 10


async def test_two_plain_runs_share_nothing_and_a_stop_belongs_to_its_run() -> None:
    """A default session is one run: run B is not served from run A's cache, and a run
    after a stopped one, with the same agent and tools, runs normally."""
    gov = headway.Governor()
    gov.register("company", None, effect="read", deterministic=True)
    gov.register("search", None, effect="read")
    runs: list[str] = []
    tools = [
        GovernedTool(gov, _company(runs)),
        GovernedTool(gov, FunctionTool(search, description="Search.")),
    ]
    read = ("company", {"ticker": "AAPL"})
    for _ in range(2):
        await AssistantAgent("a", model_client=_model([read]), tools=tools).run(task="go")
    assert runs == ["AAPL", "AAPL"]
    loop = _model([("search", {"q": f"v{n % 2}"}) for n in range(40)])
    with pytest.raises(headway.LoopDetected):
        await AssistantAgent("b", model_client=loop, tools=tools, max_tool_iterations=40).run(
            task="go"
        )
    after = AssistantAgent(
        "c",
        model_client=_model([("search", {"q": "v0"}), read]),
        tools=tools,
        max_tool_iterations=2,
    )
    result = await after.run(task="go")
    executed = [m for m in result.messages if isinstance(m, ToolCallExecutionEvent)]
    assert [r.is_error for m in executed for r in m.content] == [False, False]


async def test_a_team_without_the_termination_wired_still_ends_at_the_stop() -> None:
    """The tool's termination is not in the team's condition: the stopped agent's next model
    call raises the stop, which AutoGen reports as the team's error (with the termination
    wired the team ends cleanly after the stopped turn instead)."""
    gov = headway.Governor()
    gov.register("search", None, effect="read")
    tool = GovernedTool(gov, FunctionTool(search, description="Search."))
    model = _counted([("search", {"q": f"v{n % 2}"}) for n in range(40)])
    agent = AssistantAgent("looper", model_client=model, tools=[tool])
    team = RoundRobinGroupChat([agent], termination_condition=MaxMessageTermination(80))
    with pytest.raises(RuntimeError, match="LoopDetected"):
        await team.run(task="go")
    assert model.asked < 10
