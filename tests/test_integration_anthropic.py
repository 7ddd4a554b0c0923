"""Claude's tool use: the Anthropic SDK's real tool runner, against a scripted Messages API
served by an httpx mock transport (no network), through govern_tools."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Sequence
from typing import Any

import pytest

import headway

if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
    pytest.importorskip("anthropic", reason="anthropic is not installed")

import anthropic
import httpx2 as httpx
from anthropic import beta_tool

from headway.integrations.anthropic import govern_tools, stop_of


class ScriptedClaude:
    """Answers each request with the next scripted tool call, then a final text; records
    the tool results it was sent."""

    def __init__(self, calls: Sequence[tuple[str, dict[str, Any]]]) -> None:
        self.calls = list(calls)
        self.results: list[dict[str, Any]] = []
        self.ids = itertools.count()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        last = body["messages"][-1]
        if last["role"] == "user" and isinstance(last["content"], list):
            self.results += [b for b in last["content"] if b.get("type") == "tool_result"]
        n = len(self.results)
        if n < len(self.calls):
            name, args = self.calls[n]
            content = [
                {"type": "tool_use", "id": f"toolu_{next(self.ids)}", "name": name, "input": args}
            ]
            stop = "tool_use"
        else:
            content, stop = [{"type": "text", "text": "done"}], "end_turn"
        message = {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
        return httpx.Response(200, json=message)


def _runner(tools: list[Any], claude: ScriptedClaude) -> Any:
    client = anthropic.Anthropic(
        api_key="test", http_client=httpx.Client(transport=httpx.MockTransport(claude))
    )
    return client.beta.messages.tool_runner(
        model="claude-test",
        max_tokens=100,
        messages=[{"role": "user", "content": "go"}],
        tools=tools,
        max_iterations=60,
    )


def _run(gov: headway.Governor, tools: list[Any], claude: ScriptedClaude, session: str) -> Any:
    runner = _runner(govern_tools(gov, tools, session=session), claude)
    runner.until_done()
    return runner


def test_a_deterministic_read_asked_three_times_runs_once_then_is_corrected() -> None:
    gov = headway.Governor()
    runs: list[str] = []

    @beta_tool
    def company(ticker: str) -> str:
        """Company overview."""
        runs.append(ticker)
        return f"{ticker}: Apple Inc."

    gov.register("company", None, effect="read", deterministic=True)
    claude = ScriptedClaude([("company", {"ticker": "AAPL"})] * 3)
    _run(gov, [company], claude, "a")
    assert runs == ["AAPL"]
    assert [bool(r.get("is_error")) for r in claude.results] == [False, False, True]
    assert "stored result" in json.dumps(claude.results[1]["content"])  # a served answer
    assert "identical" in json.dumps(claude.results[2]["content"])


def test_a_changing_poll_is_never_corrected_or_stopped() -> None:
    gov = headway.Governor()
    polls = itertools.count(1)

    @beta_tool
    def status(job: str) -> str:
        """Job status."""
        n = next(polls)
        return f"{job}: {'DONE' if n >= 10 else f'RUNNING {n * 10}%'}"

    gov.register("status", None, effect="read", poll=True)
    claude = ScriptedClaude([("status", {"job": "j"})] * 10)
    runner = _run(gov, [status], claude, "b")
    assert stop_of(runner) is None
    assert not any(r.get("is_error") for r in claude.results)


@beta_tool
def search(q: str) -> str:
    """Search."""
    return "no results for that query, try something else entirely"


def test_a_stop_ends_the_run_by_itself_and_until_done_raises_it() -> None:
    """No wiring: the runner makes no request after the stopped call, and until_done()
    raises the headway.Stop."""
    gov = headway.Governor()
    gov.register("search", None, effect="read")
    claude = ScriptedClaude([("search", {"q": f"v{n % 2}"}) for n in range(40)])
    runner = _runner(govern_tools(gov, [search]), claude)
    with pytest.raises(headway.LoopDetected) as stop:
        runner.until_done()
    assert stop.value.diagnostic["terminated_by"] == "no_progress"
    assert stop_of(runner) is stop.value
    assert len(claude.results) < 40
    assert list(runner) == []  # the runner is closed: nothing more is asked


def test_two_runners_of_the_same_tools_share_nothing() -> None:
    """A default session is one run: run B's read is not served from run A's cache, and a
    run after a stopped one runs normally with the same tools."""
    gov = headway.Governor()
    runs: list[str] = []

    @beta_tool
    def company(ticker: str) -> str:
        """Company overview."""
        runs.append(ticker)
        return f"{ticker}: Apple Inc."

    gov.register("company", None, effect="read", deterministic=True)
    gov.register("search", None, effect="read")
    tools = govern_tools(gov, [company, search])
    _runner(tools, ScriptedClaude([("company", {"ticker": "AAPL"})])).until_done()
    _runner(tools, ScriptedClaude([("company", {"ticker": "AAPL"})])).until_done()
    assert runs == ["AAPL", "AAPL"]  # no cache shared across runs
    with pytest.raises(headway.LoopDetected):
        _runner(
            tools, ScriptedClaude([("search", {"q": f"v{n % 2}"}) for n in range(40)])
        ).until_done()
    after = ScriptedClaude([("company", {"ticker": "MSFT"}), ("search", {"q": "v0"})])
    final = _runner(tools, after).until_done()
    assert final.content[0].text == "done"
    assert not any(r.get("is_error") for r in after.results)


async def test_an_async_runner_is_ended_by_a_stop_too() -> None:
    gov = headway.Governor()

    @anthropic.beta_async_tool
    async def lookup(q: str) -> str:
        """Lookup."""
        return "no results for that query, try something else entirely"

    gov.register("lookup", None, effect="read")
    claude = ScriptedClaude([("lookup", {"q": f"v{n % 2}"}) for n in range(40)])
    client = anthropic.AsyncAnthropic(
        api_key="test",
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(_async(claude))),
    )
    runner = client.beta.messages.tool_runner(
        model="claude-test",
        max_tokens=100,
        messages=[{"role": "user", "content": "go"}],
        tools=govern_tools(gov, [lookup]),
        max_iterations=60,
    )
    with pytest.raises(headway.LoopDetected):
        await runner.until_done()
    assert len(claude.results) < 40


def _async(claude: ScriptedClaude) -> Any:
    async def answer(request: httpx.Request) -> httpx.Response:
        return claude(request)

    return answer


def test_a_tool_error_repeated_three_times_gets_the_repeated_error_correction() -> None:
    gov = headway.Governor()

    @beta_tool
    def book(amount: int) -> str:
        """Book."""
        return "Error: payment amount does not add up"

    gov.register("book", None, effect="write")
    claude = ScriptedClaude([("book", {"amount": 5})] * 3)
    _run(gov, [book], claude, "d")
    texts = [json.dumps(r["content"]) for r in claude.results]
    assert all(r.get("is_error") for r in claude.results)
    assert "will fail again" in texts[2]


def test_runs_through_a_shared_store_share_nothing(tmp_path: Any) -> None:
    """Two processes (two governors on one SQLite store) each run the same tools with no
    session named: the second run's read is not served from the first one's, and the first
    run's stop does not stop the second."""
    runs: list[str] = []

    @beta_tool
    def company(ticker: str) -> str:
        """Company overview."""
        runs.append(ticker)
        return f"{ticker}: Apple Inc."

    path = str(tmp_path / "shared.db")
    governors = [headway.Governor(store=headway.SQLiteStore(path)) for _ in range(2)]
    for gov in governors:
        gov.register("company", None, effect="read", deterministic=True)
        gov.register("search", None, effect="read")
    loop = ScriptedClaude([("search", {"q": f"v{n % 2}"}) for n in range(40)])
    stopped = _runner(govern_tools(governors[0], [company, search]), loop)
    with pytest.raises(headway.LoopDetected):
        stopped.until_done()
    for gov in governors:
        claude = ScriptedClaude([("company", {"ticker": "AAPL"})])
        _runner(govern_tools(gov, [company, search]), claude).until_done()
        assert not claude.results[0].get("is_error")
    assert runs == ["AAPL", "AAPL"]
    for gov in governors:
        gov.close()
