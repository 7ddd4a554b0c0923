"""headway inside the OpenAI Agents SDK's own agent loop, driven by its ScriptedModel."""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import os
import re
import types
from pathlib import Path
from typing import Any

import pytest

try:
    import agents
    import mcp.types as mcp_types
    from agents import Agent, Runner, function_tool
    from agents.exceptions import UserError
    from agents.items import ToolCallOutputItem
    from agents.testing import ScriptedModel, assistant_message, function_call
    from agents.usage import Usage
except ImportError:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        raise
    pytest.skip(
        "the OpenAI Agents SDK is not installed: pip install 'headway[openai-agents]'",
        allow_module_level=True,
    )

import headway
from headway.integrations.openai_agents import (
    BudgetStopped,
    GovernedMCPServer,
    HeadwayStop,
    LoopStopped,
    govern_tools,
)

agents.set_tracing_disabled(True)
_ids = itertools.count()


def turns(*calls: tuple[str, dict[str, Any]], call_ids: list[str] | None = None) -> ScriptedModel:
    """A model that makes one tool call per turn, then answers "done"."""
    ids = call_ids or [f"call-{next(_ids)}" for _ in calls]
    steps: list[Any] = [
        [function_call(name, args, call_id=cid)]
        for (name, args), cid in zip(calls, ids, strict=True)
    ]
    return ScriptedModel([*steps, [assistant_message("done")]])


def outputs(result: Any) -> list[Any]:
    """What the model read back from each tool call (an MCP text result is a text item)."""
    items = [i.output for i in result.new_items if isinstance(i, ToolCallOutputItem)]
    return [_text(o) for o in items]


def _text(output: Any) -> Any:
    """An MCP result's text items, one per line (a served one has headway's note last)."""
    if isinstance(output, list):
        return "\n".join(str(_text(o)) for o in output)
    return output["text"] if isinstance(output, dict) else output


def run(agent: Agent[Any], context: Any = None) -> Any:
    return asyncio.run(Runner.run(agent, "go", context=context, max_turns=30))


def test_a_deterministic_read_repeated_runs_once_then_the_model_reads_a_correction() -> None:
    gov = headway.Governor()
    gov.register("get_company", None, effect="read", deterministic=True)
    ran: list[str] = []

    @function_tool
    def get_company(ticker: str) -> str:
        ran.append(ticker)
        return f"{ticker}: Acme Corp, 120 employees"

    model = turns(*[("get_company", {"ticker": "ACME"})] * 3)
    agent = Agent(name="a", model=model, tools=govern_tools(gov, [get_company]))
    out = outputs(run(agent))
    assert ran == ["ACME"]  # the 2nd came from the cache, the 3rd was not run
    assert out[0] == "ACME: Acme Corp, 120 employees"
    assert "stored result" in out[1]
    assert "3 times with identical arguments" in out[2] and "Acme Corp" in out[2]


def test_polling_a_changing_status_is_never_corrected_or_stopped() -> None:
    gov = headway.Governor()
    gov.register("job_status", None, effect="read", poll=True)
    states = iter(["queued"] * 3 + ["running"] * 6 + ["done"])

    @function_tool
    def job_status(job: str) -> str:
        return f"job {job}: {next(states)}"

    model = turns(*[("job_status", {"job": "j1"})] * 10)
    agent = Agent(name="a", model=model, tools=govern_tools(gov, [job_status]))
    result = run(agent)
    out = outputs(result)
    assert len(out) == 10 and out[-1] == "job j1: done"
    assert all(o.startswith("job j1: ") and "headway" not in o for o in out)
    assert result.final_output == "done"


def test_a_loop_without_progress_ends_the_run_with_a_stop_the_caller_catches() -> None:
    gov = headway.Governor()
    gov.register("search", None, effect="read")
    page = "No results for this query. Try different keywords or a broader search. " * 2
    ran: list[int] = []

    @function_tool
    def search(q: str) -> str:
        ran.append(1)
        return page

    model = turns(*[("search", {"q": f"acme {n}"}) for n in range(15)])
    agent = Agent(name="a", model=model, tools=govern_tools(gov, [search]))
    with pytest.raises(HeadwayStop) as caught:
        run(agent, context={"run_id": "loop-1"})
    assert isinstance(caught.value, headway.LoopDetected) and isinstance(caught.value, LoopStopped)
    assert isinstance(caught.value, agents.exceptions.AgentsException)
    assert caught.value.diagnostic["terminated_by"] == "no_progress"
    assert len(ran) < 15  # the run ended: the rest of the script never ran
    with pytest.raises(headway.LoopDetected):  # the session stays stopped
        gov.session("loop-1").call("search", {"q": "x"}, run=lambda **a: page)


def test_a_keyed_write_retried_after_a_timeout_runs_once_and_is_reconciled() -> None:
    charges: list[int] = []  # the payment provider's side
    asked: list[str] = []

    def reconcile(key: str, args: dict[str, Any]) -> str | None:
        asked.append(key)
        return f"charged {charges[-1]}" if charges else None

    gov = headway.Governor()
    gov.register("charge", None, effect="write", timeout=0.05, reconcile=reconcile)

    @function_tool
    async def charge(amount: int) -> str:
        charges.append(amount)  # the provider acted ...
        if len(charges) == 1:
            await asyncio.sleep(5)  # ... but its answer never came back in time
        return f"charged {amount}"

    # the run is retried (a crash, a resumed run) and replays the same tool call id: a
    # second Runner.run on the same run_id, so the same idempotency key
    tools = govern_tools(gov, [charge])
    out = []
    for _ in range(2):
        model = turns(("charge", {"amount": 30}), call_ids=["c-pay"])
        out += outputs(run(Agent(name="a", model=model, tools=tools), {"run_id": "pay-1"}))
    assert "unknown" in out[0].lower()
    assert out[1].startswith("charged 30") and "already completed" in out[1]
    assert charges == [30]  # one execution
    assert len(asked) == 1  # reconciled once, on the retry


def test_a_timed_out_write_the_model_calls_again_is_reconciled_not_run_again() -> None:
    """The model's retry has a new tool call id, so a new default key: it is still a retry
    of the write whose outcome is unknown (same tool, same arguments), and is reconciled."""
    sent: list[str] = []

    def reconcile(key: str, args: dict[str, Any]) -> str | None:
        return f"wired {args['amount']} to {sent[-1]}" if sent else None

    gov = headway.Governor()
    gov.register("wire", None, effect="write", timeout=0.05, reconcile=reconcile)

    @function_tool
    async def wire(amount: int, iban: str) -> str:
        sent.append(iban)
        if len(sent) == 1:
            await asyncio.sleep(5)  # the bank acted, its answer never came back in time
        return f"wired {amount} to {iban}"

    call = ("wire", {"amount": 990, "iban": "DE89"})
    agent = Agent(name="a", model=turns(call, call), tools=govern_tools(gov, [wire]))
    out = outputs(run(agent, {"run_id": "wire-1"}))
    assert "unknown" in out[0].lower()
    assert out[1].startswith("wired 990 to DE89") and "already completed" in out[1]
    assert sent == ["DE89"]


def test_a_write_keyed_through_the_run_context_is_performed_once_across_runs() -> None:
    """An explicit key (here from the run's context) holds across runs that share no
    run_id and no call id: the retry after a timeout is reconciled, not performed again."""
    refunds: list[int] = []

    def reconcile(key: str, args: dict[str, Any]) -> str | None:
        return f"refunded {refunds[-1]}" if refunds else None

    gov = headway.Governor()
    gov.register("refund", None, effect="write", timeout=0.05, reconcile=reconcile)

    @function_tool
    async def refund(cents: int) -> str:
        refunds.append(cents)
        if len(refunds) == 1:
            await asyncio.sleep(5)  # the refund went through, its answer never came
        return f"refunded {cents}"

    tools = govern_tools(
        gov, [refund], idempotency_key=lambda ctx, args: f"refund-{ctx.context['ticket']}"
    )
    out = []
    for _ in range(2):  # a new Runner.run each time: a new session, a new call id
        model = turns(("refund", {"cents": 1250}))
        out += outputs(run(Agent(name="a", model=model, tools=tools), {"ticket": "T-77"}))
    assert "unknown" in out[0].lower()
    assert out[1].startswith("refunded 1250") and "already completed" in out[1]
    assert refunds == [1250]


def test_a_completed_write_replayed_under_its_call_id_runs_once_a_new_call_id_runs_again() -> None:
    """The default key is the run plus the tool call id: a resumed run that replays a
    completed write's tool call gets the stored result; the same arguments under a new
    call id are a new write (writes are never deduplicated by their arguments)."""
    charges: list[int] = []
    gov = headway.Governor()
    gov.register("charge", None, effect="write")

    @function_tool
    def charge(amount: int) -> str:
        charges.append(amount)
        return f"charged {amount} (#{len(charges)})"

    tools = govern_tools(gov, [charge])
    out = []
    for call_id in ("c-9", "c-9", "c-10"):
        model = turns(("charge", {"amount": 30}), call_ids=[call_id])
        out += outputs(run(Agent(name="a", model=model, tools=tools), {"run_id": "pay-2"}))
    assert charges == [30, 30]  # c-9 once, c-10 once
    assert out[0] == "charged 30 (#1)" and out[1].startswith("charged 30 (#1)")
    assert out[2] == "charged 30 (#2)"


def test_an_error_answered_as_text_three_times_gets_the_repeated_error_correction() -> None:
    gov = headway.Governor()
    gov.register("book", None, effect="write")
    ran: list[int] = []

    @function_tool
    def book(amount: int) -> str:
        ran.append(amount)
        return "Error: payment amount does not add up"

    model = turns(*[("book", {"amount": 100})] * 3)
    agent = Agent(name="a", model=model, tools=govern_tools(gov, [book]))
    out = outputs(run(agent))
    assert len(ran) == 3
    assert all(o.startswith("Error: payment amount does not add up") for o in out)
    assert "headway" not in out[1] and "same approach" in out[2].lower()


def test_parallel_identical_reads_in_one_turn_run_once_and_both_get_the_result() -> None:
    gov = headway.Governor()
    gov.register("get_company", None, effect="read", deterministic=True)
    ran: list[str] = []

    @function_tool
    async def get_company(ticker: str) -> str:
        ran.append(ticker)
        await asyncio.sleep(0.05)
        return f"{ticker}: Acme Corp"

    calls = [function_call("get_company", {"ticker": "ACME"}, call_id=f"p{n}") for n in range(2)]
    model = ScriptedModel([calls, [assistant_message("done")]])
    agent = Agent(name="a", model=model, tools=govern_tools(gov, [get_company]))
    out = outputs(run(agent))
    assert ran == ["ACME"]  # single-flight: the follower waited for the leader's result
    assert [o.split("\n")[0] for o in out] == ["ACME: Acme Corp"] * 2


def test_a_streamed_run_is_governed_too() -> None:
    gov = headway.Governor()
    gov.register("get_company", None, effect="read", deterministic=True)
    ran: list[str] = []

    @function_tool
    def get_company(ticker: str) -> str:
        ran.append(ticker)
        return f"{ticker}: Globex, 900 staff"

    model = turns(*[("get_company", {"ticker": "GLBX"})] * 3)
    agent = Agent(name="a", model=model, tools=govern_tools(gov, [get_company]))

    async def stream() -> Any:
        result = Runner.run_streamed(agent, "go", context={"run_id": "streamed"})
        async for _ in result.stream_events():
            pass
        return result

    assert asyncio.run(stream()).final_output == "done"
    assert ran == ["GLBX"]
    statuses = [r["status"] for r in gov.audit_records("streamed")]
    assert statuses == ["executed", "cached", "corrected"]


@pytest.fixture
def thread_loop() -> Any:
    """Runner.run_sync runs on the thread's default loop and leaves it open: close it."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    loop.close()
    asyncio.set_event_loop(None)


@pytest.mark.usefixtures("thread_loop")
def test_run_sync_works_and_a_new_run_on_the_same_run_id_is_a_new_user_turn() -> None:
    gov = headway.Governor()
    gov.register("get_company", None, effect="read", deterministic=True)

    @function_tool
    def get_company(ticker: str) -> str:
        return f"{ticker}: Acme Corp"

    tools = govern_tools(gov, [get_company])
    first = Runner.run_sync(
        Agent(name="a", model=turns(*[("get_company", {"ticker": "A"})] * 2), tools=tools),
        "go",
        context={"run_id": "chat-1"},
    )
    again = Runner.run_sync(
        Agent(name="a", model=turns(("get_company", {"ticker": "A"})), tools=tools),
        "and again",
        context={"run_id": "chat-1"},
    )
    # without the user turn this would be the 3rd identical call: corrected, not served
    assert "stored result" in outputs(first)[1]
    assert "stored result" in outputs(again)[0]


def test_a_tool_exception_reaches_the_model_as_headways_classified_error() -> None:
    """With the SDK's default formatter the model read "An error occurred while running the
    tool. Please try again." for any error: it reads headway's text instead, which says
    whether retrying helps."""
    gov = headway.Governor()
    gov.register("lookup", None, effect="read", deterministic=True)
    ran: list[int] = []

    @function_tool
    def lookup(q: str) -> str:
        ran.append(1)
        raise RuntimeError("database is down")

    model = turns(*[("lookup", {"q": "a"})] * 3)
    agent = Agent(name="a", model=model, tools=govern_tools(gov, [lookup]))
    out = outputs(run(agent))
    assert len(ran) == 3  # an error is never served from the cache
    assert not any("An error occurred while running the tool" in o for o in out)
    assert all(o.startswith("Error from lookup [") and "database is down" in o for o in out)
    assert "Retrying the same call will not help" in out[0]
    assert "same approach" in out[2].lower()


def test_a_transient_tool_error_is_retried_by_headway_and_the_model_reads_what_was_done() -> None:
    gov = headway.Governor(sleep=lambda s: None)
    gov.register("weather", None, effect="read", retry=headway.Retry(attempts=3))
    ran: list[int] = []

    @function_tool
    def weather(city: str) -> str:
        ran.append(1)
        if len(ran) < 3:
            raise ConnectionError("weather service unreachable")
        return f"{city}: 18 degrees"

    model = turns(("weather", {"city": "Paris"}))
    out = outputs(run(Agent(name="a", model=model, tools=govern_tools(gov, [weather]))))
    assert out == ["Paris: 18 degrees"] and len(ran) == 3  # retried by headway

    @function_tool
    def down(city: str) -> str:
        raise ConnectionError("weather service unreachable")

    gov.register("down", None, effect="read", retry=headway.Retry(attempts=3))
    model = turns(("down", {"city": "Paris"}))
    (text,) = outputs(run(Agent(name="a", model=model, tools=govern_tools(gov, [down]))))
    assert text.startswith("Error from down [") and "ConnectionError" in text
    assert "tried it 3 times" in text


def test_a_failure_function_of_the_users_own_keeps_its_text() -> None:
    gov = headway.Governor()

    def mine(ctx: Any, error: Exception) -> str:
        return f"Error: ours: {error}"

    @function_tool(failure_error_function=mine)
    def lookup(q: str) -> str:
        raise RuntimeError("database is down")

    model = turns(("lookup", {"q": "a"}))
    (text,) = outputs(run(Agent(name="a", model=model, tools=govern_tools(gov, [lookup]))))
    assert text == "Error: ours: database is down"


def test_a_tool_registered_after_the_agent_is_built_and_has_run_gets_its_spec() -> None:
    """govern_tools declares an unregistered tool with the safe default; registering it
    afterwards (after the agent was built, even after it ran) is the operator's choice and
    wins: no ConfigError, and the read is cached from then on."""
    gov = headway.Governor()
    ran: list[str] = []

    @function_tool
    def get_rate(currency: str) -> str:
        ran.append(currency)
        return f"1 {currency} = 1.08 USD"

    tools = govern_tools(gov, [get_rate])
    run(Agent(name="a", model=turns(("get_rate", {"currency": "EUR"})), tools=tools))
    gov.register("get_rate", None, effect="read", deterministic=True)
    model = turns(*[("get_rate", {"currency": "CHF"})] * 4)
    out = outputs(run(Agent(name="a", model=model, tools=tools)))
    assert ran == ["EUR", "CHF"]  # 4 identical calls, one execution
    assert "stored result" in out[1] and "4 times with identical arguments" in out[3]


@pytest.mark.parametrize(
    ("budgets", "usage", "budget_type"),
    [
        (headway.Budgets(turns=3), None, "turns"),
        (headway.Budgets(tokens=100), Usage(requests=1, total_tokens=40), "tokens"),
    ],
    ids=["turns", "tokens"],
)
def test_model_turns_and_their_tokens_count_against_the_budgets(
    budgets: headway.Budgets, usage: Usage | None, budget_type: str
) -> None:
    """Each model request of the run is a model turn with its tokens: the turn that
    reaches the budget (the 3rd: 3 turns, 120 tokens) has its tool calls stopped."""
    gov = headway.Governor()
    gov.session("budget-1", budgets=budgets)
    ran: list[str] = []

    @function_tool
    def fetch(page: int) -> str:
        ran.append(str(page))
        return f"page {page}: {page * 7} new rows"

    model = turns(*[("fetch", {"page": n}) for n in range(8)])
    model.set_default_usage(usage)
    with pytest.raises(BudgetStopped) as caught:
        run(Agent(name="a", model=model, tools=govern_tools(gov, [fetch])), {"run_id": "budget-1"})
    assert caught.value.diagnostic["budget_type"] == budget_type
    assert ran == ["0", "1"]


def test_a_tool_without_a_failure_function_raises_out_of_the_run_as_without_headway() -> None:
    """failure_error_function=None asks the SDK to raise what the tool raises: headway
    records the ERROR and the run still ends with the SDK's UserError."""
    gov = headway.Governor()

    def transfer(amount: int) -> str:
        raise ValueError("account frozen")

    tool = function_tool(transfer, failure_error_function=None)
    agent = Agent(
        name="a", model=turns(("transfer", {"amount": 5})), tools=govern_tools(gov, [tool])
    )
    with pytest.raises(UserError) as caught:
        run(agent, types.SimpleNamespace(run_id="frozen"))  # run_id as an attribute
    assert isinstance(caught.value.__cause__, ValueError)
    assert [r["status"] for r in gov.audit_records("frozen")] == ["error"]


def test_different_writes_in_one_turn_each_run_once_and_runs_are_separate_sessions() -> None:
    gov = headway.Governor()
    gov.register("get_company", None, effect="read", deterministic=True)
    sent: list[str] = []

    @function_tool
    async def notify(user: str) -> str:
        sent.append(user)
        return f"notified {user}"

    @function_tool
    def get_company(ticker: str) -> str:
        return f"{ticker}: Acme Corp"

    tools = govern_tools(gov, [notify, get_company])
    batch = [function_call("notify", {"user": u}, call_id=f"n-{u}") for u in "abcd"]
    model = ScriptedModel([batch, [assistant_message("done")]])
    assert outputs(run(Agent(name="a", model=model, tools=tools))) == [
        f"notified {u}" for u in "abcd"
    ]
    assert sorted(sent) == list("abcd")
    for run_id in ("run-x", "run-y"):  # another run_id: no cache shared
        model = turns(("get_company", {"ticker": "ACME"}))
        run(Agent(name="a", model=model, tools=tools), {"run_id": run_id})
        assert [r["status"] for r in gov.audit_records(run_id)] == ["executed"]


def test_govern_tools_rejects_what_is_not_a_function_tool() -> None:
    with pytest.raises(TypeError, match="FunctionTool"):
        govern_tools(headway.Governor(), [agents.WebSearchTool()])  # type: ignore[list-item]


class FakeMCPServer(agents.mcp.MCPServer):
    """An MCP server in process: a read-only closed-world lookup and a failing write."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.calls: list[tuple[str, Any]] = []

    @property
    def name(self) -> str:
        return "fake"

    async def connect(self) -> None:
        return None

    async def cleanup(self) -> None:
        return None

    async def list_tools(self, run_context: Any = None, agent: Any = None) -> list[Any]:
        schema = {"type": "object", "properties": {"q": {"type": "string"}}}
        ro = mcp_types.ToolAnnotations(readOnlyHint=True, openWorldHint=False)
        return [
            mcp_types.Tool(name="lookup", inputSchema=schema, annotations=ro),
            mcp_types.Tool(name="file_ticket", inputSchema=schema),
            mcp_types.Tool(name="scan", inputSchema=schema),
        ]

    async def call_tool(
        self, tool_name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None = None
    ) -> Any:
        self.calls.append((tool_name, arguments))
        q = (arguments or {}).get("q")
        if tool_name == "file_ticket":
            text, error = "ticket system rejected the request", True
        elif tool_name == "scan":
            text, error = "nothing new on this page, the same listing as before " * 2, False
        else:
            text, error = f"{q}: Acme Corp", False
        return mcp_types.CallToolResult(
            content=[mcp_types.TextContent(type="text", text=text)], isError=error
        )

    async def list_prompts(self) -> Any:
        raise NotImplementedError

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        raise NotImplementedError


def mcp_agent(server: FakeMCPServer, gov: headway.Governor, model: ScriptedModel) -> Agent[Any]:
    return Agent(name="a", model=model, mcp_servers=[GovernedMCPServer(server, gov)])


def test_mcp_annotations_make_a_read_cacheable_and_its_third_repeat_corrected() -> None:
    gov, server = headway.Governor(), FakeMCPServer()
    gov.tool_config = {"lookup": {"deterministic": True}}  # a cache: the operator's word
    out = outputs(run(mcp_agent(server, gov, turns(*[("lookup", {"q": "ACME"})] * 3))))
    assert server.calls == [("lookup", {"q": "ACME"})]
    assert "ACME: Acme Corp" in out[0] and "stored result" in out[1]
    assert "3 times with identical arguments" in out[2]
    spec = gov.spec("lookup")
    assert spec is not None and spec.effect == "read" and spec.deterministic


def test_a_corrected_mcp_call_is_a_failed_call_for_the_sdk_a_cached_one_is_not() -> None:
    """isError as `headway proxy` sets it: a correction (the call did not run) is a failed
    tool call; a result served from the store is a result (what the SDK's custom data
    extractor and its structured-content rule read)."""
    flags: list[bool | None] = []

    def extract(ctx: Any) -> None:
        flags.append(ctx.is_error)

    gov, server = headway.Governor(), FakeMCPServer(custom_data_extractor=extract)
    gov.tool_config = {"lookup": {"deterministic": True}}
    run(mcp_agent(server, gov, turns(*[("lookup", {"q": "ACME"})] * 3)))
    assert len(server.calls) == 1
    assert flags == [False, False, True]  # executed, cached, corrected


def test_an_mcp_is_error_result_repeated_gets_the_repeated_error_correction() -> None:
    gov, server = headway.Governor(), FakeMCPServer()
    model = turns(*[("file_ticket", {"q": "x"})] * 3)
    out = outputs(run(mcp_agent(server, gov, model)))
    assert len(server.calls) == 3  # an undeclared MCP tool is an unkeyed write: it runs
    assert all("ticket system rejected the request" in o for o in out)
    assert "same approach" in out[2].lower() and "same approach" not in out[1].lower()


def test_an_mcp_server_without_a_failure_function_raises_as_without_headway() -> None:
    """failure_error_function=None on the server: what its call_tool raises ends the run
    as it would unwrapped (the SDK's AgentsException), after headway recorded the ERROR."""

    class Down(FakeMCPServer):
        async def call_tool(self, tool_name: str, arguments: Any, meta: Any = None) -> Any:
            raise ConnectionRefusedError("ticket database unreachable")  # nothing sent

    gov, server = headway.Governor(), Down(failure_error_function=None)
    model = turns(("file_ticket", {"q": "printer jam"}))
    with pytest.raises(agents.exceptions.AgentsException) as caught:
        run(mcp_agent(server, gov, model), {"run_id": "down"})
    assert isinstance(caught.value.__cause__, ConnectionError)
    assert [r["status"] for r in gov.audit_records("down")] == ["error"]


def test_a_stop_inside_an_mcp_call_ends_the_run() -> None:
    gov, server = headway.Governor(), FakeMCPServer()
    gov.register("scan", None, effect="read")
    model = turns(*[("scan", {"q": f"page {n}"}) for n in range(15)])
    with pytest.raises(HeadwayStop) as caught:
        run(mcp_agent(server, gov, model))
    assert caught.value.diagnostic["terminated_by"] == "no_progress"
    assert len(server.calls) < 15


@pytest.mark.usefixtures("thread_loop")
def test_the_documented_example_runs() -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "integrations.md").read_text("utf-8")
    section = text.split("## OpenAI Agents SDK", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "docs/integrations.md", "exec"), {})
    assert out.getvalue().splitlines() == ["Light rain in Paris.", "['executed', 'cached']"]


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

    @function_tool
    def lookup(q: str) -> str:
        return f"{q}: found"

    model = turns(("lookup", {"q": "a"}), ("lookup", {"q": "b"}), call_ids=["id-a", "id-b"])
    agent = Agent(name="a", model=model, tools=govern_tools(gov, [lookup]))
    run(agent, {"run_id": "r-ids"})
    spans = exporter.get_finished_spans()
    assert [dict(s.attributes or {})["gen_ai.tool.call.id"] for s in spans] == ["id-a", "id-b"]
    assert [r["call_id"] for r in audit.records("r-ids")] == ["id-a", "id-b"]


def test_a_declared_read_is_called_without_a_key_and_its_audit_has_no_flag() -> None:
    gov = headway.Governor()
    gov.register("lookup", None, effect="read")

    @function_tool
    def lookup(q: str) -> str:
        return f"{q}: found"

    agent = Agent(name="a", model=turns(("lookup", {"q": "a"})), tools=govern_tools(gov, [lookup]))
    run(agent, {"run_id": "r-flags"})
    (record,) = gov.audit_records("r-flags")
    assert record["status"] == "executed" and record["flags"] == []


def test_govern_tools_type_checks_as_an_agents_tools(tmp_path: Path) -> None:
    """``Agent(tools=govern_tools(gov, [tool]))`` passes mypy --strict (the SDK's
    ``list[Tool]`` is invariant: a ``list[FunctionTool]`` did not)."""
    pytest.importorskip("mypy")
    import subprocess
    import sys
    import textwrap

    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        textwrap.dedent(
            """
            from agents import Agent, function_tool

            import headway
            from headway.integrations.openai_agents import govern_tools


            @function_tool
            def lookup(q: str) -> str:
                return q


            agent = Agent(name="a", tools=govern_tools(headway.Governor(), [lookup]))
            """
        ),
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", str(snippet), "--strict", "--no-incremental"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout


def test_a_run_level_error_formatter_of_the_users_own_keeps_its_text() -> None:
    """RunConfig(tool_error_formatter=...) is the user's own error handler too."""
    from agents import RunConfig

    gov = headway.Governor()

    @function_tool
    def lookup(q: str) -> str:
        raise RuntimeError("database is down")

    model = turns(("lookup", {"q": "a"}))
    agent = Agent(name="a", model=model, tools=govern_tools(gov, [lookup]))
    config = RunConfig(tool_error_formatter=lambda args: f"ours: {args.error}")
    result = asyncio.run(Runner.run(agent, "go", run_config=config, max_turns=5))
    (text,) = outputs(result)
    assert text.endswith("ours: database is down") and "Error from lookup" not in text


def test_malformed_arguments_are_still_reported_the_sdks_way() -> None:
    gov = headway.Governor()

    @function_tool
    def lookup(q: str) -> str:
        return q

    model = ScriptedModel(
        [[function_call("lookup", "{not json", call_id="m1")], [assistant_message("done")]]
    )
    agent = Agent(name="a", model=model, tools=govern_tools(gov, [lookup]))
    (text,) = outputs(run(agent))
    assert "error" in str(text).lower()
