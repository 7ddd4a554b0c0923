"""LangChain v1 / LangGraph: headway in ``create_agent``'s real agent loop (and a custom
graph's ToolNode), driven by a scripted fake chat model that emits tool calls."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import itertools
import re
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

import headway
from conftest import IN_CI

if not IN_CI:
    pytest.importorskip("langchain.agents", reason="needs the langchain extra")
    pytest.importorskip("langgraph", reason="needs the langchain extra")

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import StructuredTool, ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph

from headway.integrations.langchain import HeadwayMiddleware, governed_tool_node

MODES = ["sync", "async"]


class ScriptedModel(GenericFakeChatModel):
    """LangChain's own fake chat model, able to be bound to tools (it ignores them)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


def calls(*batches: Iterable[tuple[str, dict[str, Any]]] | tuple[str, dict[str, Any]]) -> Any:
    """The model's turns: each a tool call (or a list of parallel ones), then "done"."""
    ids = itertools.count(1)
    turns = []
    for batch in batches:
        group = [batch] if isinstance(batch, tuple) else list(batch)
        turns.append(
            AIMessage(
                "", tool_calls=[{"name": n, "args": a, "id": f"c{next(ids)}"} for n, a in group]
            )
        )
    return iter([*turns, AIMessage("done")])


def run(agent: Any, mode: str, text: str = "go", config: dict[str, Any] | None = None) -> Any:
    payload = {"messages": [("user", text)]}
    if mode == "sync":
        return agent.invoke(payload, config)
    return asyncio.run(agent.ainvoke(payload, config))


def bare(content: Any) -> str:
    """A served answer without headway's note (the stored content)."""
    return re.sub(r"\n\[headway: [^\]]*\]$", "", str(content))


def tool_messages(result: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


OVERVIEW = "ACME Corp: industrial anvils since 1949; 1,200 employees; HQ in Phoenix, Arizona."


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("declared", ["registered", "mcp_annotations", "mcp_adapters"])
def test_a_deterministic_read_repeated_3_times_runs_once_then_is_corrected(
    mode: str, declared: str
) -> None:
    gov = headway.Governor()
    if declared != "registered":  # annotations make a read; only the operator a cache
        gov.tool_config = {"overview": {"deterministic": True}}
    runs: list[str] = []

    def overview(company: str) -> str:
        """Company overview."""
        runs.append(company)
        return OVERVIEW

    if declared == "registered":
        gov.register("overview", None, effect="read", deterministic=True)
        lc_tool = StructuredTool.from_function(overview)
    elif declared == "mcp_annotations":  # a server's annotations in the tool's metadata
        lc_tool = StructuredTool.from_function(
            overview, metadata={"readOnlyHint": True, "openWorldHint": False, "title": "x"}
        )
    else:  # as langchain-mcp-adapters put them there: the installed mcp's model_dump()
        mcp_types = pytest.importorskip("mcp.types")
        hints = mcp_types.ToolAnnotations(readOnlyHint=True, openWorldHint=False).model_dump()
        lc_tool = StructuredTool.from_function(overview, metadata=hints)
    model = ScriptedModel(messages=calls(*[("overview", {"company": "acme"})] * 3))
    agent = create_agent(model, [lc_tool], middleware=[HeadwayMiddleware(gov)])
    msgs = tool_messages(run(agent, mode))
    assert runs == ["acme"]  # one execution: the second is served, the third corrected
    assert [m.status for m in msgs] == ["success", "success", "error"]
    assert str(msgs[1].content).startswith(OVERVIEW + "\n")  # the stored content, and the note
    assert "stored result of an identical earlier call" in msgs[1].content
    assert "3 times with identical arguments" in str(msgs[2].content)
    assert [m.tool_call_id for m in msgs] == ["c1", "c2", "c3"]


@pytest.mark.parametrize("mode", MODES)
def test_polling_a_changing_status_10_times_is_never_corrected_or_stopped(mode: str) -> None:
    gov = headway.Governor()
    gov.register("job_status", None, effect="read", poll=True)
    states = iter(["RUNNING"] * 9 + ["DONE"])

    @tool
    def job_status(job: str) -> str:
        """Status of a job."""
        return next(states)

    model = ScriptedModel(messages=calls(*[("job_status", {"job": "j1"})] * 10))
    agent = create_agent(model, [job_status], middleware=[HeadwayMiddleware(gov)])
    result = run(agent, mode)
    msgs = tool_messages(result)
    assert [m.content for m in msgs] == ["RUNNING"] * 9 + ["DONE"]  # all ten ran
    assert all(m.status == "success" for m in msgs)
    assert "headway_stop" not in result and result["messages"][-1].content == "done"


def looping_model() -> ScriptedModel:
    """A model that pages through a search forever, getting the same page every time."""
    turns = (
        AIMessage("", tool_calls=[{"name": "search", "args": {"page": n}, "id": f"p{n}"}])
        for n in itertools.count(1)
    )
    return ScriptedModel(messages=turns)


def same_page_tool(gov: headway.Governor, runs: list[int]) -> Any:
    gov.register("search", None, effect="read")

    @tool
    def search(page: int) -> str:
        """Search results."""
        runs.append(page)
        return "Results: the same twenty listings of second-hand anvils, sorted by price."

    return search


@pytest.mark.parametrize("mode", MODES)
def test_a_loop_without_progress_ends_the_run_with_the_diagnostic_in_the_state(mode: str) -> None:
    gov = headway.Governor(no_progress_limit=4)
    runs: list[int] = []
    agent = create_agent(
        looping_model(), [same_page_tool(gov, runs)], middleware=[HeadwayMiddleware(gov)]
    )
    result = run(agent, mode, config={"configurable": {"thread_id": "loop-1"}})
    stop = result["headway_stop"]
    assert stop["terminated_by"] == "no_progress" and stop["limit"] == 4
    assert len(runs) <= 5  # the run ended: the model was not asked again after the stop
    assert isinstance(result["messages"][-1], AIMessage)
    assert "headway stopped this run" in result["messages"][-1].content
    warned = [m for m in tool_messages(result) if "no progress in the last" in str(m.content)]
    assert warned and warned[0].status == "success"  # the half-way warning rode on a result
    assert gov.session("loop-1").stopped  # the session is the thread


@pytest.mark.parametrize("mode", MODES)
def test_on_stop_raise_propagates_a_headway_stop_out_of_invoke(mode: str) -> None:
    gov = headway.Governor(no_progress_limit=4)
    runs: list[int] = []
    agent = create_agent(
        looping_model(),
        [same_page_tool(gov, runs)],
        middleware=[HeadwayMiddleware(gov, on_stop="raise")],
    )
    with pytest.raises(headway.LoopDetected) as caught:
        run(agent, mode, config={"configurable": {"thread_id": "loop-2"}})
    assert caught.value.diagnostic["terminated_by"] == "no_progress"
    assert len(runs) <= 5


@pytest.mark.parametrize("mode", MODES)
def test_a_keyed_write_that_timed_out_and_is_retried_runs_once_and_is_reconciled(
    mode: str,
) -> None:
    ledger: list[int] = []
    done = threading.Event()

    def reconcile(key: str, args: dict[str, Any]) -> str | None:
        return f"charged {args['amount']}" if args["amount"] in ledger else None  # the remote

    gov = headway.Governor()
    gov.register("charge", None, effect="write", timeout=0.05, reconcile=reconcile)

    @tool
    def charge(amount: int) -> str:
        """Charge the card."""
        time.sleep(0.3)  # slower than the timeout: the first attempt's outcome is unknown
        ledger.append(amount)
        done.set()
        return f"charged {amount}"

    # the framework retries the same tool call (same id): it keeps its idempotency key
    first = AIMessage("", tool_calls=[{"name": "charge", "args": {"amount": 5}, "id": "k1"}])
    again = AIMessage("", tool_calls=[{"name": "charge", "args": {"amount": 5}, "id": "k1"}])

    def turns() -> Iterator[AIMessage]:
        yield first
        done.wait(5)  # the model answers after the abandoned attempt has landed
        yield again
        yield AIMessage("done")

    model = ScriptedModel(messages=turns())
    agent = create_agent(model, [charge], middleware=[HeadwayMiddleware(gov)])
    msgs = tool_messages(run(agent, mode, config={"configurable": {"thread_id": "pay-1"}}))
    assert ledger == [5]  # one execution
    assert msgs[0].status == "error" and "unknown" in str(msgs[0].content)
    assert msgs[1].status == "success" and bare(msgs[1].content) == "charged 5"  # reconciled
    statuses = [r["status"] for r in gov.audit_records("pay-1")]
    assert statuses == ["unknown", "replayed"]


@pytest.mark.parametrize("mode", MODES)
def test_a_write_the_model_retries_under_a_new_call_id_after_a_timeout_runs_once(
    mode: str,
) -> None:
    # a real model asks again with a new call id: the retry of a write whose outcome is
    # unknown keeps the first call's key and is reconciled, not run a second time; an
    # identical write after that is a new one and runs
    ledger: list[int] = []
    release, landed = threading.Event(), threading.Event()

    def reconcile(key: str, args: dict[str, Any]) -> str | None:
        return f"transferred {args['cents']}" if args["cents"] in ledger else None

    gov = headway.Governor()
    gov.register("transfer", None, effect="write", timeout=0.5, reconcile=reconcile)

    @tool
    def transfer(cents: int) -> str:
        """Transfer money."""
        if not ledger:
            release.wait(10)  # the first attempt hangs until after its timeout
        ledger.append(cents)
        landed.set()
        return f"transferred {cents}"

    def turns() -> Iterator[AIMessage]:
        for n in (1, 2, 3):
            yield AIMessage(
                "", tool_calls=[{"name": "transfer", "args": {"cents": 1250}, "id": f"t{n}"}]
            )
            release.set()  # the model answers after the first attempt timed out
            landed.wait(10)
        yield AIMessage("done")

    agent = create_agent(
        ScriptedModel(messages=turns()), [transfer], middleware=[HeadwayMiddleware(gov)]
    )
    msgs = tool_messages(run(agent, mode, config={"configurable": {"thread_id": "move-1"}}))
    assert [r["status"] for r in gov.audit_records("move-1")] == ["unknown", "replayed", "executed"]
    assert ledger == [1250, 1250]  # the first call and the third: the retry did not run
    assert [m.status for m in msgs] == ["error", "success", "success"]
    assert bare(msgs[1].content) == "transferred 1250"


@pytest.mark.parametrize("mode", MODES)
def test_an_explicit_key_from_the_request_replays_a_write_under_a_new_call_id(mode: str) -> None:
    gov = headway.Governor()
    sent: list[str] = []

    @tool
    def send_invoice(order: str) -> str:
        """Send an invoice."""
        sent.append(order)
        return f"invoice for {order} sent"

    model = ScriptedModel(messages=calls(*[("send_invoice", {"order": "o-9"})] * 2))
    middleware = HeadwayMiddleware(
        gov, idempotency_key=lambda request: f"invoice:{request.tool_call['args']['order']}"
    )
    agent = create_agent(model, [send_invoice], middleware=[middleware])
    msgs = tool_messages(run(agent, mode))
    assert sent == ["o-9"]
    assert [bare(m.content) for m in msgs] == ["invoice for o-9 sent"] * 2


@dataclasses.dataclass
class PaymentContext:
    payment_key: str


@pytest.mark.parametrize("mode", MODES)
def test_an_explicit_key_from_the_run_context_keeps_a_timed_out_write_to_one_effect(
    mode: str,
) -> None:
    # the caller's key comes with invoke(context=...): the model's retry under a new call id
    # uses it too, so the write that timed out is reconciled, not run again
    ledger: list[int] = []
    landed = threading.Event()
    asked: list[str] = []

    def reconcile(key: str, args: dict[str, Any]) -> str | None:
        asked.append(key)
        return f"paid {args['amount']}" if ledger else None

    gov = headway.Governor()
    gov.register("pay", None, effect="write", timeout=0.05, reconcile=reconcile)

    @tool
    def pay(amount: int) -> str:
        """Pay the supplier."""
        time.sleep(0.3)  # slower than the timeout
        ledger.append(amount)
        landed.set()
        return f"paid {amount}"

    def turns() -> Iterator[AIMessage]:
        yield AIMessage("", tool_calls=[{"name": "pay", "args": {"amount": 40}, "id": "first"}])
        landed.wait(5)
        yield AIMessage("", tool_calls=[{"name": "pay", "args": {"amount": 40}, "id": "again"}])
        yield AIMessage("done")

    middleware = HeadwayMiddleware(
        gov,
        idempotency_key=lambda request: cast("PaymentContext", request.runtime.context).payment_key,
    )
    agent: Any = create_agent(
        ScriptedModel(messages=turns()),
        [pay],
        middleware=[middleware],
        context_schema=PaymentContext,
    )
    payload = {"messages": [("user", "pay the supplier")]}
    config: Any = {"configurable": {"thread_id": "supplier-1"}}
    context = PaymentContext("invoice-2291")
    if mode == "sync":
        result = agent.invoke(payload, config, context=context)
    else:
        result = asyncio.run(agent.ainvoke(payload, config, context=context))
    assert ledger == [40]
    assert [r["status"] for r in gov.audit_records("supplier-1")] == ["unknown", "replayed"]
    assert [r["idempotency_key"] for r in gov.audit_records("supplier-1")] == ["invoice-2291"] * 2
    assert bare(tool_messages(result)[-1].content) == "paid 40"
    assert asked in ([], ["invoice-2291"])  # the late result, or the remote asked by that key


@pytest.mark.parametrize("mode", MODES)
def test_a_framework_error_message_repeated_3_times_gets_the_repeated_error_correction(
    mode: str,
) -> None:
    gov = headway.Governor()
    tries: list[int] = []

    def book(amount: int) -> str:
        """Book a trip."""
        tries.append(amount)
        raise ToolException("payment amount does not add up")

    book_tool = StructuredTool.from_function(book, handle_tool_error=True)
    model = ScriptedModel(messages=calls(*[("book", {"amount": 100})] * 3))
    agent = create_agent(model, [book_tool], middleware=[HeadwayMiddleware(gov)])
    msgs = tool_messages(run(agent, mode, config={"configurable": {"thread_id": "trip-1"}}))
    assert len(tries) == 3  # an undeclared tool is a write: never deduplicated
    assert [m.status for m in msgs] == ["error"] * 3  # LangChain's own error messages
    assert [str(m.content).startswith("payment amount does not add up") for m in msgs] == [True] * 3
    assert ["will fail again" in str(m.content) for m in msgs] == [False, False, True]
    records = gov.audit_records("trip-1")
    assert [r["status"] for r in records] == ["error"] * 3  # never cached


@pytest.mark.parametrize("mode", MODES)
def test_parallel_tool_calls_in_one_turn_are_governed_independently(mode: str) -> None:
    gov = headway.Governor()
    gov.register("overview", None, effect="read", deterministic=True)
    runs: list[str] = []

    @tool
    def overview(company: str) -> str:
        """Company overview."""
        runs.append(company)
        return f"{company}: {OVERVIEW}"

    batch = [("overview", {"company": "acme"})] * 2 + [("overview", {"company": "globex"})]
    model = ScriptedModel(messages=calls(batch))
    agent = create_agent(model, [overview], middleware=[HeadwayMiddleware(gov)])
    msgs = tool_messages(run(agent, mode))
    assert sorted(runs) == ["acme", "globex"]  # the identical pair ran once
    assert [m.tool_call_id for m in msgs] == ["c1", "c2", "c3"]
    assert [m.status for m in msgs] == ["success"] * 3
    assert bare(msgs[0].content) == bare(msgs[1].content) != bare(msgs[2].content)


@pytest.mark.parametrize("mode", MODES)
def test_five_identical_reads_in_one_response_run_once_and_none_is_corrected(mode: str) -> None:
    """A model's parallel batch (§1): LangGraph starts its tool threads one after the other,
    so most of the five begin after the first has finished; none is a repeat of it."""
    gov = headway.Governor()
    gov.register("overview", None, effect="read", deterministic=True)
    runs: list[str] = []

    @tool
    def overview(company: str) -> str:
        """Company overview."""
        runs.append(company)
        return f"{company}: {OVERVIEW}"

    model = ScriptedModel(messages=calls([("overview", {"company": "acme"})] * 5))
    agent = create_agent(model, [overview], middleware=[HeadwayMiddleware(gov)])
    msgs = tool_messages(run(agent, mode))
    assert runs == ["acme"]
    assert [m.status for m in msgs] == ["success"] * 5
    assert len({bare(m.content) for m in msgs}) == 1  # the result itself, no correction


@pytest.mark.parametrize("mode", MODES)
def test_the_session_is_the_thread_and_a_new_human_message_is_a_new_user_turn(mode: str) -> None:
    gov = headway.Governor()
    gov.register("overview", None, effect="read", deterministic=True)

    @tool
    def overview(company: str) -> str:
        """Company overview."""
        return OVERVIEW

    turn = [("overview", {"company": "acme"})] * 2
    script = itertools.chain(calls(*turn), calls(*turn))
    agent = create_agent(
        ScriptedModel(messages=script),
        [overview],
        middleware=[HeadwayMiddleware(gov)],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "chat-7"}}
    run(agent, mode, "first question", config)
    second = run(agent, mode, "second question", config)
    # without the user turn the 3rd and 4th identical reads in a row would be corrected
    assert [m.status for m in tool_messages(second)] == ["success"] * 4
    assert [r["status"] for r in gov.audit_records("chat-7")] == ["executed"] + ["cached"] * 3


@pytest.mark.parametrize("mode", MODES)
def test_a_model_that_reuses_call_ids_for_other_writes_gets_each_write_run(mode: str) -> None:
    # call ids that restart with each run of a thread (or each response): the same id
    # with other arguments is another write, not a reuse of its key (KeyReuseError);
    # the same id with the same arguments is still the same call, replayed
    gov = headway.Governor()
    booked: list[str] = []

    @tool
    def book_room(room: str) -> str:
        """Book a meeting room (undeclared: a write)."""
        booked.append(room)
        return f"booked {room}"

    script = itertools.chain(
        calls(("book_room", {"room": "Ada"})),
        calls(("book_room", {"room": "Turing"})),  # its call id is c1 again
        calls(("book_room", {"room": "Turing"})),  # c1 with the same arguments: replayed
    )
    agent = create_agent(
        ScriptedModel(messages=script),
        [book_room],
        middleware=[HeadwayMiddleware(gov)],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "rooms"}}
    replies = [tool_messages(run(agent, mode, text, config))[-1] for text in ("a", "b", "c")]
    assert booked == ["Ada", "Turing"]
    assert [bare(m.content) for m in replies] == ["booked Ada", "booked Turing", "booked Turing"]
    assert [r["status"] for r in gov.audit_records("rooms")] == ["executed", "executed", "replayed"]


def test_without_a_thread_id_each_invoke_is_its_own_session_named_in_the_state() -> None:
    gov = headway.Governor()

    @tool
    def ping(n: int) -> str:
        """Ping."""
        return "pong"

    agent = create_agent(
        ScriptedModel(
            messages=itertools.chain(calls(("ping", {"n": 1})), calls(("ping", {"n": 1})))
        ),
        [ping],
        middleware=[HeadwayMiddleware(gov)],
    )
    graph: Any = agent  # the graph's overloads do not take the (role, text) shorthand
    first = graph.invoke({"messages": [("user", "a")]})
    second = graph.invoke({"messages": [("user", "b")]})
    assert first["headway_session"] != second["headway_session"]
    assert len(gov.audit_records(first["headway_session"])) == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_custom_graphs_tool_node_is_governed_and_a_stop_is_raised(mode: str) -> None:
    gov = headway.Governor(no_progress_limit=4)
    runs: list[int] = []
    model = looping_model()

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", governed_tool_node(gov, [same_page_tool(gov, runs)]))
    graph.add_edge(START, "model")
    graph.add_edge("model", "tools")
    graph.add_edge("tools", "model")
    app = graph.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "graph-1"}, "recursion_limit": 100}
    with pytest.raises(headway.LoopDetected):
        run(app, mode, config=config)
    assert len(runs) <= 5 and gov.session("graph-1").stopped


@pytest.mark.parametrize("mode", MODES)
def test_a_stop_in_a_tool_node_that_handles_tool_errors_still_ends_the_run(mode: str) -> None:
    # handle_tool_errors=True makes every exception of a tool call wrapper an error message:
    # the stop must get through it (as LangGraph interrupts do), not become a message the
    # model reads while the graph goes on calling it
    from langgraph.errors import GraphBubbleUp
    from langgraph.prebuilt import tools_condition

    gov = headway.Governor(no_progress_limit=3)
    runs: list[int] = []
    asked: list[int] = []

    def turns() -> Iterator[AIMessage]:
        for n in range(1, 20):
            asked.append(n)
            yield AIMessage("", tool_calls=[{"name": "search", "args": {"page": n}, "id": f"q{n}"}])
        yield AIMessage("gave up")

    model = ScriptedModel(messages=turns())

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    node = governed_tool_node(gov, [same_page_tool(gov, runs)], handle_tool_errors=True)
    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", node)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    app = graph.compile(checkpointer=InMemorySaver())
    with pytest.raises(headway.LoopDetected) as caught:
        run(app, mode, config={"configurable": {"thread_id": "graph-errors"}})
    assert caught.value.diagnostic["terminated_by"] == "no_progress"
    assert isinstance(caught.value, GraphBubbleUp)
    assert len(asked) == len(runs) + 1  # the model was not asked again after the stop


def test_a_tool_node_without_a_session_says_how_to_give_one() -> None:
    gov = headway.Governor()
    node = governed_tool_node(gov, [same_page_tool(gov, [])])
    graph = StateGraph(MessagesState)
    graph.add_node("tools", node)
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    call = AIMessage("", tool_calls=[{"name": "search", "args": {"page": 1}, "id": "x"}])
    with pytest.raises(headway.ConfigError, match="thread_id"):
        graph.compile().invoke({"messages": [call]})


def test_on_stop_must_be_end_or_raise() -> None:
    with pytest.raises(headway.ConfigError, match="on_stop"):
        HeadwayMiddleware(headway.Governor(), on_stop="ignore")


def test_the_docs_example_runs_and_prints_what_the_docs_say() -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "integrations.md").read_text("utf-8")
    section = text.split("## LangChain and LangGraph", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    (printed,) = re.findall(r"```text\n(.*?)```", section, re.DOTALL)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/integrations.md", "exec"), {})
    assert out.getvalue() == printed


@pytest.mark.parametrize("mode", MODES)
def test_model_turns_count_against_the_turn_budget_and_a_stopped_thread_stays_ended(
    mode: str,
) -> None:
    gov = headway.Governor()
    gov.register("search", None, effect="read")
    asked: list[int] = []

    def turns() -> Iterator[AIMessage]:
        for n in itertools.count(1):
            asked.append(n)
            yield AIMessage("", tool_calls=[{"name": "search", "args": {"page": n}, "id": f"s{n}"}])

    @tool
    def search(page: int) -> str:
        """Search results."""
        return f"page {page}: new listings of anvils, number {page * 7919} in the catalogue"

    gov.session("budget-1", budgets=headway.Budgets(turns=2))  # budgets: open the session first
    agent = create_agent(
        ScriptedModel(messages=turns()),
        [search],
        middleware=[HeadwayMiddleware(gov)],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "budget-1"}}
    result = run(agent, mode, config=config)
    assert result["headway_stop"]["budget_type"] == "turns"
    assert len(asked) == 2  # the third model call was answered by headway, not the model
    again = run(agent, mode, "try again", config)
    assert len(asked) == 2 and again["headway_stop"]["budget_type"] == "turns"
    assert "headway stopped this run" in again["messages"][-1].content


@pytest.mark.parametrize("mode", MODES)
def test_an_interrupt_inside_a_tool_passes_through_and_the_resumed_call_runs_once(
    mode: str,
) -> None:
    from langgraph.types import Command, interrupt

    gov = headway.Governor()
    refunds: list[int] = []

    @tool
    def refund(amount: int) -> str:
        """Refund a payment, after a human approves."""
        if interrupt(f"refund {amount}?") != "yes":
            return "refund declined"
        refunds.append(amount)
        return f"refunded {amount}"

    agent = create_agent(
        ScriptedModel(messages=calls(("refund", {"amount": 30}))),
        [refund],
        middleware=[HeadwayMiddleware(gov)],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "refund-1"}}
    paused = run(agent, mode, config=config)
    assert paused["__interrupt__"][0].value == "refund 30?" and refunds == []
    resume: Command[Any] = Command(resume="yes")
    graph: Any = agent
    if mode == "sync":
        done = graph.invoke(resume, config)
    else:
        done = asyncio.run(graph.ainvoke(resume, config))
    assert refunds == [30]
    assert tool_messages(done)[-1].content == "refunded 30"


def test_a_registration_after_the_agent_ran_replaces_the_spec_headway_implied() -> None:
    # the first run declared the unknown tool with the safe default (a write); the
    # operator's registration made afterwards wins, without replace=True
    gov = headway.Governor()
    runs: list[str] = []

    @tool
    def rates(currency: str) -> str:
        """Exchange rates."""
        runs.append(currency)
        return "EUR/USD 1.08"

    def agent() -> Any:
        model = ScriptedModel(messages=calls(*[("rates", {"currency": "EUR"})] * 2))
        return create_agent(model, [rates], middleware=[HeadwayMiddleware(gov)])

    run(agent(), "sync")
    assert len(runs) == 2  # an undeclared tool: never served from a cache
    gov.register("rates", None, effect="read", deterministic=True)
    run(agent(), "sync")
    assert len(runs) == 3  # now a deterministic read: once per session
    with pytest.raises(headway.ConfigError, match="replace=True"):
        gov.register("rates", None, effect="write")  # a declaration is not replaced silently


def test_an_explicit_registration_wins_over_the_tools_mcp_annotations() -> None:
    gov = headway.Governor()
    gov.register("lookup", None, effect="write")  # the operator knows better than the server
    runs: list[int] = []

    def lookup(q: str) -> str:
        """Lookup."""
        runs.append(1)
        return OVERVIEW

    lc_tool = StructuredTool.from_function(
        lookup, metadata={"readOnlyHint": True, "openWorldHint": False}
    )
    model = ScriptedModel(messages=calls(*[("lookup", {"q": "a"})] * 2))
    agent = create_agent(model, [lc_tool], middleware=[HeadwayMiddleware(gov)])
    run(agent, "sync")
    assert len(runs) == 2  # a write: never served from a cache
    spec = gov.spec("lookup")
    assert spec is not None and spec.effect == "write"


@pytest.mark.parametrize("mode", MODES)
def test_the_span_and_the_audit_record_of_a_tool_call_carry_its_tool_call_id(mode: str) -> None:
    sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from headway.telemetry import OpenTelemetrySink

    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    audit = headway.MemoryAudit()
    gov = headway.Governor(audit=[audit, OpenTelemetrySink(tracer_provider=provider)])

    @tool
    def lookup(q: str) -> str:
        """Look a word up."""
        return f"{q}: found"

    agent = create_agent(
        ScriptedModel(messages=calls(("lookup", {"q": "a"}), ("lookup", {"q": "b"}))),
        tools=[lookup],
        middleware=[HeadwayMiddleware(gov)],
    )
    run(agent, mode, config={"configurable": {"thread_id": "t-ids"}})
    spans = exporter.get_finished_spans()
    assert [dict(s.attributes or {})["gen_ai.tool.call.id"] for s in spans] == ["c1", "c2"]
    assert [r["call_id"] for r in audit.records("t-ids")] == ["c1", "c2"]


def sessions_opened(gov: headway.Governor) -> list[str]:
    """The run ids ``gov.session`` opens from now on, in order."""
    opened: list[str] = []
    open_session = gov.session

    def session(run_id: str, **options: Any) -> headway.Session:
        opened.append(run_id)
        return open_session(run_id, **options)

    gov.session = session  # type: ignore[method-assign]
    return opened


@tool
def page(n: int) -> str:
    """One page."""
    return f"page {n}"


@pytest.mark.parametrize("mode", MODES)
def test_a_tool_call_uses_the_session_its_model_turn_opened(mode: str, tmp_path: Path) -> None:
    # a session shared through the store is read when a handle opens: once per model turn,
    # not again for each tool call (the call itself reads the record before it runs)
    gov = headway.Governor(headway.SQLiteStore(str(tmp_path / "store.db")))
    gov.register("page", None, effect="read")
    opened = sessions_opened(gov)
    turns = [("page", {"n": 1})], [("page", {"n": 2}), ("page", {"n": 3})], [("page", {"n": 4})]
    agent = create_agent(
        ScriptedModel(messages=calls(*turns)), [page], middleware=[HeadwayMiddleware(gov)]
    )
    result = run(agent, mode, config={"configurable": {"thread_id": "t-open"}})
    assert [m.content for m in tool_messages(result)] == [f"page {n}" for n in range(1, 5)]
    assert opened == ["t-open"] * 4  # three turns with tool calls and the final answer
    assert [r["status"] for r in gov.audit_records("t-open")] == ["executed"] * 4


def test_a_custom_graphs_tool_node_opens_its_session_once() -> None:
    gov = headway.Governor()
    opened = sessions_opened(gov)
    graph = StateGraph(MessagesState)
    graph.add_node("tools", governed_tool_node(gov, [page]))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    compiled = graph.compile()
    config = {"configurable": {"thread_id": "t-node"}}
    for n in range(3):
        turn = AIMessage("", tool_calls=[{"name": "page", "args": {"n": n}, "id": f"c{n}"}])
        compiled.invoke({"messages": [turn]}, config)
    assert opened == ["t-node"]
    assert len(gov.audit_records("t-node")) == 3


def test_the_table_of_open_sessions_keeps_the_most_recent() -> None:
    from headway._recent import Recent

    table: Recent[int] = Recent(limit=3)
    for key in "abcd":
        table.put(key, ord(key))
    table.put("b", 0)  # used again: the most recent
    table.put("e", 1)
    assert list(table) == ["d", "b", "e"] and table["b"] == 0


class Flaky:
    """A weather tool that raises ConnectionError ``fails`` times, then answers."""

    def __init__(self, fails: int) -> None:
        self.fails, self.calls = fails, 0

        def weather(city: str) -> str:
            """Weather."""
            self.calls += 1
            if self.calls <= self.fails:
                raise ConnectionError("weather service unreachable")
            return f"{city}: 18 degrees"

        self.tool = StructuredTool.from_function(weather)


@pytest.mark.parametrize("mode", MODES)
def test_a_tool_raising_a_transient_error_is_retried_by_headway_and_never_crashes_the_run(
    mode: str,
) -> None:
    """HeadwayMiddleware alone (LangChain's default error handling would end invoke() with
    the ConnectionError): headway retries it; when it keeps failing, the model reads
    headway's classified error, retryable, and the run goes on."""
    for fails, expect in ((2, "18 degrees"), (10, "Error from weather [")):
        gov = headway.Governor(sleep=lambda s: None)
        body = Flaky(fails)
        weather = body.tool
        gov.register("weather", None, effect="read", retry=headway.Retry(attempts=3))
        model = ScriptedModel(messages=calls(("weather", {"city": "Paris"})))
        agent = create_agent(model, [weather], middleware=[HeadwayMiddleware(gov)])
        result = run(agent, mode, config={"configurable": {"thread_id": f"w{fails}"}})
        (msg,) = tool_messages(result)
        assert expect in str(msg.content)
        assert body.calls == 3  # headway's retries
        assert result["messages"][-1].content == "done"  # the run went on to its answer
    assert msg.status == "error" and "ConnectionError" in str(msg.content)
    assert "tried it 3 times" in str(msg.content)  # retryable, and what headway already did


@pytest.mark.parametrize("mode", MODES)
def test_an_error_handler_of_the_users_own_keeps_answering_errors(mode: str) -> None:
    """A middleware of the user's inside headway's turns the exception into its own text:
    the model reads that text, not headway's."""
    from langchain.agents.middleware import AgentMiddleware

    class Apologise(AgentMiddleware[Any, Any]):
        def wrap_tool_call(self, request: Any, handler: Any) -> Any:
            try:
                return handler(request)
            except ConnectionError:
                call = request.tool_call
                return ToolMessage("sorry, try later", tool_call_id=call["id"], status="error")

        async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
            try:
                return await handler(request)
            except ConnectionError:
                call = request.tool_call
                return ToolMessage("sorry, try later", tool_call_id=call["id"], status="error")

    gov = headway.Governor(sleep=lambda s: None)
    weather = Flaky(10).tool
    gov.register("weather", None, effect="read")
    model = ScriptedModel(messages=calls(("weather", {"city": "Paris"})))
    agent = create_agent(model, [weather], middleware=[HeadwayMiddleware(gov), Apologise()])
    (msg,) = tool_messages(run(agent, mode, config={"configurable": {"thread_id": "u"}}))
    assert msg.content == "sorry, try later"


@pytest.mark.parametrize("mode", MODES)
def test_a_served_answer_of_a_content_and_artifact_tool_keeps_its_artifact(mode: str) -> None:
    gov = headway.Governor()
    gov.register("rows", None, effect="read", deterministic=True)

    @tool(response_format="content_and_artifact")
    def rows(table: str) -> tuple[str, list[int]]:
        """Rows of a table."""
        return f"3 rows in {table}", [1, 2, 3]

    model = ScriptedModel(messages=calls(*[("rows", {"table": "t"})] * 2))
    agent = create_agent(model, [rows], middleware=[HeadwayMiddleware(gov)])
    msgs = tool_messages(run(agent, mode, config={"configurable": {"thread_id": "a"}}))
    assert [m.artifact for m in msgs] == [[1, 2, 3], [1, 2, 3]]
    assert [r["status"] for r in gov.audit_records("a")] == ["executed", "cached"]
    assert bare(msgs[1].content) == "3 rows in t" and "stored result" in str(msgs[1].content)
