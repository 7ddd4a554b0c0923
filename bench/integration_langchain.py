"""Per-tool-call cost of HeadwayMiddleware beside LangChain's own tool call, in one run.

    python bench/integration_langchain.py [--quick]

Rows, each with and without headway, interleaved (best batch each):
- wrap_tool_call alone: headway's own work per tool call, around a handler that returns a
  ready ToolMessage (its "added µs" is what the middleware costs; its ratio means nothing);
- ToolNode: one tool call through LangGraph's ToolNode in a one-node graph (``invoke`` /
  ``ainvoke``), plain and built by ``governed_tool_node`` (the middleware's wrap_tool_call);
- agent loop: ``create_agent`` with a scripted model, per tool call (each turn is one model
  step and one tool step), plain and with ``HeadwayMiddleware``.
- the same loop against a pass-through middleware (what any middleware costs LangChain
  itself, left out), and with the tool's ``timeout=None`` (no hop to headway's thread);
- a pass-through middleware whose tool call hops to another thread and back (headway's
  pool, no other headway code): the least a timeout that can abandon a hung sync tool
  costs, since LangGraph waits for the threads of its own ToolNode;
- the loop run by ``ainvoke`` (async hooks), plain, with a pass-through middleware that has
  async hooks, and with ``HeadwayMiddleware``;
  the loop rows again in CPU time of the process (all threads; best run each), which
  holds on a loaded machine where the wall time of one run mostly measures the others.
The agents are compiled once, as an application does (the scripted model answers from the
messages it is given, so one agent runs again and again).
The tool is a declared read that is never cached (every call executes) and returns a new
page each time, so no call is corrected or stopped: this is the cost of governing.

A second table splits the loop's cost: headway's own time inside each hook (the
framework's handler left out), with the default timeout and with ``timeout=None``, and of
the tool side, the integration layer's share (the hook outside ``session.call``).
A third table times ``session.call`` alone (a trivial runner) in a hot loop and after one
LangGraph graph step between calls, with and without the LangChain tool run inside it: the
same core call costs several times more when the framework's work between calls has
evicted headway's code and data from the CPU caches, which is what it meets in the loop.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any, ClassVar

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest

import headway
from headway._tool_threads import _pool
from headway.integrations.langchain import HeadwayMiddleware, governed_tool_node

COUNTER = itertools.count()
LOOP_CALLS = 20  # tool calls per agent run


@tool
def search(page: int) -> str:
    """One page of search results."""
    return f"results page {page}: anvils, hammers, tongs"


class Runtime:
    """The one field of LangGraph's ToolRuntime the middleware reads."""

    config: ClassVar[dict[str, Any]] = {"configurable": {"thread_id": "bench-wrap"}}


class ScriptedModel(GenericFakeChatModel):
    """A tool call with a new page until the run has LOOP_CALLS results, then "done":
    it answers from the messages alone, so one compiled agent serves every run."""

    messages: Any = iter(())

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        done = sum(isinstance(m, ToolMessage) for m in messages) >= LOOP_CALLS
        reply = AIMessage("done") if done else one_call()["messages"][0]
        return ChatResult(generations=[ChatGeneration(message=reply)])


class PassThrough(AgentMiddleware[Any, Any]):
    """Both hooks headway uses, doing nothing: what any such middleware costs LangChain."""

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(request)

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(request)


class AsyncPassThrough(PassThrough):
    """PassThrough for ``ainvoke``: LangChain runs a middleware's async hooks there."""

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return await handler(request)

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return await handler(request)


class ThreadHop(PassThrough):
    """PassThrough whose tool call runs on another thread, waited for with a timeout."""

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        job, in_time = _pool.wait(handler, (request,), 30.0)
        if not in_time:
            raise TimeoutError("the bench's tool took over 30 s")
        return job.outcome()


def one_call() -> dict[str, Any]:
    n = next(COUNTER)
    call = {"name": "search", "args": {"page": n}, "id": f"c{n}", "type": "tool_call"}
    return {"messages": [AIMessage("", tool_calls=[call])]}


def graph_of(node: ToolNode) -> Any:
    """The smallest graph a ToolNode runs in: START -> tools -> END."""
    graph = StateGraph(MessagesState)
    graph.add_node("tools", node)
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    return graph.compile()


def governor(timeout: float | None = 30.0) -> headway.Governor:
    gov = headway.Governor()
    gov.register("search", None, effect="read", timeout=timeout)
    return gov


def best_us(
    fn: Callable[[], Any], batch: int, per: int = 1, clock: Callable[[], float] = time.perf_counter
) -> float:
    start = clock()
    for _ in range(batch):
        fn()
    return (clock() - start) / (batch * per) * 1e6


def main() -> None:
    quick = "--quick" in sys.argv
    # many short batches, best of each: on a loaded machine the minimum is the cost
    batch, rounds = (5, 30) if quick else (10, 200)
    config = {"configurable": {"thread_id": "bench"}}
    plain_node = graph_of(ToolNode([search]))
    gov_node = graph_of(governed_tool_node(governor(), [search]))
    model = ScriptedModel()
    agents = {
        "plain": create_agent(model, [search]),
        "pass": create_agent(model, [search], middleware=[PassThrough()]),
        "headway": create_agent(model, [search], middleware=[HeadwayMiddleware(governor())]),
        "inline": create_agent(model, [search], middleware=[HeadwayMiddleware(governor(None))]),
        "hop": create_agent(model, [search], middleware=[ThreadHop()]),
        "async plain": create_agent(model, [search]),
        "async pass": create_agent(model, [search], middleware=[AsyncPassThrough()]),
        "async headway": create_agent(model, [search], middleware=[HeadwayMiddleware(governor())]),
    }
    event_loop = asyncio.new_event_loop()

    def loop(kind: str) -> Callable[[], Any]:
        def run() -> Any:
            given = {"messages": [("user", "go")]}
            if kind.startswith("async"):
                out = event_loop.run_until_complete(agents[kind].ainvoke(given, config))
            else:
                out = agents[kind].invoke(given, config)
            if len(out["messages"]) != 2 * LOOP_CALLS + 2 or "headway_stop" in out:
                raise AssertionError(f"the {kind} run did not make {LOOP_CALLS} tool calls")
            return out

        return run

    wrap_mw = HeadwayMiddleware(governor())
    ready = ToolMessage(content="results page 0", tool_call_id="c0", name="search")

    def handler(request: Any) -> ToolMessage:
        return ready

    def request() -> ToolCallRequest:
        n = next(COUNTER)
        call = {"name": "search", "args": {"page": n}, "id": f"c{n}", "type": "tool_call"}
        return ToolCallRequest(tool_call=call, tool=search, state={}, runtime=Runtime())

    pairs: list[tuple[str, Callable[[], Any], Callable[[], Any], int, int]] = [
        (
            "wrap_tool_call alone (a handler returning a ready message)",
            lambda: handler(request()),
            lambda: wrap_mw.wrap_tool_call(request(), handler),
            50,
            1,
        ),
        (
            "graph with a ToolNode, invoke, one tool call",
            lambda: plain_node.invoke(one_call(), config),
            lambda: gov_node.invoke(one_call(), config),
            batch,
            1,
        ),
        (
            "graph with a ToolNode, ainvoke, one tool call",
            lambda: asyncio.run(plain_node.ainvoke(one_call(), config)),
            lambda: asyncio.run(gov_node.ainvoke(one_call(), config)),
            batch,
            1,
        ),
    ]
    best = {(name, k): float("inf") for name, *_ in pairs for k in ("plain", "headway")}
    cpu_runs: list[dict[str, float]] = []  # each loop round's CPU per call, by agent
    for kind in agents:
        loop(kind)()  # the first run of a compiled graph pays its warm-up
        best["loop", kind] = best["cpu", kind] = float("inf")
    for r in range(rounds):
        for name, plain, governed, n, per in pairs:
            best[name, "plain"] = min(best[name, "plain"], best_us(plain, n, per))
            best[name, "headway"] = min(best[name, "headway"], best_us(governed, n, per))
        if r % 5 == 0:  # an agent run is 20 calls: a fifth of the rounds is enough
            cpu_runs.append({})
            for kind in agents:
                best["loop", kind] = min(best["loop", kind], best_us(loop(kind), 1, LOOP_CALLS))
                cpu = best_us(loop(kind), 1, LOOP_CALLS, time.process_time)
                best["cpu", kind] = min(best["cpu", kind], cpu)
                cpu_runs[-1][kind] = cpu
    loops = [
        (f"create_agent loop, per tool call ({LOOP_CALLS} per run)", "plain", "headway"),
        ("create_agent loop, against a pass-through middleware", "pass", "headway"),
        ("create_agent loop, the tool's timeout=None (runs inline)", "plain", "inline"),
        ("create_agent loop, a pass-through middleware hopping to a thread", "plain", "hop"),
        ("create_agent loop, ainvoke", "async plain", "async headway"),
        ("create_agent loop, ainvoke, a pass-through middleware", "async plain", "async pass"),
        (
            "create_agent loop, ainvoke, against a pass-through middleware",
            "async pass",
            "async headway",
        ),
    ]
    rows = [(name, best[name, "plain"], best[name, "headway"]) for name, *_ in pairs]
    rows += [(name, best["loop", a], best["loop", b]) for name, a, b in loops]
    # CPU time of the process (all its threads): what holds when the machine is loaded
    rows += [(f"{name}, CPU", best["cpu", a], best["cpu", b]) for name, a, b in loops]
    print("| path | LangChain µs/call | with headway µs/call | added µs | overhead |")
    print("|---|---:|---:|---:|---:|")
    for name, a, b in rows:
        print(f"| {name} | {a:.0f} | {b:.0f} | {b - a:.0f} | {(b - a) / a:+.1%} |")
    # the median over the rounds of one round's ratio: a second estimate, which one lucky
    # run of either side cannot move
    print()
    print("| loop, CPU | median of the rounds' ratios |")
    print("|---|---:|")
    for name, a, b in loops:
        ratio = statistics.median(run[b] / run[a] for run in cpu_runs)
        print(f"| {name} | {ratio - 1:+.1%} |")
    hook_times(config, rounds)
    cold_core(plain_node, config, rounds)


class TimedHooks(HeadwayMiddleware):
    """HeadwayMiddleware with its own time in each hook recorded, the handler's left out."""

    def __init__(self, gov: headway.Governor) -> None:
        super().__init__(gov)
        self.times: dict[str, list[float]] = {"model": [], "tool": [], "layer": []}
        self.core = [0.0]  # session.call's time in the current tool call

    def _timed(self, hook: str, wrapped: Callable[..., Any], request: Any, handler: Any) -> Any:
        inner = [0.0]

        def timed_handler(req: Any) -> Any:
            start = time.perf_counter()
            try:
                return handler(req)
            finally:
                inner[0] = time.perf_counter() - start

        start = time.perf_counter()
        try:
            return wrapped(request, timed_handler)
        finally:
            self.times[hook].append(time.perf_counter() - start - inner[0])

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return self._timed("model", super().wrap_model_call, request, handler)

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        self.core[0] = 0.0
        start = time.perf_counter()
        try:
            return self._timed("tool", super().wrap_tool_call, request, handler)
        finally:
            self.times["layer"].append(time.perf_counter() - start - self.core[0])

    def _session(self, state: Any, config: Any) -> Any:
        return TimedSession(super()._session(state, config), self.core)


class TimedSession:
    """A session whose ``call`` records its time (the integration layer is the rest)."""

    def __init__(self, session: headway.Session, into: list[float]) -> None:
        self.session, self.into = session, into

    def call(self, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return self.session.call(*args, **kwargs)
        finally:
            self.into[0] = time.perf_counter() - start


def hook_times(config: dict[str, Any], rounds: int) -> None:
    hooks = {"30 s (default)": TimedHooks(governor()), "None (inline)": TimedHooks(governor(None))}
    agents = {k: create_agent(ScriptedModel(), [search], middleware=[h]) for k, h in hooks.items()}
    for _ in range(max(rounds // 5, 3)):
        for agent in agents.values():
            agent.invoke({"messages": [("user", "go")]}, config)
    print()
    print(
        "| tool timeout | headway in wrap_model_call, µs/turn | in wrap_tool_call, µs/call "
        "| of which the integration layer (outside session.call) |"
    )
    print("|---|---:|---:|---:|")
    for k, h in hooks.items():
        model, tool_side, layer = (
            statistics.median(h.times[x]) * 1e6 for x in ("model", "tool", "layer")
        )
        print(f"| {k} | {model:.0f} | {tool_side:.0f} | {layer:.0f} |")


def cold_core(node: Any, config: dict[str, Any], rounds: int) -> None:
    """The same session.call, hot and after one graph step (not timed) before each call."""
    gov = governor(None)

    def trivial(**_: Any) -> str:
        return f"results page {next(COUNTER)}"

    def lc_tool(**_: Any) -> Any:
        return search.invoke({"page": next(COUNTER)})

    def step() -> None:
        node.invoke(one_call(), config)

    def median_us(run: Callable[..., Any], between: Callable[[], None] | None) -> float:
        session = gov.session(f"core-{next(COUNTER)}")
        net: list[float] = []
        inner = [0.0]  # the runner's own time, left out

        def timed(**kw: Any) -> Any:
            start = time.perf_counter()
            try:
                return run(**kw)
            finally:
                inner[0] = time.perf_counter() - start

        for _ in range(100):
            if between is not None:
                between()
            start = time.perf_counter()
            session.call("search", {"page": next(COUNTER)}, run=timed)
            net.append(time.perf_counter() - start - inner[0])
        return statistics.median(net) * 1e6

    cases = [
        ("hot loop, a runner that returns at once", trivial, None),
        ("hot loop, the LangChain tool run inside", lc_tool, None),
        ("a graph step before each call, a runner that returns at once", trivial, step),
        ("a graph step before each call, the LangChain tool run inside", lc_tool, step),
    ]
    best = {name: float("inf") for name, *_ in cases}
    for _ in range(max(rounds // 20, 3)):
        for name, run, between in cases:
            best[name] = min(best[name], median_us(run, between))
    print()
    print("| session.call (timeout=None), tool time left out | median µs/call |")
    print("|---|---:|")
    for name, *_ in cases:
        print(f"| {name} | {best[name]:.0f} |")


if __name__ == "__main__":
    main()
