"""CrewAI: a real crew kickoff (sequential tasks, ReAct tool use) scripted by a BaseLLM
subclass, with governed_tool."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Sequence
from typing import Any

import pytest

import headway

if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
    pytest.importorskip("crewai", reason="crewai is not installed")

os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")

from crewai import Agent, Crew, Task
from crewai.llms.base_llm import BaseLLM
from crewai.tools import BaseTool, tool
from pydantic import Field

from headway.integrations.crewai import governed_tool, session_of

# CrewAI's own deprecation warnings, raised inside its Agent and Crew constructors
pytestmark = [pytest.mark.crewai, pytest.mark.filterwarnings("ignore::DeprecationWarning:crewai")]


class Scripted(BaseLLM):
    """A model with native tool calls: the scripted calls, one per turn, then a final
    answer."""

    calls: list[Any] = Field(default_factory=list)
    turn: int = 0

    def call(
        self,
        messages: Any,
        tools: Any = None,
        callbacks: Any = None,
        available_functions: Any = None,
        from_task: Any = None,
        from_agent: Any = None,
        response_model: Any = None,
    ) -> Any:
        n = self.turn
        self.turn += 1
        if n < len(self.calls):
            name, args = self.calls[n]
            return [
                {
                    "id": f"call_{n}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
            ]
        return "done"

    def supports_function_calling(self) -> bool:
        return True


def _agent(role: str, calls: Sequence[Any], tools: list[BaseTool]) -> Agent:
    return Agent(
        role=role,
        goal="research",
        backstory="b",
        llm=Scripted(model="scripted", calls=list(calls)),
        tools=tools,
        max_iter=60,
        verbose=False,
    )


def _task(agent: Agent) -> Task:
    return Task(description="research the company", expected_output="facts", agent=agent)


def test_two_roles_share_the_cache_and_each_is_judged_on_its_own_calls() -> None:
    gov = headway.Governor()
    gov.register("company", None, effect="read", deterministic=True)
    runs: list[str] = []

    @tool("company")
    def company(ticker: str) -> str:
        """Company overview."""
        runs.append(ticker)
        return f"{ticker}: Apple Inc."

    governed = governed_tool(gov, company)  # the session is the crew's kickoff
    read = ("company", {"ticker": "AAPL"})
    researcher = _agent("researcher", [read], [governed])
    writer = _agent("writer", [read, read, read], [governed])
    crew = Crew(agents=[researcher, writer], tasks=[_task(researcher), _task(writer)])
    crew.kickoff()
    audit = gov.audit_records(session_of(crew))
    assert runs == ["AAPL"]  # one execution for the whole crew
    assert [(r["agent"], r["status"]) for r in audit] == [
        ("researcher", "executed"),
        ("writer", "cached"),
        ("writer", "cached"),
        ("writer", "corrected"),
    ]


def test_a_changing_poll_is_never_corrected_or_stopped() -> None:
    gov = headway.Governor()
    gov.register("status", None, effect="read", poll=True)
    polls = itertools.count(1)

    @tool("status")
    def status(job: str) -> str:
        """Job status."""
        n = next(polls)
        return f"{job}: {'DONE' if n >= 10 else f'RUNNING {n * 10}%'}"

    governed = governed_tool(gov, status, session="crew-run-2")
    agent = _agent("operator", [("status", {"job": "j"})] * 10, [governed])
    Crew(agents=[agent], tasks=[_task(agent)]).kickoff()
    audit = gov.audit_records("crew-run-2")
    assert [r["status"] for r in audit] == ["executed"] * 10


def test_a_loop_without_progress_ends_the_kickoff_with_the_diagnostic() -> None:
    from crewai.tools.tool_failure import ToolExecutionFailedError

    gov = headway.Governor()
    gov.register("search", None, effect="read")

    @tool("search")
    def search(q: str) -> str:
        """Search."""
        return "no results for that query, try something else entirely"

    governed = governed_tool(gov, search, session="crew-run-3")
    agent = _agent("searcher", [("search", {"q": f"v{n % 2}"}) for n in range(40)], [governed])
    with pytest.raises(ToolExecutionFailedError) as failed:
        Crew(agents=[agent], tasks=[_task(agent)]).kickoff()
    assert failed.value.record.failure.details["headway"]["terminated_by"] == "no_progress"
    assert failed.value.record.failure.message.startswith("headway stopped this run: ")
    assert len(gov.audit_records("crew-run-3")) < 40


def test_a_waiting_poll_is_not_ended_by_crewais_repeat_guard() -> None:
    """A declared poll answering the same status 8 times (waiting is not looping): CrewAI's
    own guard (5 identical results) does not end the kickoff; headway judges the poll."""
    gov = headway.Governor()
    gov.register("job_status", None, effect="read", poll=True)
    polls = itertools.count(1)

    @tool("job_status")
    def job_status(job: str) -> str:
        """Job status."""
        return "DONE" if next(polls) > 8 else "RUNNING"

    governed = governed_tool(gov, job_status)
    agent = _agent("operator", [("job_status", {"job": "j"})] * 9, [governed])
    crew = Crew(agents=[agent], tasks=[_task(agent)])
    crew.kickoff()
    assert [r["status"] for r in gov.audit_records(session_of(crew))] == ["executed"] * 9


def test_two_kickoffs_share_nothing_and_a_stop_belongs_to_its_kickoff() -> None:
    """Each kickoff is a run: the second kickoff of the same crew is not served from the
    first one's cache, and a crew after a stopped one, with the same tool, runs normally."""
    from crewai.tools.tool_failure import ToolExecutionFailedError

    gov = headway.Governor()
    gov.register("company", None, effect="read", deterministic=True)
    gov.register("search", None, effect="read")
    runs: list[str] = []

    @tool("company")
    def company(ticker: str) -> str:
        """Company overview."""
        runs.append(ticker)
        return f"{ticker}: Apple Inc."

    @tool("search")
    def search(q: str) -> str:
        """Search."""
        if q == "bad":
            raise ValueError("malformed query")
        return "no results for that query, try something else entirely"

    overview, finder = governed_tool(gov, company), governed_tool(gov, search)
    agent = _agent("researcher", [], [overview, finder])
    crew = Crew(agents=[agent], tasks=[_task(agent)])
    for _ in range(2):
        agent.llm = Scripted(model="scripted", calls=[("company", {"ticker": "AAPL"})])
        crew.kickoff()
    assert runs == ["AAPL", "AAPL"]
    agent.llm = Scripted(
        model="scripted", calls=[("search", {"q": f"v{n % 2}"}) for n in range(40)]
    )
    with pytest.raises(ToolExecutionFailedError):
        crew.kickoff()
    calls = [("search", {"q": "bad"}), ("company", {"ticker": "MSFT"}), ("search", {"q": "v1"})]
    after = _agent("writer", calls, [overview, finder])
    crew = Crew(agents=[after], tasks=[_task(after)])
    crew.kickoff()  # the tool error is read by the agent, under the tool's own policy
    statuses = [r["status"] for r in gov.audit_records(session_of(crew))]
    assert statuses == ["error", "executed", "executed"]
