"""headway inside Pydantic AI's own agent loop, driven by its FunctionModel."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import io
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

try:
    from pydantic_ai import (
        Agent,
        ApprovalRequired,
        CallDeferred,
        DeferredToolRequests,
        DeferredToolResults,
        ModelRetry,
        RunContext,
    )
    from pydantic_ai.exceptions import AgentRunError
    from pydantic_ai.messages import (
        ModelMessage,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
    from pydantic_ai.usage import RequestUsage
except ImportError:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        raise
    pytest.skip(
        "Pydantic AI is not installed: pip install 'headway[pydantic-ai]'", allow_module_level=True
    )


import headway
from headway.integrations.pydantic_ai import (
    BudgetStopped,
    HeadwayCapability,
    HeadwayStop,
    LoopStopped,
)


@pytest.fixture(autouse=True)
def thread_loop(request: pytest.FixtureRequest) -> Any:
    """run_sync runs on the thread's default event loop and leaves it open: close it."""
    if inspect.iscoroutinefunction(request.function):
        yield None  # pytest-asyncio owns the loop
        return
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    loop.close()
    asyncio.set_event_loop(None)


def scripted(
    *turns: list[tuple[str, dict[str, Any]]], usage: RequestUsage | None = None
) -> FunctionModel:
    """A model that makes the given tool calls, one model turn each, then answers "done"
    (streamed too: one delta per tool call)."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        if n >= len(turns):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(
            parts=[
                ToolCallPart(name, args, tool_call_id=f"t{n}-{i}")
                for i, (name, args) in enumerate(turns[n])
            ],
            usage=usage or RequestUsage(),
        )

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> Any:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        if n >= len(turns):
            yield "done"
            return
        for i, (name, args) in enumerate(turns[n]):
            yield {i: DeltaToolCall(name, json.dumps(args), tool_call_id=f"t{n}-{i}")}

    return FunctionModel(respond, stream_function=stream)


def returns(result: Any) -> list[ToolReturnPart]:
    """The tool results the model read, in order."""
    return [p for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]


def test_a_deterministic_read_repeated_runs_once_then_the_model_gets_a_retry_prompt() -> None:
    gov = headway.Governor()
    gov.register("get_company", None, effect="read", deterministic=True)
    agent = Agent(
        scripted(*[[("get_company", {"ticker": "ACME"})]] * 3),
        capabilities=[HeadwayCapability(gov)],
    )
    ran: list[str] = []

    @agent.tool_plain
    def get_company(ticker: str) -> str:
        ran.append(ticker)
        return f"{ticker}: Acme Corp, 120 employees"

    parts = returns(agent.run_sync("go"))
    assert ran == ["ACME"]
    assert [p.outcome for p in parts] == ["success", "success", "retried"]
    assert "stored result" in parts[1].model_response_str()
    assert "3 times with identical arguments" in parts[2].model_response_str()


def test_polling_a_changing_status_is_never_corrected_or_stopped() -> None:
    gov = headway.Governor()
    gov.register("job_status", None, effect="read", poll=True)
    agent = Agent(
        scripted(*[[("job_status", {"job": "j1"})]] * 10), capabilities=[HeadwayCapability(gov)]
    )
    states = iter(["queued"] * 3 + ["running"] * 6 + ["done"])

    @agent.tool_plain
    def job_status(job: str) -> str:
        return f"job {job}: {next(states)}"

    result = agent.run_sync("go")
    parts = returns(result)
    assert [p.outcome for p in parts] == ["success"] * 10
    assert all("headway" not in p.model_response_str() for p in parts)
    assert parts[-1].content == "job j1: done" and result.output == "done"


def test_a_loop_without_progress_ends_the_run_with_a_stop_the_caller_catches() -> None:
    gov = headway.Governor()
    gov.register("search", None, effect="read")
    agent = Agent(
        scripted(*[[("search", {"q": f"acme {n}"})] for n in range(15)]),
        capabilities=[HeadwayCapability(gov)],
    )
    page = "No results for this query. Try different keywords or a broader search. " * 2
    ran: list[int] = []

    @agent.tool_plain
    def search(q: str) -> str:
        ran.append(1)
        return page

    with pytest.raises(HeadwayStop) as caught:
        agent.run_sync("go", conversation_id="loop-1")
    assert isinstance(caught.value, LoopStopped) and isinstance(caught.value, headway.LoopDetected)
    assert isinstance(caught.value, AgentRunError)
    assert caught.value.diagnostic["terminated_by"] == "no_progress"
    assert len(ran) < 15
    with pytest.raises(headway.LoopDetected):  # the conversation's session stays stopped
        gov.session("loop-1").call("search", {"q": "x"}, run=lambda **a: page)


def test_a_keyed_write_retried_after_a_timeout_runs_once_and_is_reconciled() -> None:
    charges: list[int] = []
    asked: list[str] = []

    def reconcile(key: str, args: dict[str, Any]) -> str | None:
        asked.append(key)
        return f"charged {charges[-1]}" if charges else None

    gov = headway.Governor()
    gov.register("charge", None, effect="write", timeout=0.05, reconcile=reconcile)
    calls = [("charge", {"amount": 30})]
    agent = Agent(scripted(calls), capabilities=[HeadwayCapability(gov)])

    @agent.tool_plain
    async def charge(amount: int) -> str:
        charges.append(amount)  # the provider acted ...
        if len(charges) == 1:
            await asyncio.sleep(5)  # ... but its answer never came back in time
        return f"charged {amount}"

    # the run is retried (a crash, a durable engine re-executing it) and replays the same
    # tool call id in the same conversation: the same idempotency key
    parts = [p for _ in range(2) for p in returns(agent.run_sync("go", conversation_id="pay-1"))]
    assert "unknown" in str(parts[0].content).lower()
    assert str(parts[-1].content).startswith("charged 30")
    assert "already completed" in str(parts[-1].content)
    assert charges == [30]  # one execution
    assert len(asked) == 1


def test_a_completed_write_replayed_under_its_call_id_runs_once_a_new_call_id_runs_again() -> None:
    """The default key is the conversation plus the tool call id: a run re-executed with a
    completed write's tool call gets the stored result; the same arguments under a new call
    id are a new write (writes are never deduplicated by their arguments)."""
    charges: list[int] = []
    call_ids = iter(["p-9", "p-9", "p-10"])  # one per run
    current: list[str] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=[TextPart("done")])
        current.append(next(call_ids))
        return ModelResponse(parts=[ToolCallPart("charge", {"amount": 30}, current[-1])])

    gov = headway.Governor()
    gov.register("charge", None, effect="write")
    agent = Agent(FunctionModel(respond), capabilities=[HeadwayCapability(gov)])

    @agent.tool_plain
    def charge(amount: int) -> str:
        charges.append(amount)
        return f"charged {amount} (#{len(charges)})"

    texts = [
        str(p.content) for _ in range(3) for p in returns(agent.run_sync("go", conversation_id="c"))
    ]
    assert current == ["p-9", "p-9", "p-10"]
    assert charges == [30, 30]  # p-9 once, p-10 once
    assert texts[0] == "charged 30 (#1)" and texts[1].startswith("charged 30 (#1)")
    assert texts[2] == "charged 30 (#2)"


def test_a_new_run_in_a_stopped_conversation_ends_before_the_model_is_asked() -> None:
    gov = headway.Governor()
    gov.session("stuck", budgets=headway.Budgets(tool_calls=2))
    asked: list[int] = []
    model = scripted(*[[("ping", {"n": n})] for n in range(5)])
    inner = model.function
    assert inner is not None

    def counting(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked.append(1)
        return inner(messages, info)  # type: ignore[return-value]

    model.function = counting
    agent = Agent(model, capabilities=[HeadwayCapability(gov)])
    agent.tool_plain(lambda n: f"pong {n}", name="ping")
    with pytest.raises(BudgetStopped):
        agent.run_sync("go", conversation_id="stuck")
    before = len(asked)
    with pytest.raises(BudgetStopped) as caught:
        agent.run_sync("try again", conversation_id="stuck")
    assert len(asked) == before  # no model request for a stopped conversation
    assert caught.value.diagnostic["budget_type"] == "total_tool_calls"


@pytest.mark.parametrize(
    ("budgets", "budget_type"),
    [(headway.Budgets(turns=3), "turns"), (headway.Budgets(tokens=100), "tokens")],
    ids=["turns", "tokens"],
)
def test_model_turns_and_their_tokens_count_against_the_budgets(
    budgets: headway.Budgets, budget_type: str
) -> None:
    """Each model response is a model turn with its tokens: the turn that reaches the
    budget (the 3rd: 3 turns, 120 tokens) has its tool calls stopped."""
    gov = headway.Governor()
    gov.session("budget-1", budgets=budgets)
    usage = RequestUsage(input_tokens=30, output_tokens=10)
    agent = Agent(
        scripted(*[[("fetch", {"page": n})] for n in range(8)], usage=usage),
        capabilities=[HeadwayCapability(gov)],
    )
    ran: list[int] = []

    @agent.tool_plain
    def fetch(page: int) -> str:
        ran.append(page)
        return f"page {page}: {page * 7} new rows"

    with pytest.raises(BudgetStopped) as caught:
        agent.run_sync("go", conversation_id="budget-1")
    assert caught.value.diagnostic["budget_type"] == budget_type
    assert ran == [0, 1]


def test_a_timed_out_write_the_model_calls_again_is_reconciled_not_run_again() -> None:
    """The model's retry has a new tool call id, so a new default key: it is still a retry
    of the write whose outcome is unknown (same tool, same arguments), and is reconciled."""
    sent: list[str] = []

    def reconcile(key: str, args: dict[str, Any]) -> str | None:
        return f"wired {args['amount']} to {sent[-1]}" if sent else None

    gov = headway.Governor()
    gov.register("wire", None, effect="write", timeout=0.05, reconcile=reconcile)
    call = [("wire", {"amount": 990, "iban": "DE89"})]
    agent = Agent(scripted(call, call), capabilities=[HeadwayCapability(gov)])

    @agent.tool_plain
    async def wire(amount: int, iban: str) -> str:
        sent.append(iban)
        if len(sent) == 1:
            await asyncio.sleep(5)  # the bank acted, its answer never came back in time
        return f"wired {amount} to {iban}"

    parts = returns(agent.run_sync("go", conversation_id="wire-1"))
    assert "unknown" in str(parts[0].content).lower()
    assert str(parts[1].content).startswith("wired 990 to DE89")
    assert "already completed" in str(parts[1].content)
    assert sent == ["DE89"]


def test_a_write_keyed_through_the_run_deps_is_performed_once_across_runs() -> None:
    """An explicit key (here from the run's deps) holds across conversations and call ids:
    the retry after a timeout is reconciled, not performed again."""
    refunds: list[int] = []

    def reconcile(key: str, args: dict[str, Any]) -> str | None:
        return f"refunded {refunds[-1]}" if refunds else None

    gov = headway.Governor()
    gov.register("refund", None, effect="write", timeout=0.05, reconcile=reconcile)
    cap = HeadwayCapability(gov, idempotency_key=lambda ctx, args: f"refund-{ctx.deps}")
    agent = Agent(scripted([("refund", {"cents": 1250})]), deps_type=str, capabilities=[cap])

    @agent.tool
    async def refund(ctx: RunContext[str], cents: int) -> str:
        refunds.append(cents)
        if len(refunds) == 1:
            await asyncio.sleep(5)  # the refund went through, its answer never came
        return f"refunded {cents}"

    first, second = (returns(agent.run_sync("go", deps="T-77"))[0] for _ in range(2))
    assert "unknown" in str(first.content).lower()
    assert str(second.content).startswith("refunded 1250")
    assert "already completed" in str(second.content)
    assert refunds == [1250]


async def test_tools_run_by_iter_and_run_stream_are_governed_too() -> None:
    gov = headway.Governor()
    gov.register("get_order", None, effect="read", deterministic=True)
    agent = Agent(
        scripted(*[[("get_order", {"order": 7})]] * 3),
        deps_type=str,
        capabilities=[HeadwayCapability(gov)],
    )
    ran: list[str] = []

    @agent.tool
    def get_order(ctx: RunContext[str], order: int) -> str:
        ran.append(ctx.deps)
        return f"order {order}: shipped"

    async with agent.iter("go", deps="iter", conversation_id="by-iter") as run:
        async for _ in run:
            pass
    async with agent.run_stream("go", deps="stream", conversation_id="by-stream") as stream:
        assert await stream.get_output() == "done"
    assert ran == ["iter", "stream"]
    for conversation in ("by-iter", "by-stream"):
        statuses = [r["status"] for r in gov.audit_records(conversation)]
        assert statuses == ["executed", "cached", "corrected"]


def test_a_model_retry_repeated_three_times_gets_the_repeated_error_correction() -> None:
    gov = headway.Governor()
    gov.register("book", None, effect="write")
    agent = Agent(
        scripted(*[[("book", {"amount": 100})]] * 3), capabilities=[HeadwayCapability(gov)]
    )
    ran: list[int] = []

    @agent.tool_plain(retries=5)
    def book(amount: int) -> str:
        ran.append(amount)
        raise ModelRetry("payment amount does not add up")

    parts = returns(agent.run_sync("go"))
    assert len(ran) == 3
    assert [p.outcome for p in parts] == ["retried"] * 3  # still the framework's retry prompts
    texts = [p.model_response_str() for p in parts]
    assert all("payment amount does not add up" in t for t in texts)
    assert "same approach" not in texts[1].lower() and "same approach" in texts[2].lower()


def test_a_correction_never_exhausts_the_tools_retries_and_crashes_the_run() -> None:
    gov = headway.Governor()
    gov.register("get_company", None, effect="read", deterministic=True)
    agent = Agent(
        scripted(*[[("get_company", {"ticker": "ACME"})]] * 5),
        capabilities=[HeadwayCapability(gov)],
    )

    @agent.tool_plain  # the default: one retry
    def get_company(ticker: str) -> str:
        return f"{ticker}: Acme Corp"

    result = agent.run_sync("go")
    outcomes = [p.outcome for p in returns(result)]
    assert outcomes[2] == "retried" and outcomes[3:] == ["failed", "failed"]
    assert result.output == "done"


async def test_parallel_identical_reads_in_one_turn_run_once_and_both_get_the_result() -> None:
    gov = headway.Governor()
    gov.register("get_company", None, effect="read", deterministic=True)
    agent = Agent(
        scripted([("get_company", {"ticker": "ACME"})] * 2), capabilities=[HeadwayCapability(gov)]
    )
    ran: list[str] = []

    @agent.tool_plain
    async def get_company(ticker: str) -> str:
        ran.append(ticker)
        await asyncio.sleep(0.05)
        return f"{ticker}: Acme Corp"

    parts = returns(await agent.run("go"))
    assert ran == ["ACME"]
    assert [str(p.content).split("\n")[0] for p in parts] == ["ACME: Acme Corp"] * 2


def test_a_new_run_in_the_same_conversation_is_a_new_user_turn() -> None:
    gov = headway.Governor()
    gov.register("get_company", None, effect="read", deterministic=True)
    cap = HeadwayCapability(gov)
    twice = Agent(scripted(*[[("get_company", {"ticker": "A"})]] * 2), capabilities=[cap])
    once = Agent(scripted([("get_company", {"ticker": "A"})]), capabilities=[cap])
    for agent in (twice, once):
        agent.tool_plain(lambda ticker: f"{ticker}: Acme Corp", name="get_company")
    twice.run_sync("go", conversation_id="chat-1")
    again = returns(once.run_sync("and again", conversation_id="chat-1"))
    # without the user turn this would be the 3rd identical call: corrected, not served
    assert again[0].outcome == "success" and "stored result" in str(again[0].content)
    # another conversation, or none (a fresh id per run), shares nothing with this one
    for conversation in ("chat-2", None):
        first = returns(once.run_sync("go", conversation_id=conversation))
        assert first[0].content == "A: Acme Corp"  # executed: no cache shared


def test_a_tool_registered_after_the_agent_has_run_gets_its_spec() -> None:
    """The capability declares an unregistered tool with the safe default at its first
    call; registering it afterwards is the operator's choice and wins: no ConfigError, and
    the read is cached from then on."""
    gov = headway.Governor()
    cap = HeadwayCapability(gov)
    ran: list[str] = []

    def get_rate(currency: str) -> str:
        ran.append(currency)
        return f"1 {currency} = 1.08 USD"

    first = Agent(scripted([("get_rate", {"currency": "EUR"})]), capabilities=[cap])
    first.tool_plain(get_rate)
    first.run_sync("go")
    gov.register("get_rate", None, effect="read", deterministic=True)
    again = Agent(scripted(*[[("get_rate", {"currency": "CHF"})]] * 4), capabilities=[cap])
    again.tool_plain(get_rate, retries=3)
    parts = returns(again.run_sync("go"))
    assert ran == ["EUR", "CHF"]  # 4 identical calls, one execution
    assert [p.outcome for p in parts] == ["success", "success", "retried", "retried"]


def test_a_tool_that_defers_its_call_still_defers_it_and_runs_once_approved() -> None:
    """ApprovalRequired / CallDeferred raised by a tool are Pydantic AI's control flow,
    not failures: the run ends with DeferredToolRequests as without headway, and the
    approved write then runs once under its call id."""
    gov = headway.Governor()
    gov.register("delete_branch", None, effect="write")
    agent = Agent(
        scripted([("delete_branch", {"name": "old-ui"}), ("export", {"fmt": "csv"})]),
        output_type=[str, DeferredToolRequests],
        capabilities=[HeadwayCapability(gov)],
    )
    deleted: list[str] = []

    @agent.tool
    def delete_branch(ctx: RunContext[None], name: str) -> str:
        if not ctx.tool_call_approved:
            raise ApprovalRequired()
        deleted.append(name)
        return f"deleted {name}"

    @agent.tool_plain
    def export(fmt: str) -> str:
        raise CallDeferred()  # run elsewhere, its result comes back later

    first = agent.run_sync("go", conversation_id="review-1")
    assert isinstance(first.output, DeferredToolRequests)
    assert [c.tool_name for c in first.output.approvals] == ["delete_branch"]
    assert [c.tool_name for c in first.output.calls] == ["export"]
    assert deleted == []
    results = DeferredToolResults(
        approvals={first.output.approvals[0].tool_call_id: True},
        calls={first.output.calls[0].tool_call_id: "exported 12 rows"},
    )
    second = agent.run_sync(message_history=first.all_messages(), deferred_tool_results=results)
    assert second.output == "done" and deleted == ["old-ui"]


def test_an_exception_a_tool_raises_is_a_failed_result_the_model_reads() -> None:
    gov = headway.Governor()
    gov.register("lookup", None, effect="read")
    agent = Agent(scripted([("lookup", {"q": "a"})]), capabilities=[HeadwayCapability(gov)])

    @agent.tool_plain
    def lookup(q: str) -> str:
        raise RuntimeError("database is down")

    parts = returns(agent.run_sync("go"))
    assert parts[0].outcome == "failed" and "database is down" in parts[0].model_response_str()


def test_an_mcp_toolsets_annotations_make_specs_and_its_errors_are_errors() -> None:
    """Tools of an MCP server (FastMCP in process, through Pydantic AI's MCPToolset): a
    read-only closed-world tool is cached and corrected on its 3rd repeat; a tool the
    server reports as failed (isError) is an ERROR, never cached, and its 3rd identical
    failure carries the repeated-error correction."""
    pytest.importorskip("fastmcp")
    from fastmcp import FastMCP
    from mcp.types import ToolAnnotations
    from pydantic_ai.mcp import MCPToolset

    server = FastMCP("inventory")
    ran: list[str] = []

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False))
    def sku(code: str) -> str:
        ran.append(code)
        return f"{code}: blue mug, 330 ml"

    @server.tool
    def restock(code: str) -> str:
        ran.append("restock")
        raise ValueError("warehouse offline")

    gov = headway.Governor()
    gov.tool_config = {"sku": {"deterministic": True}}  # annotations never make a cache
    calls = [[("sku", {"code": "M-330"})]] * 3 + [[("restock", {"code": "M-330"})]] * 3
    agent = Agent(
        scripted(*calls),
        toolsets=[MCPToolset(server, max_retries=5)],
        capabilities=[HeadwayCapability(gov)],
    )
    parts = returns(agent.run_sync("go", conversation_id="mcp-1"))
    assert ran == ["M-330", "restock", "restock", "restock"]
    statuses = [r["status"] for r in gov.audit_records("mcp-1")]
    assert statuses == ["executed", "cached", "corrected", "error", "error", "error"]
    texts = [p.model_response_str() for p in parts]
    assert "warehouse offline" in texts[5] and "same approach" in texts[5].lower()
    assert "same approach" not in texts[4].lower()


def test_the_documented_example_runs() -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "integrations.md").read_text("utf-8")
    section = text.split("## Pydantic AI", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "docs/integrations.md", "exec"), {})
    assert out.getvalue().splitlines() == [
        "Order 7 has shipped.",
        "['executed', 'cached', 'corrected']",
    ]


def test_the_span_and_the_audit_record_of_a_tool_call_carry_its_tool_call_id() -> None:
    sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from headway.telemetry import OpenTelemetrySink

    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    audit = headway.MemoryAudit()
    gov = headway.Governor(audit=[audit, OpenTelemetrySink(tracer_provider=provider)])
    gov.register("lookup", None, effect="read")
    agent = Agent(
        scripted([("lookup", {"q": "a"})], [("lookup", {"q": "b"})]),
        capabilities=[HeadwayCapability(gov)],
    )

    @agent.tool_plain
    def lookup(q: str) -> str:
        return f"{q}: found"

    agent.run_sync("go", conversation_id="conv-ids")
    spans = exporter.get_finished_spans()
    assert [dict(s.attributes or {})["gen_ai.tool.call.id"] for s in spans] == ["t0-0", "t1-0"]
    assert [r["call_id"] for r in audit.records("conv-ids")] == ["t0-0", "t1-0"]


def test_a_declared_read_is_called_without_a_key_and_its_audit_has_no_flag() -> None:
    gov = headway.Governor()
    gov.register("lookup", None, effect="read")
    agent = Agent(scripted([("lookup", {"q": "a"})]), capabilities=[HeadwayCapability(gov)])

    @agent.tool_plain
    def lookup(q: str) -> str:
        return f"{q}: found"

    agent.run_sync("go", conversation_id="conv-flags")
    (record,) = gov.audit_records("conv-flags")
    assert record["status"] == "executed" and record["flags"] == []


def test_a_served_dict_stays_a_dict_and_served_text_carries_the_note() -> None:
    """One rule for served answers: a value that is not text keeps its type (Pydantic AI
    passes objects to the model its own way); text gets headway's stored-result note."""
    gov = headway.Governor()
    gov.register("get_order", None, effect="read", deterministic=True)
    gov.register("get_note", None, effect="read", deterministic=True)
    twice = [[("get_order", {"n": 7}), ("get_note", {"n": 7})]] * 2
    agent = Agent(scripted(*twice), capabilities=[HeadwayCapability(gov)])

    @agent.tool_plain
    def get_order(n: int) -> dict[str, Any]:
        return {"order": n, "status": "shipped"}

    @agent.tool_plain
    def get_note(n: int) -> str:
        return f"order {n}: shipped"

    parts = returns(agent.run_sync("go"))
    orders = [p.content for p in parts if p.tool_name == "get_order"]
    notes = [str(p.content) for p in parts if p.tool_name == "get_note"]
    assert orders == [{"order": 7, "status": "shipped"}] * 2
    assert notes[0] == "order 7: shipped"
    assert notes[1].startswith("order 7: shipped\n") and "stored result" in notes[1]
