"""What headway adds to a tool call inside the OpenAI Agents SDK and Pydantic AI, in one run.

    python bench/integration_agents.py [--quick]

For each framework, the same agent runs with its plain tools and with headway's
integration, interleaved round by round (best run of each kept): a model that makes
CALLS tool calls, then answers. A pass-through wrapper (one more await around the tool, the
least any wrapper costs) separates the cost of wrapping from headway's own. Two shapes: all calls in one model turn (tool calls
dominate the run: the harshest comparison) and one call per turn (the usual loop). The tool
is a dynamic read with new arguments every call, so every governed call runs the tool
(the executed path: no cache hit). Prints CPU microseconds per tool call and the ratio:
CPU time (of this process, threads included) rather than wall time, because on a shared
machine the wall time of one run depends mostly on what the other processes do.
"""

from __future__ import annotations

import asyncio
import copy
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import agents
from agents import Agent, FunctionTool, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import headway
from headway.integrations.openai_agents import govern_tools
from headway.integrations.pydantic_ai import HeadwayCapability

agents.set_tracing_disabled(True)
CALLS = 20


def lookup(q: str) -> str:
    return f"{q}: 42 rows"


def passthrough(tool: FunctionTool) -> FunctionTool:
    """The least any wrapper of on_invoke_tool costs: one more await."""
    invoke = tool.on_invoke_tool

    async def on_invoke_tool(ctx: ToolContext[Any], raw: str) -> Any:
        return await invoke(ctx, raw)

    wrapped = copy.copy(tool)
    wrapped.on_invoke_tool = on_invoke_tool
    return wrapped


class Passthrough(AbstractCapability[Any]):
    """The least any capability wrapping tool execution costs."""

    async def wrap_tool_execute(
        self, ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any
    ) -> Any:
        return await handler(args)


def openai_agents_run(mode: str, per_turn: int) -> Callable[[int], Awaitable[Any]]:
    gov = headway.Governor()
    gov.register("lookup", None, effect="read")
    tools = [function_tool(lookup)]
    if mode == "wrapper":
        tools = [passthrough(t) for t in tools]
    elif mode == "headway":
        tools = govern_tools(gov, tools)

    def run(i: int) -> Awaitable[Any]:
        calls = [function_call("lookup", {"q": f"r{i}-{n}"}, call_id=f"c{n}") for n in range(CALLS)]
        steps: list[Any] = [calls[k : k + per_turn] for k in range(0, CALLS, per_turn)]
        model = ScriptedModel([*steps, [assistant_message("done")]])
        agent = Agent(name="bench", model=model, tools=tools)
        return Runner.run(agent, "go", context={"run_id": f"run-{mode}-{i}"}, max_turns=50)

    return run


def pydantic_ai_run(mode: str, per_turn: int) -> Callable[[int], Awaitable[Any]]:
    gov = headway.Governor()
    gov.register("lookup", None, effect="read")
    run_no = [0]

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        first = turn * per_turn
        if first >= CALLS:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(
            parts=[
                ToolCallPart("lookup", {"q": f"r{run_no[0]}-{n}"}, tool_call_id=f"c{n}")
                for n in range(first, min(first + per_turn, CALLS))
            ]
        )

    capabilities = {"plain": [], "wrapper": [Passthrough()], "headway": [HeadwayCapability(gov)]}[
        mode
    ]
    agent = PydanticAgent(FunctionModel(respond), capabilities=capabilities)
    agent.tool_plain(lookup)

    def run(i: int) -> Awaitable[Any]:
        run_no[0] = i
        return agent.run("go", conversation_id=f"run-{mode}-{i}")

    return run


async def best_per_call(runs: dict[str, Callable[[int], Awaitable[Any]]], rounds: int) -> Any:
    best = dict.fromkeys(runs, float("inf"))
    for r in range(rounds):
        for name, run in runs.items():  # interleaved: the machine's noise hits both alike
            start = time.process_time()
            await run(r)
            best[name] = min(best[name], (time.process_time() - start) / CALLS * 1e6)
    return best


async def main() -> None:
    rounds = 15 if "--quick" in sys.argv else 60
    print(f"{CALLS} tool calls per run, best of {rounds} runs; CPU µs per tool call\n")
    print(
        "| framework | calls per model turn | plain | pass-through wrapper | with headway | added | ratio |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for framework, make in (
        ("OpenAI Agents SDK", openai_agents_run),
        ("Pydantic AI", pydantic_ai_run),
    ):
        for per_turn in (CALLS, 1):
            modes = ("plain", "wrapper", "headway")
            best = await best_per_call({m: make(m, per_turn) for m in modes}, rounds)
            plain, wrapper, gov = (best[m] for m in modes)
            print(
                f"| {framework} | {per_turn} | {plain:.0f} | {wrapper:.0f} | {gov:.0f} "
                f"| {gov - plain:.0f} | {gov / plain:.3f} |"
            )


if __name__ == "__main__":
    asyncio.run(main())
