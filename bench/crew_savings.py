"""A scripted CrewAI crew of three roles researching the same companies: repeated calls and
executions saved, headway on vs off, in one run.

    python bench/crew_savings.py

Each role (researcher, analyst, writer) looks up the same three companies' overviews (a
deterministic read) and the same live quotes (a read with a 60 s TTL), the way crews
re-query shared state; the analyst checks one overview twice. The model is scripted (native
tool calls, no network). Prints, for CrewAI without its cache, CrewAI with its own (untimed)
cache, and headway: the calls the agents made, the repeated-call rate (RCR: calls repeating
an earlier identical call of the run), and how many ran the tool.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")
warnings.filterwarnings("ignore", category=DeprecationWarning)

from crewai import Agent, Crew, Task  # noqa: E402
from crewai.llms.base_llm import BaseLLM  # noqa: E402
from crewai.tools import tool  # noqa: E402
from pydantic import Field  # noqa: E402

import headway  # noqa: E402
from headway.integrations.crewai import governed_tool  # noqa: E402

COMPANIES = ["AAPL", "MSFT", "GOOG"]
PLANS = {
    "researcher": [("company", t) for t in COMPANIES] + [("quote", t) for t in COMPANIES],
    "analyst": [("company", t) for t in COMPANIES]
    + [("company", "AAPL")]
    + [("quote", t) for t in COMPANIES],
    "writer": [("company", t) for t in COMPANIES] + [("quote", "AAPL")],
}


class Scripted(BaseLLM):  # type: ignore[misc]
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
            name, ticker = self.calls[n]
            args = json.dumps({"ticker": ticker})
            return [
                {"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": args}}
            ]
        return "done"

    def supports_function_calling(self) -> bool:
        return True


def run(mode: str) -> dict[str, Any]:
    executed: list[tuple[str, str]] = []

    @tool("company")
    def company(ticker: str) -> str:
        """Company overview."""
        executed.append(("company", ticker))
        return f"{ticker} overview"

    @tool("quote")
    def quote(ticker: str) -> str:
        """Live quote."""
        executed.append(("quote", ticker))
        return f"{ticker} 123.4"

    tools: list[Any] = [company, quote]
    if mode == "headway":
        gov = headway.Governor()
        gov.register("company", None, effect="read", deterministic=True)
        gov.register("quote", None, effect="read", ttl=60)
        tools = [governed_tool(gov, t) for t in tools]
    agents = [
        Agent(
            role=role,
            goal="research",
            backstory="b",
            llm=Scripted(model="s", calls=plan),
            tools=tools,
            max_iter=40,
            verbose=False,
        )
        for role, plan in PLANS.items()
    ]
    tasks = [Task(description="research", expected_output="facts", agent=a) for a in agents]
    Crew(agents=agents, tasks=tasks, cache=(mode == "crewai-cache")).kickoff()
    calls = [c for plan in PLANS.values() for c in plan]
    repeats = len(calls) - len(set(calls))
    return {"calls": len(calls), "rcr": repeats / len(calls), "executed": len(executed)}


def main() -> None:
    print(f"{'mode':<28} {'calls':>6} {'RCR':>6} {'executed':>9} {'saved':>6}")
    for mode in ("crewai (no cache)", "crewai-cache", "headway"):
        r = run(mode)
        saved = r["calls"] - r["executed"]
        print(f"{mode:<28} {r['calls']:>6} {r['rcr']:>6.1%} {r['executed']:>9} {saved:>6}")


if __name__ == "__main__":
    main()
