"""Per-tool-call cost of HeadwayMiddleware beside LangChain's own tool call, in one run.

    python bench/integration_langchain.py [--quick]

Rows, each with and without headway, interleaved (best batch each):
- wrap_tool_call alone: headway's own work per tool call, around a handler that returns a
  ready ToolMessage (its "added µs" is what the middleware costs; its ratio means nothing);
- ToolNode: one tool call through LangGraph's ToolNode in a one-node graph (``invoke`` /
  ``ainvoke``), plain and built by ``governed_tool_node`` (the middleware's wrap_tool_call);
- agent loop: ``create_agent`` with a scripted model, per tool call (each turn is one model
  step and one tool step), plain and with ``HeadwayMiddleware``.
The tool is a declared read that is never cached (every call executes) and returns a new
page each time, so no call is corrected or stopped: this is the cost of governing.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from collections.abc import Callable
from typing import Any, ClassVar

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest

import headway
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
    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


def one_call() -> dict[str, Any]:
    n = next(COUNTER)
    call = {"name": "search", "args": {"page": n}, "id": f"c{n}", "type": "tool_call"}
    return {"messages": [AIMessage("", tool_calls=[call])]}


def script() -> ScriptedModel:
    turns = [one_call()["messages"][0] for _ in range(LOOP_CALLS)]
    return ScriptedModel(messages=iter([*turns, AIMessage("done")]))


def graph_of(node: ToolNode) -> Any:
    """The smallest graph a ToolNode runs in: START -> tools -> END."""
    graph = StateGraph(MessagesState)
    graph.add_node("tools", node)
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    return graph.compile()


def governor() -> headway.Governor:
    gov = headway.Governor()
    gov.register("search", None, effect="read")
    return gov


def best_us(fn: Callable[[], Any], batch: int, per: int = 1) -> float:
    start = time.perf_counter()
    for _ in range(batch):
        fn()
    return (time.perf_counter() - start) / (batch * per) * 1e6


def main() -> None:
    quick = "--quick" in sys.argv
    # many short batches, best of each: on a loaded machine the minimum is the cost
    batch, rounds, loop_batch = (5, 30, 1) if quick else (10, 200, 1)
    config = {"configurable": {"thread_id": "bench"}}
    plain_node = graph_of(ToolNode([search]))
    gov_node = graph_of(governed_tool_node(governor(), [search]))
    loop_gov = governor()

    def plain_loop() -> Any:
        return create_agent(script(), [search]).invoke({"messages": [("user", "go")]}, config)

    def governed_loop() -> Any:
        agent = create_agent(script(), [search], middleware=[HeadwayMiddleware(loop_gov)])
        return agent.invoke({"messages": [("user", "go")]}, config)

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
        (
            f"create_agent loop, per tool call ({LOOP_CALLS} per run)",
            plain_loop,
            governed_loop,
            loop_batch,
            LOOP_CALLS,
        ),
    ]
    best = {(name, k): float("inf") for name, *_ in pairs for k in ("plain", "headway")}
    for r in range(rounds):
        for name, plain, governed, n, per in pairs:
            if per > 1 and r % 5:
                continue  # an agent run is 20 calls: a fifth of the rounds is enough
            best[name, "plain"] = min(best[name, "plain"], best_us(plain, n, per))
            best[name, "headway"] = min(best[name, "headway"], best_us(governed, n, per))
    print("| path | LangChain µs/call | with headway µs/call | added µs | overhead |")
    print("|---|---:|---:|---:|---:|")
    for name, *_ in pairs:
        a, b = best[name, "plain"], best[name, "headway"]
        print(f"| {name} | {a:.0f} | {b:.0f} | {b - a:.0f} | {(b - a) / a:+.1%} |")


if __name__ == "__main__":
    main()
