"""Hostile results and endings never escape a call nor wedge a key (issue 31 item 7).

A keyed write whose result cannot be recorded (10,000 deep, a 5,000-digit int, an object
whose attributes raise) ran: its caller gets the result, the key is COMPLETED and a later
call neither runs it again nor replays a stand-in (None) as if it were the result. A tool
ending with GeneratorExit (or another BaseException that is not an interrupt) may have
acted: the write is UNKNOWN, never left in progress. A result whose __str__ and __repr__
raise is still shown to the model."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

import pytest

import headway
from conftest import err, present
from headway import Status


def _deep() -> Any:
    value: Any = []
    for _ in range(10_000):
        value = [value]
    return value


class AttributesRaise:
    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"no attribute {name} here")


class TextRaises:
    def __str__(self) -> str:
        raise TypeError("no str")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


UNRECORDABLE: dict[str, Callable[[], Any]] = {
    "10000-deep": _deep,
    "5000-digit-int": lambda: 10**5000,
    "getattr-raises": AttributesRaise,
}


@pytest.mark.parametrize("kind", sorted(UNRECORDABLE))
def test_a_keyed_write_whose_result_cannot_be_recorded_completes_and_never_replays_a_stand_in(
    store: headway.Store, kind: str
) -> None:
    made: list[Any] = []

    def pay(order: str) -> Any:
        made.append(UNRECORDABLE[kind]())
        return made[-1]

    worker_a = headway.Governor(store=store)
    worker_a.register("pay", pay, effect="write")
    first = worker_a.session("a").call("pay", {"order": "o"}, idempotency_key="k")
    assert first.status is Status.EXECUTED and first.value is made[0]
    assert isinstance(first.to_model(), str)  # shown as well as it can be, never raises
    record = present(store.get(worker_a.idempotency_record_key("k")))
    assert record["state"] == "completed" and record["unrecordable"]
    assert worker_a.writes.keeper.get(worker_a.idempotency_record_key("k")) is None
    # a fresh worker: the key is settled, the write is not run again, and the caller is
    # told it happened rather than handed None as its result
    worker_b = headway.Governor(store=store)
    worker_b.register("pay", pay, effect="write")
    for session in ("b", "a"):
        gov = worker_b if session == "b" else worker_a
        again = gov.session(session).call("pay", {"order": "o"}, idempotency_key="k")
        assert again.status is Status.ERROR and again.value is None and not again.executed
        assert err(again)["code"] == "unrecordable_result" and err(again)["retryable"] is False
        text = again.to_model()
        assert "already ran" in text and "not run again" in text and "Do not repeat" in text
    assert len(made) == 1


def test_a_late_result_that_cannot_be_recorded_settles_the_key_too() -> None:
    """An attempt abandoned at its timeout that then returns such a result: the keeper
    records the key COMPLETED (marked), never leaving it in progress; nothing runs again."""
    release = threading.Event()
    runs: list[int] = []

    def pay(order: str) -> Any:
        runs.append(1)
        release.wait(10)
        return _deep()

    gov = headway.Governor(lease_s=1.0)
    gov.register("pay", pay, effect="write", timeout=0.05)
    first = gov.session("r").call("pay", {"order": "o"}, idempotency_key="k")
    assert first.status is Status.UNKNOWN
    release.set()
    rkey = gov.idempotency_record_key("k")
    for _ in range(500):
        record = gov.store.get(rkey)
        if record is not None and record["state"] != "in_progress":
            break
        time.sleep(0.01)
    assert present(gov.store.get(rkey))["state"] == "completed"
    again = gov.session("r2").call("pay", {"order": "o"}, idempotency_key="k")
    assert again.status in (Status.REPLAYED, Status.ERROR) and len(runs) == 1
    if again.status is Status.ERROR:  # a stand-in is never replayed as the result
        assert err(again)["code"] == "unrecordable_result"
    else:  # this process still holds the late result itself
        assert isinstance(again.value, list)
    assert isinstance(again.to_model(), str)
    other = headway.Governor(store=gov.store)
    other.register("pay", pay, effect="write")
    elsewhere = other.session("r3").call("pay", {"order": "o"}, idempotency_key="k")
    assert elsewhere.status is Status.ERROR and err(elsewhere)["code"] == "unrecordable_result"
    assert len(runs) == 1


class Stopped(BaseException):
    """A BaseException a library might raise that is neither an interrupt nor an exit."""


@pytest.mark.parametrize("ending", [GeneratorExit, Stopped], ids=lambda e: e.__name__)
def test_a_write_ending_with_a_base_exception_is_unknown_not_in_progress(
    store: headway.Store, ending: type[BaseException]
) -> None:
    charged: list[str] = []

    def pay(order: str) -> Any:
        charged.append(order)
        raise ending()

    gov = headway.Governor(store=store)
    gov.register("pay", pay, effect="write", reconcile=lambda key, args: None)
    out = gov.session("r").call("pay", {"order": "o"}, idempotency_key="k")
    assert out.status is Status.UNKNOWN and out.attempts == 1 and charged == ["o"]
    assert err(out)["code"] == "interrupted" and ending.__name__ in err(out)["message"]
    rkey = gov.idempotency_record_key("k")
    assert present(gov.store.get(rkey))["state"] == "unknown"
    assert gov.writes.keeper.get(rkey) is None

    # its next use reconciles (absent here) and runs it once more, as for any UNKNOWN
    def pay_again(order: str) -> str:
        charged.append(order)
        return "ok"

    gov.register("pay", pay_again, effect="write", reconcile=lambda k, a: None, replace=True)
    again = gov.session("r").call("pay", {"order": "o"}, idempotency_key="k")
    assert again.status is Status.EXECUTED and charged == ["o", "o"]
    unkeyed = gov.session("u").call("pay", {"order": "u"})
    assert unkeyed.status is Status.EXECUTED


async def test_an_async_write_ending_with_generator_exit_is_unknown() -> None:
    async def pay(order: str) -> Any:
        await asyncio.sleep(0)
        raise GeneratorExit

    gov = headway.Governor()
    gov.register("pay", pay, effect="write")
    out = await gov.session("r").acall("pay", {"order": "o"}, idempotency_key="k")
    assert out.status is Status.UNKNOWN
    assert present(gov.store.get(gov.idempotency_record_key("k")))["state"] == "unknown"
    unkeyed = await gov.session("r").acall("pay", {"order": "x"})
    assert unkeyed.status is Status.UNKNOWN


def test_a_read_ending_with_generator_exit_is_an_error_outcome() -> None:
    def look(q: str) -> Any:
        raise GeneratorExit

    gov = headway.Governor()
    gov.register("look", look, effect="read", timeout=None)
    gov.register("look_thread", look, effect="read")  # in a pool thread: same
    for name in ("look", "look_thread"):
        out = gov.session("r").call(name, {"q": "x"})
        assert out.status is Status.ERROR and err(out)["retryable"] is False
        assert "GeneratorExit" in err(out)["message"]


def test_a_reconcile_ending_with_generator_exit_leaves_the_key_unknown() -> None:
    def reconcile(key: str, args: Any) -> Any:
        raise GeneratorExit

    gov = headway.Governor()
    gov.register(
        "pay", headway.testing.ScriptedTool([TimeoutError("lost")]), effect="write",
        reconcile=reconcile,
    )  # fmt: skip
    s = gov.session("r")
    assert s.call("pay", {"order": "o"}, idempotency_key="k").status is Status.UNKNOWN
    again = s.call("pay", {"order": "o"}, idempotency_key="k")
    assert again.status is Status.UNKNOWN and "GeneratorExit" in err(again)["message"]


@pytest.mark.parametrize("effect", ["read", "write"])
def test_a_result_whose_str_and_repr_raise_is_still_shown_to_the_model(
    effect: Literal["read", "write"],
) -> None:
    gov = headway.Governor()
    gov.register("t", lambda q: TextRaises(), effect=effect)
    outs = [gov.session("r").call("t", {"q": 1})]
    if effect == "write":
        outs.append(gov.session("r").call("t", {"q": 2}, idempotency_key="k"))
    for out in outs:
        assert out.status is Status.EXECUTED
        text = out.to_model()
        assert "TextRaises" in text  # named, since it cannot be written out
    assert len(gov.audit_records("r")) == len(outs)


def test_render_falls_back_for_any_failure_of_a_results_text() -> None:
    from headway.outcome import render

    assert "TextRaises" in render(TextRaises())
    assert "list" in render(_deep())
    assert "int" in render(10**5000)
