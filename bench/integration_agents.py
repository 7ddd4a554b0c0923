"""What headway adds to a tool call inside the OpenAI Agents SDK and Pydantic AI, in one run.

    python bench/integration_agents.py [--quick]

For each framework, the same agent runs with its plain tools and with headway's
integration, interleaved round by round (best run of each kept): a model that makes
CALLS tool calls, then answers. A pass-through wrapper (one more await around the tool, the
least any wrapper costs) separates the cost of wrapping from headway's own. Two shapes: all calls in one model turn (tool calls
dominate the run: the harshest comparison) and one call per turn (the usual loop). The tool
is a dynamic read with new arguments every call, so every governed call runs the tool
(the executed path: no cache hit). Prints CPU microseconds per tool call and the ratio
(best run against best run, and the median over the rounds of the ratio of one round's
runs):
CPU time (of this process, threads included) rather than wall time, because on a shared
machine the wall time of one run depends mostly on what the other processes do.

A third table is what Pydantic AI charges any capability for being one: plain, a
pass-through ``wrap_tool_execute`` capability, and a capability that only wraps the
toolset (``get_wrapper_toolset``, a pass-through ``WrapperToolset``), 20 calls per turn.

A second table splits headway's own wall time inside each integration's tool hook (the
framework's tool left out), one call per model turn: the integration layer (the hook
outside ``session.acall``) and the core (``session.acall`` minus the tool), with the
tool's default 30 s timeout and with ``timeout=None``; medians over the runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import agents
from agents import Agent, FunctionTool, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import AbstractToolset, WrapperToolset

import headway
from headway import Session
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


def governor(timeout: float | None = 30.0) -> headway.Governor:
    gov = headway.Governor()
    gov.register("lookup", None, effect="read", timeout=timeout)
    return gov


class PassthroughToolset(WrapperToolset[Any]):
    async def call_tool(self, name: str, tool_args: Any, ctx: Any, tool: Any) -> Any:
        return await self.wrapped.call_tool(name, tool_args, ctx, tool)


class ToolsetCapability(AbstractCapability[Any]):
    """A capability whose only work is a pass-through wrapper of the agent's toolset."""

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any]:
        return PassthroughToolset(toolset)


def openai_agents_run(
    mode: str, per_turn: int, *, timeout: float | None = 30.0, timer: Timer | None = None
) -> Callable[[int], Awaitable[Any]]:
    tools = [function_tool(lookup)]
    if mode == "wrapper":
        tools = [passthrough(t) for t in tools]
    elif mode == "headway":
        if timer is not None:
            tools = [timer.wrap(t, "tool") for t in tools]
        tools = govern_tools(governor(timeout), tools)
        if timer is not None:
            tools = [timer.wrap(t, "hook") for t in tools]

    def run(i: int) -> Awaitable[Any]:
        calls = [function_call("lookup", {"q": f"r{i}-{n}"}, call_id=f"c{n}") for n in range(CALLS)]
        steps: list[Any] = [calls[k : k + per_turn] for k in range(0, CALLS, per_turn)]
        model = ScriptedModel([*steps, [assistant_message("done")]])
        agent = Agent(name="bench", model=model, tools=tools)
        return Runner.run(agent, "go", context={"run_id": f"run-{mode}-{i}"}, max_turns=50)

    return run


def pydantic_ai_run(
    mode: str, per_turn: int, *, timeout: float | None = 30.0, timer: Timer | None = None
) -> Callable[[int], Awaitable[Any]]:
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

    capabilities: list[AbstractCapability[Any]] = []
    if mode == "wrapper":
        capabilities = [Passthrough()]
    elif mode == "toolset":
        capabilities = [ToolsetCapability()]
    elif mode == "headway":
        governed = HeadwayCapability(governor(timeout))
        capabilities = [governed if timer is None else TimedCapability(governed, timer)]
    agent = PydanticAgent(FunctionModel(respond), capabilities=capabilities)
    agent.tool_plain(lookup)

    def run(i: int) -> Awaitable[Any]:
        run_no[0] = i
        return agent.run("go", conversation_id=f"run-{mode}-{i}")

    return run


class Timer:
    """Wall time of one tool call in three places: the integration's hook, ``session.acall``
    inside it, and the framework's tool inside that; one row per call."""

    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []
        self._now: dict[str, float] = {}

    async def timed(self, place: str, call: Awaitable[Any]) -> Any:
        start = time.perf_counter()
        try:
            return await call
        finally:
            self._now[place] = time.perf_counter() - start
            if place == "hook":
                self.rows.append(self._now)
                self._now = {}

    def wrap(self, tool: FunctionTool, place: str) -> FunctionTool:
        invoke = tool.on_invoke_tool

        async def on_invoke_tool(ctx: ToolContext[Any], raw: str) -> Any:
            return await self.timed(place, invoke(ctx, raw))

        wrapped = copy.copy(tool)
        wrapped.on_invoke_tool = on_invoke_tool
        return wrapped

    @contextlib.contextmanager
    def core(self) -> Iterator[None]:
        """``Session.acall`` timed while the block runs (the bench's own process only)."""
        acall = Session.acall

        async def timed_acall(session: Session, *args: Any, **kwargs: Any) -> Any:
            return await self.timed("core", acall(session, *args, **kwargs))

        Session.acall = timed_acall  # type: ignore[method-assign]
        try:
            yield
        finally:
            Session.acall = acall  # type: ignore[method-assign]

    def split(self) -> tuple[float, float]:
        """Medians, µs per call: the integration layer, the core."""
        rows = [r for r in self.rows if len(r) == 3]
        layer = statistics.median(r["hook"] - r["core"] for r in rows) * 1e6
        core = statistics.median(r["core"] - r["tool"] for r in rows) * 1e6
        return layer, core


class TimedCapability(AbstractCapability[Any]):
    """HeadwayCapability's hook, timed: its own call and the framework's handler inside."""

    def __init__(self, governed: HeadwayCapability, timer: Timer) -> None:
        self.governed, self.timer = governed, timer

    async def wrap_tool_execute(
        self, ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any
    ) -> Any:
        async def tool(kwargs: Any) -> Any:
            return await self.timer.timed("tool", handler(kwargs))

        hook = self.governed.wrap_tool_execute(
            ctx, call=call, tool_def=tool_def, args=args, handler=tool
        )
        return await self.timer.timed("hook", hook)


async def split_rows(rounds: int) -> None:
    print()
    print("| framework | tool timeout | integration layer µs/call | core (session.acall) µs/call |")
    print("|---|---|---:|---:|")
    for framework, make in (
        ("OpenAI Agents SDK", openai_agents_run),
        ("Pydantic AI", pydantic_ai_run),
    ):
        for label, timeout in (("30 s (default)", 30.0), ("None", None)):
            timer = Timer()
            run = make("headway", 1, timeout=timeout, timer=timer)
            with timer.core():
                for r in range(max(rounds // 3, 5)):
                    await run(r)
            layer, core = timer.split()
            print(f"| {framework} | {label} | {layer:.1f} | {core:.0f} |")


async def best_per_call(runs: dict[str, Callable[[int], Awaitable[Any]]], rounds: int) -> Any:
    """Each mode's best run (CPU µs per tool call), and per mode the median over the rounds
    of its run's ratio to the first mode's run of the same round (a second estimate that
    one lucky run cannot move)."""
    best = dict.fromkeys(runs, float("inf"))
    ratios: dict[str, list[float]] = {name: [] for name in runs}
    first = next(iter(runs))
    for r in range(rounds):
        this: dict[str, float] = {}
        for name, run in runs.items():  # interleaved: the machine's noise hits both alike
            start = time.process_time()
            await run(r)
            this[name] = (time.process_time() - start) / CALLS * 1e6
            best[name] = min(best[name], this[name])
        for name in runs:
            ratios[name].append(this[name] / this[first])
    return best, {name: statistics.median(v) for name, v in ratios.items()}


async def main() -> None:
    rounds = 15 if "--quick" in sys.argv else 60
    print(f"{CALLS} tool calls per run, best of {rounds} runs; CPU µs per tool call\n")
    print(
        "| framework | calls per model turn | plain | pass-through wrapper | with headway | added "
        "| ratio | median ratio |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for framework, make in (
        ("OpenAI Agents SDK", openai_agents_run),
        ("Pydantic AI", pydantic_ai_run),
    ):
        for per_turn in (CALLS, 1):
            modes = ("plain", "wrapper", "headway")
            best, median = await best_per_call({m: make(m, per_turn) for m in modes}, rounds)
            plain, wrapper, gov = (best[m] for m in modes)
            print(
                f"| {framework} | {per_turn} | {plain:.0f} | {wrapper:.0f} | {gov:.0f} "
                f"| {gov - plain:.0f} | {gov / plain:.3f} | {median['headway']:.3f} |"
            )
    await split_rows(rounds)
    modes = ("plain", "wrapper", "toolset")
    best, _ = await best_per_call({m: pydantic_ai_run(m, CALLS) for m in modes}, rounds)
    print()
    print("| Pydantic AI, 20 calls per turn | CPU µs per tool call | ratio |")
    print("|---|---:|---:|")
    labels = ("plain", "a pass-through wrap_tool_execute", "a pass-through toolset wrapper")
    for mode, label in zip(modes, labels, strict=True):
        print(f"| {label} | {best[mode]:.0f} | {best[mode] / best['plain']:.3f} |")


if __name__ == "__main__":
    asyncio.run(main())
