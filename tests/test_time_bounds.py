"""Calls return within their time bounds whatever the tool or its reconcile does
(semantics §7; issue 31 items 8 and 10).

An async tool that catches the cancellation of its timeout and keeps running is closed
once a short grace has passed (``_tool_runs.CANCEL_GRACE_S``): ``acall`` returns, a write
is UNKNOWN and reconciled at its next use. A reconcile has a timeout of its own inside
the call's deadline: a hanging one leaves the write UNKNOWN and runs nothing.

Nothing here measures speed: a call that would hang is caught by a generous bound
(``_returns``) and fails the test instead of hanging the run."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

import headway
from conftest import err, present
from headway import Status
from headway.testing import FakeClock, ScriptedTool

BOUND_S = 20.0  # far past any timeout below: reaching it means the call hung


def _returns(call: Callable[[], Any]) -> Any:
    """``call()`` in a thread; fails the test if it has not returned within BOUND_S."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(call()), daemon=True)
    t.start()
    t.join(BOUND_S)
    assert not t.is_alive(), "the call did not return within its bounds"
    return out[0]


async def _areturns(call: Coroutine[Any, Any, Any]) -> Any:
    task = asyncio.ensure_future(call)
    done, _ = await asyncio.wait({task}, timeout=BOUND_S)
    assert task in done, "acall did not return within its bounds"
    return task.result()


# -- item 8: an async tool that swallows its cancellation ---------------------------------


class Stubborn:
    """An async tool that catches the cancellation of its timeout (once, or every time)
    and goes on waiting; if it ever gets past that, it charges (its effect)."""

    def __init__(self, forever: bool = False) -> None:
        self.forever = forever
        self.go_on = asyncio.Event()
        self.swallowed = 0
        self.closed = False
        self.charged: list[str] = []

    async def __call__(self, order: str) -> dict[str, Any]:
        try:
            while True:
                try:
                    await self.go_on.wait()
                    break
                except asyncio.CancelledError:
                    self.swallowed += 1
                    if not self.forever:
                        await self.go_on.wait()  # keeps running past its timeout
                        break
        except GeneratorExit:
            self.closed = True
            raise
        self.charged.append(order)
        return {"order": order, "charge": len(self.charged)}


async def test_acall_returns_at_the_timeout_of_a_read_that_swallows_its_cancellation() -> None:
    """It ran on past its grace: it is closed where it waits (never resumed, here or in
    another task), and the call is the timeout it is."""
    tool = Stubborn()
    gov = headway.Governor()
    gov.register("look", tool.__call__, effect="read", timeout=0.1, retry=headway.Retry(attempts=1))
    out = await _areturns(gov.session("r").acall("look", {"order": "x"}))
    assert out.status is Status.ERROR and err(out)["code"] == "timeout"
    assert tool.swallowed == 1 and tool.closed
    tool.go_on.set()
    await asyncio.sleep(0.05)
    assert tool.charged == []  # it never runs again


async def test_a_keyed_write_that_swallows_its_cancellation_is_unknown_and_reconciled(
    store: headway.Store,
) -> None:
    """UNKNOWN at its timeout (plus the grace), the key UNKNOWN, not held in progress;
    its next use reconciles (absent: it never acted) and runs it once."""
    tool = Stubborn()
    gov = headway.Governor(store=store)
    gov.register(
        "pay", tool.__call__, effect="write", timeout=0.1,
        reconcile=lambda key, args: None if not tool.charged else tool.charged,
    )  # fmt: skip
    first = await _areturns(gov.session("r").acall("pay", {"order": "o"}, idempotency_key="k"))
    assert first.status is Status.UNKNOWN and first.attempts == 1 and tool.closed
    rkey = gov.idempotency_record_key("k")
    assert present(store.get(rkey))["state"] == "unknown"
    assert gov.writes.keeper.get(rkey) is None
    tool.go_on.set()
    again = await gov.session("r2").acall("pay", {"order": "o"}, idempotency_key="k")
    assert again.status is Status.EXECUTED and tool.charged == ["o"]


async def test_an_unkeyed_write_that_swallows_its_cancellation_is_unknown() -> None:
    tool = Stubborn()
    gov = headway.Governor()
    gov.register("pay", tool.__call__, effect="write", timeout=0.1)
    s = gov.session("r")
    first = await _areturns(s.acall("pay", {"order": "o"}))
    assert first.status is Status.UNKNOWN and "Retrying may help" not in first.to_model()
    tool.go_on.set()
    again = await s.acall("pay", {"order": "o"})  # a retry of it: no reconcile, so it waits
    assert again.status is Status.UNKNOWN and tool.charged == []


def test_a_tool_swallowing_every_cancellation_never_keeps_its_event_loop_from_closing() -> None:
    tools: list[Stubborn] = []

    async def main() -> headway.Outcome:
        tools.append(Stubborn(forever=True))
        gov = headway.Governor()
        gov.register("pay", tools[0].__call__, effect="write", timeout=0.05)
        return await gov.session("r").acall("pay", {"order": "o"}, idempotency_key="k")

    out = _returns(lambda: asyncio.run(main()))
    assert out.status is Status.UNKNOWN
    assert tools[0].closed and tools[0].charged == []


async def test_an_attempt_that_honours_its_cancellation_finishes_its_cleanup_first() -> None:
    """Cleanup that awaits (telling a server, closing a connection) gets its grace: the
    call returns after it, as a plain timeout."""
    cleaned: list[str] = []

    async def slow(q: str) -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await asyncio.sleep(0.01)  # say goodbye to the server
            cleaned.append(q)
            raise
        return "never"

    gov = headway.Governor()
    gov.register("slow", slow, effect="read", timeout=0.05, retry=headway.Retry(attempts=1))
    out = await _areturns(gov.session("r").acall("slow", {"q": "x"}))
    assert out.status is Status.ERROR and err(out)["code"] == "timeout" and cleaned == ["x"]


async def test_anyio_cancel_scopes_of_a_closed_tool_stay_in_the_callers_task() -> None:
    """A tool inside anyio cancel scopes (as MCP and httpx clients are), shielding its
    cleanup or swallowing the cancellation: the caller's task can use anyio afterwards
    (the tool is never resumed in another task, which breaks its scopes)."""
    anyio = pytest.importorskip("anyio")

    async def shielded(q: str) -> str:
        with anyio.CancelScope():
            try:
                await anyio.sleep(60)
            except asyncio.CancelledError:
                with anyio.CancelScope(shield=True):
                    await anyio.sleep(0.01)
                raise
        return "never"

    async def stubborn(q: str) -> str:
        with anyio.CancelScope():
            try:
                await anyio.sleep(60)
            except asyncio.CancelledError:
                await anyio.sleep(60)
        return "never"

    gov = headway.Governor()
    no_retry = headway.Retry(attempts=1)
    gov.register("shielded", shielded, effect="read", timeout=0.05, retry=no_retry)
    gov.register("stubborn", stubborn, effect="read", timeout=0.05, retry=no_retry)
    for name in ("shielded", "stubborn", "shielded"):
        out = await _areturns(gov.session("r").acall(name, {"q": name}))
        assert out.status is Status.ERROR and err(out)["code"] == "timeout"
        with anyio.move_on_after(0.01):  # the caller's own scopes still work
            await anyio.sleep(1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.sleep, 0)


# -- item 10: reconcile has a timeout of its own inside the call's deadline --------------


def _left_unknown(gov: headway.Governor, tool: Any) -> None:
    """A keyed write left UNKNOWN by a lost answer (it acted)."""
    out = gov.session("r").call("pay", {"order": "o"}, idempotency_key="k")
    assert out.status is Status.UNKNOWN and tool.count == 1


def test_a_hanging_reconcile_returns_by_the_calls_deadline_and_runs_nothing() -> None:
    release = threading.Event()

    def reconcile(key: str, args: Any) -> Any:
        release.wait(60)
        return None  # "absent", far too late: must not make it run again

    tool = ScriptedTool([ConnectionResetError("reset after acting"), "charged again"])
    gov = headway.Governor(deadline_s=5.0)
    gov.register("pay", tool, effect="write", timeout=0.2, reconcile=reconcile)
    try:
        _left_unknown(gov, tool)
        again = _returns(lambda: gov.session("r2").call("pay", {"order": "o"}, idempotency_key="k"))
    finally:
        release.set()
    assert again.status is Status.UNKNOWN and tool.count == 1
    assert "reconcile gave no answer within 0.2 s" in err(again)["message"]
    rkey = gov.idempotency_record_key("k")
    assert present(gov.store.get(rkey))["state"] == "unknown"


async def test_a_hanging_async_reconcile_returns_by_the_calls_deadline_and_runs_nothing() -> None:
    never = asyncio.Event()

    async def reconcile(key: str, args: Any) -> Any:
        await never.wait()
        return None

    tool = ScriptedTool([ConnectionResetError("reset after acting"), "charged again"])
    gov = headway.Governor(deadline_s=5.0)
    gov.register("pay", tool, effect="write", timeout=0.2, reconcile=reconcile)
    first = await gov.session("r").acall("pay", {"order": "o"}, idempotency_key="k")
    assert first.status is Status.UNKNOWN
    again = await _areturns(gov.session("r2").acall("pay", {"order": "o"}, idempotency_key="k"))
    assert again.status is Status.UNKNOWN and tool.count == 1
    assert "no answer within" in err(again)["message"]


def test_a_reconcile_gets_no_more_than_what_is_left_of_the_deadline() -> None:
    """A tool timeout longer than the call's deadline: the reconcile is cut at the
    deadline (0.3 s), not at the tool's 30 s."""
    release = threading.Event()
    tool = ScriptedTool([TimeoutError("no answer"), "again"])
    gov = headway.Governor(deadline_s=0.3)
    gov.register(
        "pay", tool, effect="write", timeout=30,
        reconcile=lambda key, args: release.wait(60) and None,
    )  # fmt: skip
    try:
        _left_unknown(gov, tool)
        again = _returns(lambda: gov.session("r").call("pay", {"order": "o"}, idempotency_key="k"))
    finally:
        release.set()
    assert again.status is Status.UNKNOWN and "within 0.3 s" in err(again)["message"]
    assert tool.count == 1


def test_an_unkeyed_repeat_reconciles_within_its_bound_too() -> None:
    release = threading.Event()
    tool = ScriptedTool([ConnectionResetError("reset"), "again"])
    gov = headway.Governor()
    gov.register(
        "pay", tool, effect="write", timeout=0.2,
        reconcile=lambda key, args: release.wait(60) and None,
    )  # fmt: skip
    s = gov.session("r")
    try:
        assert s.call("pay", {"order": "o"}).status is Status.UNKNOWN
        again = _returns(lambda: s.call("pay", {"order": "o"}))
    finally:
        release.set()
    assert again.status is Status.UNKNOWN and tool.count == 1


def test_a_deadline_spent_reconciling_runs_nothing_and_releases_the_key() -> None:
    """Reconcile confirms the write absent but took the whole deadline: the tool is not
    started with no time left; the key is released, so the next call runs it once."""
    clock = FakeClock()

    def reconcile(key: str, args: Any) -> Any:
        clock.advance(10)  # the reconcile took longer than the 5 s deadline
        return None

    tool = ScriptedTool([TimeoutError("no answer"), "charged"])
    gov = headway.Governor(clock=clock, sleep=clock.sleep, deadline_s=5.0)
    gov.register("pay", tool, effect="write", timeout=1.0, reconcile=reconcile)
    _left_unknown(gov, tool)
    spent = gov.session("r").call("pay", {"order": "o"}, idempotency_key="k")
    assert spent.status is Status.ERROR and err(spent)["code"] == "deadline_reached"
    assert tool.count == 1 and not spent.executed
    assert gov.store.get(gov.idempotency_record_key("k")) is None
    gov.register("pay", tool, effect="write", timeout=1.0, replace=True)
    last = gov.session("r").call("pay", {"order": "o"}, idempotency_key="k")
    assert last.status is Status.EXECUTED and tool.count == 2


@pytest.mark.parametrize("timeout", [None, 0.5])
def test_a_reconcile_that_answers_in_time_still_settles_the_key(timeout: float | None) -> None:
    tool = ScriptedTool([ConnectionResetError("reset"), "again"])
    gov = headway.Governor()
    gov.register(
        "pay", tool, effect="write", timeout=timeout,
        reconcile=lambda key, args: {"found": args["order"]},
    )  # fmt: skip
    _left_unknown(gov, tool)
    again = gov.session("r").call("pay", {"order": "o"}, idempotency_key="k")
    assert again.status is Status.REPLAYED and again.value == {"found": "o"}
    assert tool.count == 1
