"""LlamaIndex: a real FunctionAgent loop, scripted by MockFunctionCallingLLM, through
GovernedTool."""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from typing import Any

import pytest

import headway

if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
    pytest.importorskip("llama_index.core", reason="llama-index-core is not installed")

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

from headway.integrations.llamaindex import GovernedTool

# the framework's own deprecation warnings (pydantic v1 names read by its workflow engine)
pytestmark = pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning")


def _scripted(calls: Sequence[tuple[str, dict[str, Any]]]) -> MockFunctionCallingLLM:
    """A model that makes the given tool calls, one per turn, then answers."""
    ids = itertools.count()

    def respond(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        done = sum(1 for m in messages if m.role == MessageRole.TOOL)
        if done >= len(calls):
            return ChatMessage(role=MessageRole.ASSISTANT, content="done")
        name, args = calls[done]
        block = ToolCallBlock(tool_call_id=f"call-{next(ids)}", tool_name=name, tool_kwargs=args)
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])

    return MockFunctionCallingLLM(response_generator=respond, is_chat_model=True)


async def _run(gov: headway.Governor, tools: list[Any], calls: list[Any]) -> tuple[Any, list[Any]]:
    governed: list[Any] = [
        t if isinstance(t, GovernedTool) else GovernedTool(gov, t) for t in tools
    ]
    agent = FunctionAgent(tools=governed, llm=_scripted(calls), timeout=30)
    handler = agent.run(user_msg="go", max_iterations=50)
    outputs = []
    async for event in handler.stream_events():
        if type(event).__name__ == "ToolCallResult":
            outputs.append(event.tool_output)
    return await handler, outputs


async def test_a_deterministic_read_asked_three_times_runs_once_then_is_corrected() -> None:
    gov = headway.Governor()
    runs: list[str] = []

    def company(ticker: str) -> str:
        """Company overview."""
        runs.append(ticker)
        return f"{ticker}: Apple Inc."

    gov.register("company", None, effect="read", deterministic=True)
    _, outputs = await _run(
        gov, [FunctionTool.from_defaults(company)], [("company", {"ticker": "AAPL"})] * 3
    )
    assert runs == ["AAPL"]
    assert [o.is_error for o in outputs] == [False, False, True]
    assert "identical" in outputs[2].content


async def test_a_changing_poll_is_never_corrected_or_stopped() -> None:
    gov = headway.Governor()
    polls = itertools.count(1)

    def status(job: str) -> str:
        """Job status."""
        n = next(polls)
        return f"{job}: {'DONE' if n >= 10 else f'RUNNING {n * 10}%'}"

    gov.register("status", None, effect="read", poll=True)
    result, outputs = await _run(
        gov, [FunctionTool.from_defaults(status)], [("status", {"job": "j1"})] * 10
    )
    assert [o.is_error for o in outputs] == [False] * 10
    assert "DONE" in outputs[-1].content and str(result) == "done"


async def test_a_loop_without_progress_is_ended_and_the_stop_is_reachable() -> None:
    gov = headway.Governor()

    def search(q: str) -> str:
        """Search."""
        return "no results for that query, try something else entirely"

    gov.register("search", None, effect="read")
    tool = FunctionTool.from_defaults(search)
    calls = [("search", {"q": f"v{n % 2}"}) for n in range(30)]
    result, outputs = await _run(gov, [tool], calls)
    assert len(outputs) < 30  # the run ended early
    assert isinstance(result.raw, headway.LoopDetected)
    assert result.raw.diagnostic["terminated_by"] == "no_progress"
    assert str(result).startswith("headway stopped this run: ")
    assert "{" not in str(result)  # a sentence, not a JSON dump


async def test_two_runs_share_nothing_and_a_stop_belongs_to_its_run() -> None:
    """A default session is one run: run B is not served from run A's cache, and the run
    after a stopped one, with the same tools, runs normally (no return_direct left)."""
    gov = headway.Governor()
    gov.register("company", None, effect="read", deterministic=True)
    gov.register("search", None, effect="read")
    runs: list[str] = []

    def company(ticker: str) -> str:
        """Company overview."""
        runs.append(ticker)
        return f"{ticker}: Apple Inc."

    def search(q: str) -> str:
        """Search."""
        return "no results for that query, try something else entirely"

    tools = [
        GovernedTool(gov, FunctionTool.from_defaults(company)),
        GovernedTool(gov, FunctionTool.from_defaults(search)),
    ]
    for _ in range(2):
        await _run(gov, tools, [("company", {"ticker": "AAPL"})])
    assert runs == ["AAPL", "AAPL"]
    stopped, _ = await _run(gov, tools, [("search", {"q": f"v{n % 2}"}) for n in range(30)])
    assert isinstance(stopped.raw, headway.LoopDetected)
    result, outputs = await _run(
        gov, tools, [("search", {"q": "v0"}), ("company", {"ticker": "X"})]
    )
    assert str(result) == "done"
    assert [o.is_error for o in outputs] == [False, False]


async def test_an_error_output_repeated_three_times_gets_the_repeated_error_correction() -> None:
    gov = headway.Governor()

    def book(amount: int) -> str:
        """Book."""
        raise ValueError("payment amount does not add up")

    gov.register("book", None, effect="write")
    _, outputs = await _run(gov, [FunctionTool.from_defaults(book)], [("book", {"amount": 5})] * 3)
    assert all(o.is_error for o in outputs)
    assert "will fail again" in outputs[2].content
    assert "payment amount does not add up" in outputs[2].content
